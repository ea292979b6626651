"""DRAGON (Lin, Yeh, Chou; CLOSER 2019): gang scheduling with task dependencies, locality-aware
placement and load-aware scaling, for parameter-server training jobs on Kubernetes.

Modelled on the authors' released controller (NTHU-LSALAB/DRAGON, `scheduling.go`), which runs
three phases on every reconcile over a FIFO waiting queue and a running queue:

1. Anti-starvation: when the head of the waiting queue has waited `starvation_s` (30 s), running
   jobs give back workers — loneliest first (away from their PS), never a PS, never below their
   minimum — until the head's PSs and minimum workers fit. If they can never fit, nothing
   changes, and phase 2 is skipped this round (the head keeps its claim on what frees up next;
   `backfill_past_starving=True` lets later jobs start anyway, which helps rigid traces where
   no running job can shrink).
2. Gang + locality: waiting jobs in FIFO order are placed all PSs plus between their requested
   and minimum workers at once, on one node when possible, else on the fewest nodes. The released
   controller starts one job per reconcile and reconciles continuously; one call here starts every
   job that fits, which is what a burst of reconciles does.
3. Load-aware scale-up: when nothing has happened (no arrival, completion, start or resize) for
   `idle_s` (60 s) and nobody waits, running jobs grow towards their maximum — jobs that were
   shrunk below their requested size first, then in the order they started — within the racks
   they already use.

Each capability can be switched off for ablation:
- `gang=False`: tasks are bound one at a time as they fit (PSs first) and a job runs only once all
  its requested tasks are bound; partial jobs hold their resources (`Plan.held`), as under the
  default Kubernetes scheduler.
- `locality=False`: tasks go to the least-allocated nodes (kube-scheduler's spreading), and
  scale-up fills nodes in index order as the released controller does.
- `scaling=False`: no scale-down and no scale-up; jobs start at their requested size (or as few
  as their minimum when that is all that fits) and keep it.

Departures, and why: the released controller times phases with wall-clock reconciles; here the
policy asks the engine to wake it when a timer expires (`Plan.wake_at`), which is the same
behaviour without a polling tick. Phase 3 only runs when no job waits: growing jobs while one
waits would be undone by phase 1 thirty seconds later at the price of two restarts per job
(the paper's "grow them when the cluster is idle").

Three departures make load-aware scaling pay on real traces whose jobs run on measured, sublinear
curves (issue 14; before them DRAGON was slower than gang FIFO on ITP 195job at load 0.8:
docs/DECISIONS.md has the figures):
- Workers a job got beyond its requested size are borrowed from idle capacity: when a waiting job
  (starving or not) does not fit at its requested size, running jobs give back borrowed workers
  first, never below their own requested size (`_reclaim`), before it is started smaller or anyone
  is shrunk below what they asked for. Without it a newcomer started at whatever the grown jobs
  left (often 1 GPU of 8 asked for) and stayed there while they kept their borrowed GPUs.
- Scale-up restores jobs shrunk below their requested size before growing others.
- Scale-up never spills a job into a new rack (`grow_order(new_racks=False)`): its ring or PS
  traffic would cross the spine, and on the measured curves such a job ran slower than before it
  grew (a vgg16 job grown from 8 to ~28 GPUs over two racks ran 2.5x slower than its trace duration).
"""

from __future__ import annotations

import math

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.core.plan import Plan
from dlsched.core.policy import Policy
from dlsched.framework.packing import add_use
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.policies.phases.gang import Gang, bind_pods
from dlsched.policies.phases.locality import Locality
from dlsched.policies.phases.placement import Spread
from dlsched.policies.phases.queues import Line
from dlsched.policies.phases.scaling import scale_down_until, scale_up
from dlsched.policies.phases.sizing import ps_for


class Dragon(Policy):
    """See the module docstring."""

    def __init__(
        self,
        starvation_s: float = 30.0,
        idle_s: float = 60.0,
        gang: bool = True,
        locality: bool = True,
        scaling: bool = True,
        name: str = "dragon",
        backfill_past_starving: bool = False,
    ):
        if not (starvation_s >= 0 and idle_s >= 0) or math.isinf(starvation_s) or math.isinf(idle_s):
            raise ConfigError(f"dragon: starvation_s and idle_s must be finite and >= 0, got {starvation_s}, {idle_s}")
        self.starvation_s = float(starvation_s)
        self.idle_s = float(idle_s)
        self.gang = gang
        self.locality = locality
        self.scaling = scaling
        self.backfill_past_starving = backfill_past_starving
        self.name = name
        placement = Locality() if locality else Spread()
        self.place = Gang(placement)
        self.reset(None, 0)

    def reset(self, cluster: Cluster | None, seed: int) -> None:
        self._last_action = 0.0
        self._line = Line()  # waiting jobs in arrival order, by gang shape
        self._rigid = True  # no job seen so far can change size: nothing to scale down or up

    def _follow(self, snap: Snapshot) -> None:
        """Keep the waiting line by the snapshot's deltas; rebuild it when its count disagrees."""
        line = self._line
        for job in (*snap.arrived, *snap.stopped):
            self._rigid &= job.spec.max_workers == job.spec.min_workers
            if job.job_id not in line:
                line.add(job, job.rank, _shape(job.spec) if self.gang else None)
        for job in snap.finished:
            line.remove(job.job_id)
        if len(line) != snap.num_pending:
            line = self._line = Line()
            for job in snap.pending:
                line.add(job, job.rank, _shape(job.spec) if self.gang else None)
            self._rigid = all(j.spec.max_workers == j.spec.min_workers for j in (*snap.running, *snap.pending))

    # ------------------------------------------------------------------ the three phases
    def schedule(self, snap: Snapshot) -> Plan:
        now = snap.now
        if {"arrival", "completion"} & set(snap.events):
            self._last_action = now
        self._follow(snap)
        line = self._line
        plan = Plan(keep_running=True)  # lists only the jobs that start or change size
        if not self.gang:
            plan.held = {j.job_id: j.held for j in snap.pending if j.held is not None}
        free = np.array(snap.free, dtype=float)
        acted = False

        head = next(line.walk(), None)
        try_queue = True
        if self.scaling and head is not None and head.waiting_since(now) >= self.starvation_s:
            shrunk = self._scale_down_for(snap, head, free)
            if shrunk is None:
                try_queue = self.backfill_past_starving
            elif shrunk:
                plan.allocations.update(shrunk)
                acted = True

        if try_queue:
            failed: set[tuple] = set()  # gang shapes that did not fit: free only shrinks this call
            started = []
            for job in line.walk(skip=failed.__contains__ if self.gang else None):
                if self._start(snap, job, free, plan):
                    acted = True
                    if job.job_id in plan.allocations:
                        started.append(job.job_id)
                elif self.gang:
                    failed.add(_shape(job.spec))
            for jid in started:
                line.remove(jid)

        first_waiting = next(line.walk(), None)
        if (self.scaling and not self._rigid and first_waiting is None and snap.num_running
                and now - self._last_action >= self.idle_s):
            allocs = {j.job_id: j.allocation for j in snap.running} | plan.allocations
            order = sorted(_by_start(snap), key=lambda j: allocs[j.job_id].num_workers >= j.spec.num_workers)
            grown = scale_up(snap.cluster, order, allocs, free, local_first=self.locality)
            if grown:
                plan.allocations.update(grown)
                acted = True
        if acted:
            self._last_action = now
        plan.wake_at = self._next_timer(now, first_waiting, bool(snap.num_running or plan.allocations))
        return plan

    def _scale_down_for(self, snap: Snapshot, head: JobState, free: np.ndarray) -> dict[str, Allocation] | None:
        spec = head.spec

        def fits(room: np.ndarray) -> bool:
            if not self.gang:  # pod by pod: the head needs all of its still-unbound tasks
                return bind_pods(snap.cluster, room, spec, head.held, spec.num_workers, spec.num_ps)[1]
            return self.place.place(snap.cluster, room, spec, spec.min_workers, spec.num_ps) is not None

        # the released controller walks the running queue in order; jobs already at their
        # minimum have nothing to give (and when every job is rigid, none has)
        if self._rigid:
            return scale_down_until([], {}, free, fits)
        if self.gang and (lent := self._reclaim(snap, spec, free, {})):
            return lent
        allocs = {j.job_id: j.allocation for j in snap.running}
        donors = [j for j in _by_start(snap) if allocs[j.job_id].num_workers > j.spec.min_workers]
        return scale_down_until(donors, allocs, free, fits)

    def _reclaim(self, snap: Snapshot, spec: JobSpec, free: np.ndarray,
                 planned: dict[str, Allocation]) -> dict[str, Allocation] | None:
        """Running jobs' workers beyond their requested size, given back (loneliest first, never
        below the lender's requested size) until `spec` fits at its requested size; `free` then
        includes them. None, and nothing changed, when it fits already or cannot be made to."""
        if self._rigid:
            return None
        w = spec.num_workers
        ps = ps_for(spec, w, spec.num_ps)

        def fits(room: np.ndarray) -> bool:
            return self.place.placement.place(snap.cluster, room, spec, w, ps) is not None

        allocs = {j.job_id: j.allocation for j in snap.running} | planned
        lenders = [j for j in _by_start(snap) if allocs[j.job_id].num_workers > j.spec.num_workers]
        if not lenders or fits(free):
            return None
        return scale_down_until(lenders, allocs, free, fits, floor=lambda j: j.spec.num_workers) or None

    def _start(self, snap: Snapshot, job: JobState, free: np.ndarray, plan: Plan) -> bool:
        spec = job.spec
        if self.gang:
            if lent := self._reclaim(snap, spec, free, plan.allocations):
                plan.allocations.update(lent)
            alloc = self.place.place(snap.cluster, free, spec, spec.num_workers, spec.num_ps)
            if alloc is None:
                return False
            add_use(free, spec, alloc, -1.0)
            plan.assign(job.job_id, alloc)
            return True
        # pod by pod: free already excludes what the job holds, so only the rest is bound now
        before = job.held
        bound, complete = bind_pods(
            snap.cluster, free, spec, before, spec.num_workers, spec.num_ps, local_first=self.locality
        )
        if bound is None:
            return False
        if bound != before:
            new = _minus(bound, before)
            add_use(free, spec, new, -1.0)
        if complete:
            plan.held.pop(job.job_id, None)
            plan.assign(job.job_id, bound)
            return True
        plan.held[job.job_id] = bound
        return bound != before

    def _next_timer(self, now: float, first_waiting: JobState | None, anything_runs: bool) -> float | None:
        if not self.scaling:
            return None
        times = []
        if first_waiting is not None:
            due = now + max(0.0, self.starvation_s - first_waiting.waiting_since(now))
            if due > now:
                times.append(due)
        elif anything_runs and self._last_action + self.idle_s > now:
            times.append(self._last_action + self.idle_s)
        return min(times) if times else None


def _by_start(snap: Snapshot) -> list[JobState]:
    """The running queue: in the order jobs started."""
    return sorted(snap.running, key=lambda j: (j.first_start or 0.0, j.rank))


def _shape(spec: JobSpec) -> tuple:
    """What decides whether a gang fits: two jobs of one shape fit the same free nodes."""
    steps = spec.extra.get("ps_steps")  # the PS count of a gang (`ps_for`) may follow a table
    return (spec.num_workers, spec.num_ps, spec.min_workers, spec.min_ps, spec.max_ps, spec.worker_demand,
            spec.ps_demand, spec.gpu_type, tuple(map(tuple, steps)) if steps else None)


def _minus(a: Allocation, b: Allocation | None) -> Allocation:
    """Tasks in `a` that are not in `b` (b ⊆ a, node by node)."""
    if b is None:
        return a
    d = a.as_dict()
    for n, (w, p) in b.as_dict().items():
        aw, ap = d[n]
        d[n] = (aw - w, ap - p)
    return Allocation.of(d)


def dragon(
    starvation_s: float = 30.0,
    idle_s: float = 60.0,
    gang: bool = True,
    locality: bool = True,
    scaling: bool = True,
    backfill_past_starving: bool = False,
) -> Dragon:
    """DRAGON; switch `gang`, `locality` or `scaling` off for its ablations."""
    parts = [n for n, on in (("gang", gang), ("locality", locality), ("scaling", scaling)) if not on]
    name = "dragon" + "".join(f"-no-{p}" for p in parts) + ("-backfill" if backfill_past_starving else "")
    return Dragon(starvation_s, idle_s, gang, locality, scaling, name=name,
                  backfill_past_starving=backfill_past_starving)
