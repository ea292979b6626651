"""Tiresias (Gu et al., NSDI 2019): discretized two-dimensional LAS, information-agnostic.

A job's priority is its attained service in GPU-seconds (GPUs x time held: "2D"), discretized
into queues by `thresholds`: Q0 below 3250, Q1 below 7200, Q2 below 18000, Q3 beyond. Short jobs
finish in Q0 before long ones get a look-in, without anyone knowing durations.

Faithful to the authors' simulator (`SymbioticLab/Tiresias`, `run_sim.py` dlas-gpu):
- Every job enters Q0 and is demoted as soon as its service in the queue reaches the threshold.
- Within a queue jobs are in the order they entered it (arrival, demotion or promotion), except
  that after each round running jobs move ahead of waiting ones (the simulator re-partitions each
  queue that way): so a job never preempts a job of its own queue, and a preempted job heads its
  queue's waiting line.
- Starvation (PromoteKnob): a waiting job in a lower queue returns to Q0, with its queue service
  reset to zero, once the time it has waited since it first ran after (re-)entering Q0 reaches
  `promote_knob` x the time it has run since then. The authors' default `dlas-gpu` run has it off
  (their variants use 0.5 to 1000); ours defaults to 8 (`promote_knob=0` turns it off).
- The authors' code sets three thresholds but only three queues, so 18000 is never used there;
  here every threshold makes a queue (pass `thresholds=(3250, 7200)` for their exact setting).

Where the simulator only counts GPUs, ours places jobs (Pack: consolidated), so preemption is
spelled out: queues are walked in priority order and a waiting job starts if it fits in what is
free (skipping ahead of jobs that do not); if it does not fit, running jobs of lower priority are
preempted, lowest first, only if freeing them lets it be placed, and only as many as needed;
otherwise nothing is preempted. A job preempted in a round is not restarted in the same round.
Jobs are rigid, at their requested size.

Cost: queues are kept across calls and updated by what changed (arrivals found at the end of the
engine's pending list, completions only when the running count dropped). Waiting jobs are indexed
by GPU count, so a round looks only at jobs that could fit the GPUs free plus those held by lower
priorities (a scalar test) before any placement. The next threshold crossing of any running job,
or the next promotion, is returned as `plan.wake_at`, so no periodic tick is needed.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Iterator

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import GPU, Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.plan import Plan
from dlsched.core.policy import Placement, Policy
from dlsched.core.snapshot import JobState, JobStatus, Snapshot
from dlsched.policies.phases.placement import PLACEMENTS

_EPS = 1e-9
_RUNNING = JobStatus.RUNNING
_SVC_TOL = 1e-3  # GPU-seconds: a crossing this close counts as done (float-safe wake times)


class _Entry:
    """Tiresias' view of one job: its queue and its place there."""

    __slots__ = ("job", "wd", "pd", "total", "gpus", "rate", "q", "wait_key", "run_key", "running", "entering",
                 "victim", "token", "base_service", "base_run", "first_run")

    def __init__(self, job: JobState):
        s = job.spec
        self.job = job
        self.wd = np.asarray(s.worker_demand, dtype=float)
        self.pd = np.asarray(s.ps_demand, dtype=float)
        self.total = s.num_workers * self.wd + s.num_ps * self.pd  # all of it, when on one node
        self.gpus = s.num_workers * s.worker_demand[GPU] + s.num_ps * s.ps_demand[GPU]  # GPUs it occupies
        self.rate = s.num_workers * s.worker_demand[GPU]  # GPU-seconds of service per second run
        self.q = 0
        self.wait_key: int | None = None  # position in its queue's waiting line (None: not waiting)
        self.run_key = 0  # position among its queue's running jobs
        self.running = False  # running as of our last plan
        self.entering = False  # demoted into its queue this round, still running
        self.victim = False  # chosen for preemption this round
        self.token = 0  # bumped on every change, invalidating timers that refer to the old state
        self.base_service = job.attained_service  # service when it last entered Q0
        self.base_run = job.run_time  # run time when it last entered Q0
        self.first_run: float | None = None  # first start since it last entered Q0

    @property
    def service(self) -> float:
        return self.job.attained_service - self.base_service


class _Round:
    """What one scheduling round works on: free resources, and GPUs of lower-priority running jobs."""

    def __init__(self, snap: Snapshot, candidates: Iterator[tuple[int, bool, _Entry]], free_g: float, below: float):
        self.snap = snap
        self._free: np.ndarray | None = None  # copied from the snapshot only if something is placed
        self.free_g = free_g  # free GPUs, as a scalar for the quick tests
        self.below = below  # GPUs of running jobs after the walk's current position
        self.candidates = candidates  # running jobs, lowest priority first
        self.peeked: list[tuple[int, bool, _Entry]] = []
        self.starts: list[tuple[_Entry, Allocation]] = []
        self.victims: list[_Entry] = []
        self.gone: dict[tuple[int, bool], float] = {}  # victims' GPUs by (queue, demoted this round)

    @property
    def free(self) -> np.ndarray:
        if self._free is None:
            self._free = np.array(self.snap.free, dtype=float)
        return self._free

    def candidate(self, i: int) -> tuple[int, bool, _Entry] | None:
        while len(self.peeked) <= i:
            nxt = next(self.candidates, None)
            if nxt is None:
                return None
            self.peeked.append(nxt)
        return self.peeked[i]


def _use(arr: np.ndarray, e: _Entry, alloc: Allocation, sign: float) -> None:
    """Add (sign 1) or remove (sign -1) an allocation's resources, node row by node row: most
    allocations have one node, and this is several times cheaper than a scatter-add."""
    s = e.job.spec
    if len(alloc.nodes) == 1 and alloc.workers[0] == s.num_workers and alloc.ps[0] == s.num_ps:
        # the whole job on one node (the usual case): its precomputed total demand
        row = arr[alloc.nodes[0]]
        if sign > 0:
            row += e.total
        else:
            row -= e.total
        return
    for n, w, p in zip(alloc.nodes, alloc.workers, alloc.ps):
        arr[n] += sign * (w * e.wd + p * e.pd) if p else sign * w * e.wd


class Tiresias(Policy):
    """Discretized 2D-LAS with starvation promotion (see the module docstring)."""

    name = "tiresias"
    on_events = True
    interval = None
    oracle = False

    def __init__(self, thresholds: tuple[float, ...], promote_knob: float, placement: Placement):
        self.thresholds = tuple(float(t) for t in thresholds)
        if any(t <= 0 for t in self.thresholds) or list(self.thresholds) != sorted(set(self.thresholds)):
            raise ConfigError(f"tiresias thresholds must be positive and increasing, got {thresholds!r}")
        if not promote_knob >= 0:
            raise ConfigError(f"tiresias promote_knob must be >= 0 (0 = off), got {promote_knob}")
        self.promote_knob = float(promote_knob)
        self.placement = placement
        self.num_queues = len(self.thresholds) + 1
        self.reset(None, 0)

    def reset(self, cluster: Cluster | None, seed: int) -> None:
        n = self.num_queues
        self._entries: dict[int, _Entry] = {}  # by job index
        self._run: list[dict[int, _Entry]] = [{} for _ in range(n)]  # running, in queue order
        self._run_gpus = [0.0] * n
        self._wait: list[dict[float, deque]] = [{} for _ in range(n)]  # GPUs -> deque[(key, entry)]
        self._wait_n: list[dict[float, int]] = [{} for _ in range(n)]  # GPUs -> live entries
        self._entering: list[list[_Entry]] = [[] for _ in range(n)]
        self._front = 0  # waiting-line keys: prepend below _front, append above _back
        self._back = 0
        self._run_seq = 0
        self._demote: list[tuple[float, int, int]] = []  # (time, job index, token)
        self._promote: list[tuple[float, int, int]] = []
        self._alloc: dict[str, Allocation] = {}  # running jobs as of our last plan
        self._live: dict[str, _Entry] = {}  # the same jobs' entries, in the same order
        self._n_waiting = 0
        self._waiting_in = [0] * n  # waiting jobs per queue
        self._cluster_gpus: tuple[Cluster | None, float] = (None, 0.0)
        self.demotions = 0
        self.promotions = 0

    # ------------------------------------------------------------------ queue sections
    def _wait_push(self, e: _Entry, front: bool = False) -> None:
        if front:
            self._front -= 1
            key = self._front
        else:
            self._back += 1
            key = self._back
        e.wait_key = key
        dq = self._wait[e.q].get(e.gpus)
        if dq is None:
            dq = self._wait[e.q][e.gpus] = deque()
        if front:
            dq.appendleft((key, e))
        else:
            dq.append((key, e))
        counts = self._wait_n[e.q]
        counts[e.gpus] = counts.get(e.gpus, 0) + 1
        self._n_waiting += 1
        self._waiting_in[e.q] += 1

    def _wait_remove(self, e: _Entry) -> None:
        """Leave the waiting line; the deque entry goes stale and is dropped lazily (or compacted)."""
        counts = self._wait_n[e.q]
        counts[e.gpus] -= 1
        e.wait_key = None
        self._n_waiting -= 1
        self._waiting_in[e.q] -= 1
        dq = self._wait[e.q][e.gpus]
        if len(dq) > 64 and len(dq) > 4 * counts[e.gpus]:
            self._wait[e.q][e.gpus] = deque(x for x in dq if x[1].wait_key == x[0])

    def _run_add(self, e: _Entry) -> None:
        self._run_seq += 1
        e.run_key = self._run_seq
        self._run[e.q][e.job.index] = e
        self._run_gpus[e.q] += e.gpus

    def _run_remove(self, e: _Entry) -> None:
        del self._run[e.q][e.job.index]
        self._run_gpus[e.q] -= e.gpus

    # ------------------------------------------------------------------ timers
    def _push_demotion(self, e: _Entry, now: float) -> None:
        if e.q >= len(self.thresholds) or e.rate <= 0:
            return
        t = now + max(0.0, self.thresholds[e.q] - e.service) / e.rate
        heapq.heappush(self._demote, (t, e.job.index, e.token))

    def _push_promotion(self, e: _Entry, now: float) -> None:
        if self.promote_knob <= 0 or e.q == 0 or e.first_run is None:
            return
        executed = e.job.run_time - e.base_run
        t = e.first_run + (1.0 + self.promote_knob) * executed  # waited = t - first_run - executed
        heapq.heappush(self._promote, (max(t, now + 1e-3), e.job.index, e.token))

    def _valid_demotion(self, item: tuple[float, int, int]) -> _Entry | None:
        e = self._entries.get(item[1])
        return e if e is not None and e.token == item[2] and e.running else None

    def _valid_promotion(self, item: tuple[float, int, int]) -> _Entry | None:
        e = self._entries.get(item[1])
        return e if e is not None and e.token == item[2] and not e.running and e.q > 0 else None

    def _demote_due(self, now: float) -> None:
        h = self._demote
        while h and h[0][0] <= now:
            e = self._valid_demotion(heapq.heappop(h))
            if e is None:
                continue
            q, service = e.q, e.service
            while q < len(self.thresholds) and service + _SVC_TOL >= self.thresholds[q]:
                q += 1
            if q == e.q:
                self._push_demotion(e, now)
                continue
            # Appended to the end of its new queue, behind that queue's waiting jobs, for this
            # round; it joins the running part afterwards if nobody preempted it.
            self._run_remove(e)
            e.q, e.entering = q, True
            e.token += 1
            self._entering[q].append(e)
            self.demotions += 1

    def _promote_due(self, now: float) -> None:
        h = self._promote
        while h and h[0][0] <= now:
            e = self._valid_promotion(heapq.heappop(h))
            if e is None:
                continue
            self._wait_remove(e)
            e.q = 0
            e.token += 1
            e.base_service, e.base_run, e.first_run = e.job.attained_service, e.job.run_time, None
            self._wait_push(e)
            self.promotions += 1

    def _next_wake(self) -> float | None:
        """Earliest valid demotion or promotion; stale timers at the top are dropped on the way."""
        entries, wake = self._entries, None
        h = self._demote
        while h:
            _, idx, token = h[0]
            e = entries.get(idx)
            if e is not None and e.token == token and e.running:
                wake = h[0][0]
                break
            heapq.heappop(h)
        h = self._promote
        while h:
            _, idx, token = h[0]
            e = entries.get(idx)
            if e is not None and e.token == token and not e.running and e.q > 0:
                if wake is None or h[0][0] < wake:
                    wake = h[0][0]
                break
            heapq.heappop(h)
        return wake

    # ------------------------------------------------------------------ keeping up with the engine
    def _admit(self, job: JobState, now: float) -> None:
        e = _Entry(job)
        self._entries[job.index] = e
        if job.status is JobStatus.RUNNING:  # adopted (a live controller's existing job)
            e.base_service = e.base_run = 0.0
            while e.q < len(self.thresholds) and e.service >= self.thresholds[e.q]:
                e.q += 1
            e.running, e.first_run = True, job.last_start if job.last_start is not None else now
            self._alloc[job.job_id] = job.allocation
            self._live[job.job_id] = e
            self._run_add(e)
            self._push_demotion(e, now)
        else:
            self._wait_push(e)

    def _stop(self, e: _Entry) -> None:
        e.running = False
        e.token += 1
        del self._alloc[e.job.job_id]
        del self._live[e.job.job_id]

    def _reap(self) -> None:
        """Drop jobs that stopped running since our last plan: at each completion, one pass."""
        for e in [x for x in self._live.values() if x.job.status is not _RUNNING]:
            self._run_remove(e)
            self._stop(e)
            if e.job.status is JobStatus.PENDING:  # stopped by someone else: heads its line
                self._wait_push(e, front=True)
            else:
                del self._entries[e.job.index]

    def _sync(self, snap: Snapshot) -> None:
        if len(snap.running) != len(self._alloc):  # completions: find them among our running jobs
            self._reap()
        new = len(snap.pending) - self._n_waiting
        found: list[JobState] = []
        if new > 0:  # the engine appends arrivals to its pending list: look from the end
            for job in reversed(snap.pending):
                if job.index not in self._entries:
                    found.append(job)
                    if len(found) == new:
                        break
        if len(found) != max(new, 0) or len(snap.running) != len(self._alloc):
            self._full_sync(snap)
            return
        for job in reversed(found):
            self._admit(job, snap.now)

    def _full_sync(self, snap: Snapshot) -> None:
        """Reconcile with the snapshot job by job: only when the cheap bookkeeping disagrees."""
        alive = {j.index: j for j in snap.running + snap.pending}
        for idx, e in list(self._entries.items()):
            job = alive.get(idx)
            if e.running and (job is None or job.status is not JobStatus.RUNNING):
                self._run_remove(e)
                self._stop(e)
                if job is not None:
                    self._wait_push(e, front=True)
            elif not e.running and (job is None or job.status is JobStatus.RUNNING):
                self._wait_remove(e)
                if job is not None:  # started by someone else
                    e.running, e.first_run = True, e.first_run if e.first_run is not None else snap.now
                    e.token += 1
                    self._alloc[job.job_id] = job.allocation
                    self._live[job.job_id] = e
                    self._run_add(e)
                    self._push_demotion(e, snap.now)
            if job is None:
                del self._entries[idx]
        for job in snap.running + snap.pending:
            if job.index not in self._entries:
                self._admit(job, snap.now)

    # ------------------------------------------------------------------ the round
    def _lowest_first(self) -> Iterator[tuple[int, bool, _Entry]]:
        """Running jobs from the lowest priority up: (queue, demoted into it this round, entry)."""
        for q in range(self.num_queues - 1, -1, -1):
            for e in reversed(self._entering[q]):
                yield q, True, e
            for e in reversed(self._run[q].values()):
                yield q, False, e

    def _try_start(self, rnd: _Round, e: _Entry, q: int) -> bool:
        spec, need = e.job.spec, e.gpus
        cluster = rnd.snap.cluster
        w, p = spec.num_workers, spec.num_ps
        if need <= rnd.free_g + _EPS:
            alloc = self.placement.place(cluster, rnd.free, spec, w, p)
            if alloc is not None:
                _use(rnd.free, e, alloc, -1.0)
                rnd.free_g -= need
                rnd.starts.append((e, alloc))
                return True
        if need > rnd.free_g + rnd.below + _EPS:
            return False
        # Preempt lower-priority running jobs, lowest first, only if that lets this one be placed.
        trial, got, i, alloc, checked = rnd.free.copy(), 0.0, 0, None, False
        while True:
            cand = rnd.candidate(i)
            if cand is None or not (cand[0] > q or (cand[0] == q and cand[1])):
                break
            i += 1
            _use(trial, cand[2], cand[2].job.allocation, 1.0)
            got += cand[2].gpus
            if need > rnd.free_g + got + _EPS:
                continue
            alloc = self.placement.place(cluster, trial, spec, w, p)
            if alloc is not None:
                break
            if not checked:  # would freeing every candidate help at all? one try, not one per victim
                checked, every, k = True, trial.copy(), i
                while (c := rnd.candidate(k)) is not None and (c[0] > q or (c[0] == q and c[1])):
                    _use(every, c[2], c[2].job.allocation, 1.0)
                    k += 1
                if self.placement.place(cluster, every, spec, w, p) is None:
                    break
        if alloc is None:
            return False
        for vq, entering, v in rnd.peeked[:i]:
            v.victim = True
            rnd.victims.append(v)
            rnd.gone[vq, entering] = rnd.gone.get((vq, entering), 0.0) + v.gpus
        del rnd.peeked[:i]
        rnd._free = trial
        _use(trial, e, alloc, -1.0)
        rnd.free_g += got - need
        rnd.below -= got
        rnd.starts.append((e, alloc))
        return True

    def _walk_waiting(self, rnd: _Round, q: int) -> None:
        """Waiting jobs of queue q in line order, looking only at GPU sizes that could still fit."""
        limit = rnd.free_g + rnd.below + _EPS
        lines: list[tuple[float, Iterator]] = []
        heap: list[tuple[int, int, _Entry]] = []
        for gpus, n in self._wait_n[q].items():
            if n <= 0 or gpus > limit:
                continue
            dq = self._wait[q][gpus]
            while dq and dq[0][1].wait_key != dq[0][0]:
                dq.popleft()
            it = iter(dq)
            key, e = next(it)
            heap.append((key, len(lines), e))
            lines.append((gpus, it))
        heapq.heapify(heap)
        while heap:
            _, slot, e = heapq.heappop(heap)
            gpus, it = lines[slot]
            if gpus > rnd.free_g + rnd.below + _EPS:
                continue  # free + below only shrinks during a round: this size is done
            self._try_start(rnd, e, q)
            for key, nxt in it:
                if nxt.wait_key == key:
                    heapq.heappush(heap, (key, slot, nxt))
                    break

    def _commit(self, rnd: _Round, now: float) -> None:
        for e, alloc in rnd.starts:
            self._wait_remove(e)
            e.running = True
            e.token += 1
            self._alloc[e.job.job_id] = alloc
            self._live[e.job.job_id] = e
            if e.first_run is None:
                e.first_run = now
            self._run_add(e)
            self._push_demotion(e, now)
        for q, entering in enumerate(self._entering):
            for e in entering:
                e.entering = False
                if e.victim:  # its place is at the end of the line it just entered
                    e.victim = False
                    self._stop(e)
                    self._wait_push(e)
                    self._push_promotion(e, now)
                else:
                    self._run_add(e)
                    self._push_demotion(e, now)
            entering.clear()
        # Preempted jobs keep their place ahead of the jobs that were already waiting.
        heads = sorted((v for v in rnd.victims if v.victim), key=lambda v: (v.q, -v.run_key))
        for v in heads:
            v.victim = False
            self._run_remove(v)
            self._stop(v)
            self._wait_push(v, front=True)
            self._push_promotion(v, now)

    def _total_gpus(self, cluster: Cluster) -> float:
        if self._cluster_gpus[0] is not cluster:
            self._cluster_gpus = (cluster, float(cluster.capacity[:, GPU].sum()))
        return self._cluster_gpus[1]

    def schedule(self, snap: Snapshot) -> Plan:
        now = snap.now
        self._sync(snap)
        if self._demote and self._demote[0][0] <= now:
            self._demote_due(now)
        if self._promote and self._promote[0][0] <= now:
            self._promote_due(now)
        demoted = any(self._entering)
        if self._n_waiting or demoted:
            entering = [sum(e.gpus for e in lst) for lst in self._entering] if demoted else [0.0] * self.num_queues
            running = sum(self._run_gpus) + sum(entering)
            # Free GPUs = total - what our running jobs use (exact here: nothing else holds GPUs;
            # were it ever an overestimate, it would only cost a placement attempt).
            rnd = _Round(snap, self._lowest_first(), self._total_gpus(snap.cluster) - running, running)
            for q in range(self.num_queues):
                # `below` counts GPUs of running jobs behind the walk; victims left it when chosen
                rnd.below -= self._run_gpus[q] - rnd.gone.get((q, False), 0.0)
                if self._waiting_in[q]:
                    self._walk_waiting(rnd, q)
                rnd.below -= entering[q] - rnd.gone.get((q, True), 0.0)
            self._commit(rnd, now)
        return Plan(allocations=dict(self._alloc), wake_at=self._next_wake())


def tiresias(
    thresholds: tuple[float, ...] = (3250.0, 7200.0, 18000.0),
    promote_knob: float = 8.0,
    placement: str = "pack",
) -> Tiresias:
    """Tiresias 2D-LAS: queue `thresholds` in GPU-seconds, `promote_knob` (0 = no promotion)."""
    if placement not in PLACEMENTS:
        raise ConfigError(f"unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
    return Tiresias(tuple(thresholds), promote_knob, PLACEMENTS[placement])
