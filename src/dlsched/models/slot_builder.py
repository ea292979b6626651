"""One scheduling slot built task by task: the state an RL scheduler sees, the actions it may take,
and the Plan its choices add up to.

DL2 (Peng et al., TPDS 2021) decides a slot by calling its network repeatedly: each call adds one
worker, one PS or one bundle (worker + PS) to one job of a window of J jobs, or ends the slot.
This class is that loop's bookkeeping, separate from any network, so the Gymnasium environment,
the DL2 policy and the supervised warm-up (which replays a heuristic's decisions as actions) all
build slots the same way.

State (6 × J, jobs in arrival order, jobs already at both caps left out, zero-padded), the rows of
DL2's code, scaled so every row is O(1) for the network:
  0. job type / NUM_TYPES (DL2 models 1..8; other jobs by requested-GPU bucket, see `job_type`)
  1. slots spent in the system / 10
  2. remaining fraction of the work (1 − progress / total). The total is the declared work when
     `spec.work_known`; otherwise the Optimus-style estimate (`estimators.RemainingWork`): a live
     system sees nothing more.
  3. dominant share allocated to the job so far in this slot
  4. workers this slot / MAX_TASKS
  5. PSs this slot / MAX_TASKS
Actions: 3i = one more worker for window job i, 3i+1 = one more PS, 3i+2 = a bundle, 3J = end the
slot. An action is valid when the job exists, stays within its maximum, is of the right kind (only
PS jobs take PSs and bundles) and its task(s) fit somewhere now.
Tasks go to the least-loaded node that fits (DL2's placement). Before any action every job gets
its minimum gang if it fits (DL2's `ASSIGN_BUNDLE`, generalised to jobs whose minimum is more than
one worker) in the order of DL2's teacher, DRF: the smallest minimum gang (dominant share) first,
then arrival, decided on the cluster's aggregate room as DRF's filling is; the running jobs that get
one keep it where they run (a rigid job its whole allocation: a slot restarts a job it cannot
resize only when smaller jobs took its room, as DRF would), then the others are placed. DL2's own
jobs all start at one worker (one bundle), so for them this is arrival order, as in DL2; for rigid
trace jobs of 1 to 64 GPUs the order decides everything the network cannot (docs/DL2.md, "Rigid jobs").

Between slots (`SlotBuilder(..., between_slots=True)`, on an arrival or a completion) the same
walk starts waiting jobs at their minimum gang, every running job holding what it has (the network
resizes only at slots) or stopping when smaller jobs ahead of it need the room, as DRF does at
every event. `fill_free` then gives what is still free to jobs that can grow, on nodes they hold
(the DL2 policy calls it after the network's last action too: docs/DL2.md, issue 29).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.job import Architecture, JobSpec
from dlsched.core.plan import Plan
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.estimators.progress_predictor import RemainingWork
from dlsched.framework.packing import add_use, eligible
from dlsched.framework.scoring import best_node, fitting_nodes, least_loaded
from dlsched.framework.scoring import dominant_share

ROWS = 6
NUM_TYPES = 8
MAX_TASKS = 16.0
WORKER, PS, BUNDLE = 0, 1, 2
_DL2_MODELS = ("resnet-50", "vgg-16", "resnext-110", "inception-bn", "seq2seq", "cnn-text-classification", "dssm", "wlm")
_EPS = 1e-9


def job_type(spec: JobSpec) -> int:
    """1..NUM_TYPES: DL2's model index for 'dl2:<model>' jobs, else 1 + log2 of the requested GPUs
    (1, 2, 4, ... GPUs → 1, 2, 3, ...), capped: on traces without models, size is the type."""
    if spec.model.startswith("dl2:") and spec.model[4:] in _DL2_MODELS:
        return _DL2_MODELS.index(spec.model[4:]) + 1
    return int(min(NUM_TYPES, 1 + math.floor(math.log2(max(1.0, spec.num_workers)))))


def action_dim(window: int) -> int:
    return 3 * window + 1


def _task_demand(spec: JobSpec, role: int) -> np.ndarray:
    """One task's resource vector: a worker's, or a PS's."""
    return np.asarray(spec.worker_demand if role == WORKER else spec.ps_demand, dtype=float)


class SlotBuilder:
    """Builds one slot's allocation from actions. Create one per decision (per Snapshot)."""

    def __init__(self, snap: Snapshot, window: int, slot_seconds: float, remaining: RemainingWork | None = None,
                 between_slots: bool = False):
        self.snap = snap
        self.window = window
        self.slot_seconds = slot_seconds
        self.between_slots = between_slots
        self.cluster = snap.cluster
        self.capacity_total = np.maximum(snap.cluster.capacity.sum(axis=0), _EPS)
        self.free = snap.cluster.capacity.astype(float).copy()
        self.jobs = sorted(snap.running + snap.pending, key=lambda j: j.rank)
        self.preempt: set[str] = set()  # between slots: running jobs stopped for smaller ones
        self.counts: dict[str, dict[int, list[int]]] = {j.job_id: {} for j in self.jobs}
        self._totals: dict[str, list[int]] = {j.job_id: [0, 0] for j in self.jobs}  # workers, PSs
        self._window: list[JobState] | None = None
        self._fit_cache: dict[tuple, bool] = {}  # (task demands, gpu type) -> fits now
        self._shares: dict[tuple, float] = {}  # (worker demand, PS demand, workers, PSs) -> dominant share
        self._fixed: dict[str, tuple[float, float, float]] = {}  # a job's state rows 0-2: fixed within a slot
        self.remaining = remaining
        # between slots nothing reads the state: skip the estimates (a call per waiting job)
        self._remaining_fraction = {} if between_slots else {j.job_id: self._remaining_of(j) for j in self.jobs}
        self._assign_minimum_gangs()

    # ------------------------------------------------------------------ bookkeeping
    def _remaining_of(self, job: JobState) -> float:
        done = job.progress
        if job.declared_work is not None:
            return max(0.0, 1.0 - done / job.declared_work)
        if self.remaining is None:
            return 1.0 if done <= 0 else 0.5
        est = self.remaining.estimate(job)
        if not math.isfinite(est.remaining):
            return 1.0
        return float(est.remaining / max(est.remaining + done, _EPS))

    def workers(self, job: JobState) -> int:
        return self._totals[job.job_id][WORKER]

    def ps(self, job: JobState) -> int:
        return self._totals[job.job_id][PS]

    def _changed(self) -> None:
        self._window = None
        self._fit_cache.clear()

    def share(self, job: JobState) -> float:
        """The job's dominant share of what the slot gave it so far (cached by demand and counts:
        the state asks it for every window job at every action, and jobs repeat a few shapes)."""
        w, p = self._totals[job.job_id]
        spec = job.spec
        key = (spec.worker_demand, spec.ps_demand, w, p)
        share = self._shares.get(key)
        if share is None:
            share = self._shares[key] = float(dominant_share(spec.demand(w, p), self.capacity_total))
        return share

    def _node_for(self, spec: JobSpec, demand: np.ndarray, prefer: np.ndarray | None = None) -> int:
        return best_node(self.free, self.cluster.capacity, demand, least_loaded, eligible(self.cluster, spec), prefer)

    def _own_nodes(self, job: JobState) -> np.ndarray | None:
        """Where an all-reduce job's next worker should go if it fits: the nodes it already has.
        Its measured curve is packed, and a ring spread over more nodes than needed pays an
        inter-node all-reduce per step; PS jobs keep DL2's plain least-loaded placement."""
        if job.spec.arch is not Architecture.ALLREDUCE or not self.counts[job.job_id]:
            return None
        return self._held_nodes(job)

    def _held_nodes(self, job: JobState) -> np.ndarray:
        """Mask of the nodes where the slot has given the job a task so far."""
        mine = np.zeros(len(self.free), dtype=bool)
        mine[[n for n, (w, p) in self.counts[job.job_id].items() if w or p]] = True
        return mine

    def _add(self, job: JobState, role: int) -> int:
        """Place one task on the least-loaded node that fits; returns the node, or -1."""
        demand = _task_demand(job.spec, role)
        node = self._node_for(job.spec, demand, self._own_nodes(job))
        if node >= 0:
            self._place(job, node, role, 1, demand)
        return node

    def _place(self, job: JobState, node: int, role: int, n: int, demand: np.ndarray | None = None) -> None:
        """Put `n` tasks of `role` of `job` on `node` (n < 0 takes them off): the one place the
        free room, the per-node counts and the totals change together. `demand`: one task's, if
        the caller has it."""
        if demand is None:
            demand = _task_demand(job.spec, role)
        self.free[node] -= n * demand
        self.counts[job.job_id].setdefault(node, [0, 0])[role] += n
        self._totals[job.job_id][role] += n
        self._changed()

    def _keep(self, job: JobState, whole: bool) -> None:
        """A running job keeps its minimum gang (`whole`: everything it holds) on the nodes it
        runs on (PSs first, then workers, node by node): a subset of what it holds, so it always
        fits, and a job at its minimum (every rigid job) keeps its allocation exactly."""
        spec, alloc = job.spec, job.allocation
        need = {PS: alloc.num_ps if whole else spec.min_ps, WORKER: alloc.num_workers if whole else spec.min_workers}
        for node, w, p in zip(alloc.nodes, alloc.workers, alloc.ps):
            for role, have in ((PS, p), (WORKER, w)):
                take = min(have, need[role])
                if take:
                    self._place(job, node, role, take)
                    need[role] -= take

    def _remove(self, job: JobState, node: int, role: int) -> None:  # undo one `_add`
        self._place(job, node, role, -1)

    def _assign_minimum_gangs(self) -> None:
        """Every job's minimum gang, in the order of DL2's teacher, DRF: smallest dominant share
        first, then arrival. Which jobs get one is decided on the cluster's aggregate room (as
        DRF's filling does); then the running ones among them keep their minimum where they run
        and only then are the others placed, task by task. A running job is stopped only when
        smaller jobs ahead of it took the room, as DRF would stop it; one that keeps its size
        keeps its nodes. Between slots a running job holds all it has (the network resizes at
        slots only), and what it holds counts against the room."""
        shares: dict[tuple, tuple[float, np.ndarray]] = {}  # most jobs share a few gang shapes

        def gang(spec: JobSpec) -> tuple[float, np.ndarray]:
            key = (spec.min_workers, spec.min_ps, spec.worker_demand, spec.ps_demand)
            if key not in shares:
                need = spec.demand(spec.min_workers, spec.min_ps).astype(float)
                shares[key] = (float(dominant_share(need, self.capacity_total)), need)
            return shares[key]

        def holds(job: JobState) -> np.ndarray:
            a = job.allocation
            if a is not None and self.between_slots:
                return job.spec.demand(a.num_workers, a.num_ps).astype(float)
            return gang(job.spec)[1]

        room = self.free.sum(axis=0) + _EPS
        admitted: list[JobState] = []
        for job in sorted(self.jobs, key=lambda j: (gang(j.spec)[0], j.rank)):
            need = holds(job)
            if (need <= room).all():
                room -= need
                admitted.append(job)
            elif job.allocation is not None:
                self.preempt.add(job.job_id)
        waiting = []
        for job in admitted:
            if job.allocation is not None:
                self._keep(job, whole=self.between_slots)
            else:
                waiting.append(job)
        for job in waiting:
            spec = job.spec
            placed: list[tuple[int, int]] = []
            for role in [PS] * spec.min_ps + [WORKER] * spec.min_workers:
                node = self._add(job, role)
                if node < 0:
                    for node, role in placed:
                        self._remove(job, node, role)
                    self.counts[job.job_id] = {}
                    self._totals[job.job_id] = [0, 0]
                    break
                placed.append((node, role))

    def fill_free(self) -> None:
        """What is still free once the slot is decided (after the network's last action, or after
        the waiting jobs' minimum gangs between slots) goes to the jobs that hold some and can
        grow, one worker at a time to the smallest dominant share, on a node the job already
        holds: DRF's progressive filling of what is left, nothing taken from any job. Without it
        a GPU that the network left, or that a completion freed, stayed idle until an event or
        the next slot: on ITP cluster03's 3,011 raw jobs read elastic at load 0.8, 23 of 176 GPUs
        in the busiest 200 hours while jobs could grow, and dl2's mean JCT was 1.25x DRF's
        (docs/DL2.md). PS jobs are left to the network (a worker without a PS is not how they
        grow)."""
        heap = [(self.share(j), j.rank, i, j) for i, j in enumerate(self.jobs)
                if j.spec.arch is not Architecture.PS and 0 < self.workers(j) < j.spec.max_workers]
        heapq.heapify(heap)
        while heap:
            _, rank, i, job = heapq.heappop(heap)
            if self._add_on_own_node(job) and self.workers(job) < job.spec.max_workers:
                heapq.heappush(heap, (self.share(job), rank, i, job))

    def _add_on_own_node(self, job: JobState) -> bool:
        """One more worker for the job on a node it already holds (least loaded), if one has room.
        The fill never spreads a job onto another node: on measured curves a ring over more nodes
        is slower, and filling onto any node made dl2's mean JCT on ITP cluster03's drawn-curve
        form 13.96 h instead of 13.22 h without the fill (13.00 h on own nodes only)."""
        demand = _task_demand(job.spec, WORKER)
        mine = self._held_nodes(job)
        allowed = eligible(self.cluster, job.spec)
        allowed = mine if allowed is None else allowed & mine
        node = best_node(self.free, self.cluster.capacity, demand, least_loaded, allowed)
        if node >= 0:
            self._place(job, node, WORKER, 1, demand)
        return node >= 0

    # ------------------------------------------------------------------ the agent's view
    def window_jobs(self) -> list[JobState]:
        """The first `window` jobs (arrival order) that can still grow in at least one way."""
        if self._window is not None:
            return self._window
        out: list[JobState] = []
        for job in self.jobs:
            s = job.spec
            if self.workers(job) < s.max_workers or (s.arch is Architecture.PS and self.ps(job) < s.max_ps):
                out.append(job)
                if len(out) == self.window:
                    break
        self._window = out
        return out

    def state(self) -> np.ndarray:
        x = np.zeros((ROWS, self.window), dtype=np.float32)
        jobs = self.window_jobs()
        if jobs:  # one conversion of the columns (rows 0-2 do not change within a slot)
            x[:, :len(jobs)] = np.array([self._fixed_rows(job) + (self.share(job), self.workers(job) / MAX_TASKS,
                                                                  self.ps(job) / MAX_TASKS) for job in jobs],
                                        dtype=np.float32).T
        return x

    def _fixed_rows(self, job: JobState) -> tuple[float, float, float]:
        """Rows 0-2 of the job's column: its type, slots in the system / 10, remaining fraction."""
        rows = self._fixed.get(job.job_id)
        if rows is None:
            rows = self._fixed[job.job_id] = (job_type(job.spec) / NUM_TYPES,
                                              (self.snap.now - job.spec.submit_time) / self.slot_seconds / 10.0,
                                              self._remaining_fraction[job.job_id])
        return rows

    def mask(self) -> np.ndarray:
        m = np.zeros(action_dim(self.window), dtype=bool)
        m[-1] = True
        for i, job in enumerate(self.window_jobs()):
            for kind in (WORKER, PS, BUNDLE):
                m[3 * i + kind] = self._valid(job, kind)
        return m

    def _valid(self, job: JobState, kind: int) -> bool:
        s = job.spec
        workers, ps = self._totals[job.job_id]
        if ps < s.min_ps or workers < s.min_workers:  # its minimum did not fit: growing part of a job that cannot run is waste
            return False
        want_w = kind in (WORKER, BUNDLE)
        want_p = kind in (PS, BUNDLE)
        if want_p and (s.arch is not Architecture.PS or ps >= s.max_ps):
            return False
        if want_w and workers >= s.max_workers:
            return False
        key = ((s.ps_demand,) if want_p else ()) + ((s.worker_demand,) if want_w else ()) + (s.gpu_type,)
        hit = self._fit_cache.get(key)
        if hit is None:
            tasks = [np.asarray(d, dtype=float) for d in key[:-1]]
            hit = self._fit_cache[key] = self._fits(s, tasks)
        return hit

    def _fits(self, spec: JobSpec, tasks: list[np.ndarray]) -> bool:
        """Whether the tasks, placed one after the other as `_add` would, all find a node."""
        if len(tasks) == 1:  # one task: whether any node has room (`best_node` without the scores)
            return bool(fitting_nodes(self.free, tasks[0], eligible(self.cluster, spec)).any())
        saved = self.free
        self.free = saved.copy()
        try:
            for demand in tasks:
                node = self._node_for(spec, demand)
                if node < 0:
                    return False
                self.free[node] -= demand
            return True
        finally:
            self.free = saved

    def apply(self, action: int) -> bool:
        """Apply one action; returns False when it ends the slot. Raises on an invalid action."""
        if action == action_dim(self.window) - 1:
            return False
        jobs = self.window_jobs()
        i, kind = divmod(int(action), 3)
        if not (0 <= i < len(jobs)) or not self._valid(jobs[i], kind):
            raise ValueError(f"action {action} is not valid in this state (see the action mask)")
        job = jobs[i]
        if kind in (PS, BUNDLE):
            self._add(job, PS)
        if kind in (WORKER, BUNDLE):
            self._add(job, WORKER)
        return True

    def action_for(self, job: JobState, kind: int) -> int | None:
        """The action index that gives `job` a task of `kind` now, or None if it is not valid."""
        for i, j in enumerate(self.window_jobs()):
            if j is job:
                return 3 * i + kind if self._valid(job, kind) else None
        return None

    def plan(self) -> Plan:
        """Every job with at least its minimum gang, at what the slot gave it. A job whose size is
        unchanged keeps its current nodes when they are free in this plan, so it does not restart."""
        plan = Plan()
        for job in self.jobs:
            alloc = Allocation.of(self.counts[job.job_id])  # nodes given nothing are dropped
            if not alloc.nodes:
                continue  # waits, or (a running job between slots) is stopped: `preempt`
            if self.between_slots and alloc == job.allocation:
                continue  # kept as it runs (`keep_running`); one the fill grew is resized
            s = job.spec
            if alloc.num_workers < s.min_workers or alloc.num_ps < s.min_ps:
                continue
            plan.assign(job.job_id, alloc)
        if self.between_slots:
            plan.keep_running, plan.preempt = True, set(self.preempt)
            return plan
        return _keep_unchanged(plan, self.snap)


def _keep_unchanged(plan: Plan, snap: Snapshot) -> Plan:
    """Swap in a job's current allocation when its counts did not change and the swap fits
    (checked against every other planned allocation), so the engine does not restart it."""
    by_id = {j.job_id: j for j in snap.running}
    specs = {j.job_id: j.spec for j in snap.running + snap.pending}
    used = np.zeros_like(snap.cluster.capacity, dtype=float)
    for jid, a in plan.allocations.items():
        s = specs[jid]
        add_use(used, s, a)
    for jid, new in list(plan.allocations.items()):
        job = by_id.get(jid)
        if job is None or job.allocation is None or job.allocation == new:
            continue
        old = job.allocation
        if (old.num_workers, old.num_ps) != (new.num_workers, new.num_ps):
            continue
        trial = used.copy()
        add_use(trial, job.spec, new, -1.0)
        add_use(trial, job.spec, old)
        if (trial <= snap.cluster.capacity + _EPS).all():
            used = trial
            plan.allocations[jid] = old
    return plan
