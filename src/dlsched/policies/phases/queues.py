"""A multi-level feedback queue index for least-attained-service policies (Tiresias, LAS, Themis-like).

Jobs sit in queue q while their attained service (GPU-seconds since they entered the top queue)
is below `thresholds[q]`. Each queue keeps its running jobs in the order they started and its
waiting line in the order jobs entered it (or were put back at its front). The index is kept
across calls and changed only by what happened, so a call costs what changed, not the queue's
length:

- waiting lines are indexed by GPU count, so a walk looks only at sizes that can still fit
  (`walk`), merged back into line order;
- the next threshold crossing of each running job sits in a heap (`due`), so demotions are found
  without looking at every running job, and the earliest one is the policy's `wake_at`;
- removals from a line are lazy (stale entries are skipped, and compacted when they pile up).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from typing import Any, Callable, Iterator

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import GPU
from dlsched.core.snapshot import JobState, JobStatus, Snapshot
from dlsched.framework.las import SVC_TOL, queue_of



class Entry:
    """One job in the index: its queue, its place there, and its service bookkeeping."""

    __slots__ = ("job", "gpus", "rate", "q", "wait_key", "run_key", "running", "entering", "token",
                 "base_service", "base_run", "first_run")

    def __init__(self, job: JobState):
        s = job.spec
        self.job = job
        self.gpus = s.num_workers * s.worker_demand[GPU] + s.num_ps * s.ps_demand[GPU]  # GPUs it occupies
        self.rate = s.num_workers * s.worker_demand[GPU]  # GPU-seconds of service per second run
        self.q = 0
        self.wait_key: int | None = None  # position in its queue's waiting line (None: not waiting)
        self.run_key = 0  # position among its queue's running jobs
        self.running = False
        self.entering = False  # demoted into its queue this call, still running
        self.token = 0  # bumped on every change, invalidating timers that refer to the old state
        self.base_service = job.attained_service  # service when it last entered the top queue
        self.base_run = job.run_time  # run time then (starvation rules measure from there)
        self.first_run: float | None = None  # first start since then

    @property
    def service(self) -> float:
        return self.job.attained_service - self.base_service


class Line:
    """Waiting jobs in key order, indexed by size (a GPU count, or any hashable size class such
    as a gang's shape), so a walk skips sizes that cannot fit.

    Keys are any comparable values (a rank, a remaining time, a position in a queue); two jobs
    with equal keys go in job-id order. Nothing may join or leave the line while a walk is on.
    """

    def __init__(self) -> None:
        self._groups: dict[float, list[tuple[Any, str]]] = {}  # GPUs -> sorted [(key, job id)]
        self._jobs: dict[str, tuple[JobState, Any, float]] = {}  # job id -> (job, key, GPUs)

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._jobs

    def add(self, job: JobState, key: Any, gpus: float) -> None:
        insort(self._groups.setdefault(gpus, []), (key, job.job_id))
        self._jobs[job.job_id] = (job, key, gpus)

    def remove(self, job_id: str) -> None:
        item = self._jobs.pop(job_id, None)
        if item is None:
            return
        _, key, gpus = item
        group = self._groups[gpus]
        del group[bisect_left(group, (key, job_id))]
        if not group:
            del self._groups[gpus]

    def smallest(self) -> float | None:
        """The smallest size waiting (None if the line is empty): a walk limited below it yields nothing."""
        return min(self._groups) if self._groups else None

    def key_of(self, job_id: str) -> Any:
        """The key a waiting job joined the line with."""
        return self._jobs[job_id][1]

    def walk(self, limit: Callable[[], float] | None = None,
             skip: Callable[[Any], bool] | None = None) -> Iterator[JobState]:
        """Jobs in key order; with `limit`, only sizes up to `limit()` (which may only shrink
        while the walk goes on); with `skip`, not the sizes `skip(size)` rules out (once ruled
        out, a size stays out for the rest of the walk)."""
        cap = None if limit is None else limit() + 1e-9
        heap = [(g[0][0], g[0][1], size, 0) for size, g in self._groups.items() if cap is None or size <= cap]
        heapq.heapify(heap)
        while heap:
            _, jid, size, i = heapq.heappop(heap)
            if (limit is not None and size > limit() + 1e-9) or (skip is not None and skip(size)):
                continue  # this size cannot fit any more this call
            group = self._groups[size]
            if i + 1 < len(group):
                heapq.heappush(heap, (group[i + 1][0], group[i + 1][1], size, i + 1))
            yield self._jobs[jid][0]


class MLFQ:
    """Queues 0..len(thresholds) of `Entry`s (see the module docstring)."""

    def __init__(self, thresholds: tuple[float, ...]):
        self.thresholds = thresholds
        n = self.levels = len(thresholds) + 1
        self.entries: dict[str, Entry] = {}
        self.running: list[dict[str, Entry]] = [{} for _ in range(n)]  # in start order
        self.running_gpus = [0.0] * n
        self.entering: list[list[Entry]] = [[] for _ in range(n)]
        self.entering_gpus = [0.0] * n  # GPUs of `entering`, queue by queue
        self.lines = [Line() for _ in range(n)]  # keyed by place in line: front < 0 < back
        self.waiting = 0  # jobs in the lines (a count, not a sum over them per call)
        self._front = self._back = self._run_seq = 0
        # (time, job index, job id, token): simultaneous crossings in job order
        self._crossings: list[tuple[float, int, str, int]] = []
        self.allocations: dict[str, Allocation] = {}  # running jobs as of the policy's last plan
        self._fresh = True

    def queue_of(self, service: float, q: int = 0) -> int:
        return queue_of(self.thresholds, service, q)

    # ------------------------------------------------------------------ waiting lines
    def wait(self, e: Entry, front: bool = False) -> None:
        """Join queue e.q's waiting line at its end (or its front)."""
        if front:
            self._front -= 1
        else:
            self._back += 1
        e.wait_key, e.running = (self._front if front else self._back), False
        self.lines[e.q].add(e.job, e.wait_key, e.gpus)
        self.waiting += 1

    def unwait(self, e: Entry) -> None:
        if e.wait_key is not None:
            self.waiting -= 1
        self.lines[e.q].remove(e.job.job_id)
        e.wait_key = None

    # ------------------------------------------------------------------ running jobs
    def run(self, e: Entry, now: float) -> None:
        """Start (or keep) e running at the end of its queue's running part."""
        self._run_seq += 1
        e.run_key, e.running, e.entering = self._run_seq, True, False
        self.running[e.q][e.job.job_id] = e
        self.running_gpus[e.q] += e.gpus
        self._watch(e, now)

    def _watch(self, e: Entry, now: float) -> None:
        if e.q < len(self.thresholds) and e.rate > 0:
            t = now + max(0.0, self.thresholds[e.q] - e.service) / e.rate
            heapq.heappush(self._crossings, (t, e.job.index, e.job.job_id, e.token))

    def unrun(self, e: Entry) -> None:
        del self.running[e.q][e.job.job_id]
        self.running_gpus[e.q] -= e.gpus

    def _valid(self, item: tuple[float, int, str, int]) -> Entry | None:
        e = self.entries.get(item[2])
        return e if e is not None and e.token == item[3] and e.running and not e.entering else None

    def demote_due(self, now: float) -> int:
        """Running jobs whose service crossed their queue's threshold by `now` move to the end of
        the queue they reach, into `entering` (behind its waiting line, for this call)."""
        h, moved = self._crossings, 0
        while h and h[0][0] <= now:
            e = self._valid(heapq.heappop(h))
            if e is None:
                continue
            q = self.queue_of(e.service, e.q)
            if q == e.q:  # not quite there (float): look again later
                self._watch(e, now)
                continue
            self.unrun(e)
            e.token += 1
            e.q, e.entering = q, True
            self.entering[q].append(e)
            self.entering_gpus[q] += e.gpus
            moved += 1
        return moved

    def clear_entering(self) -> None:
        """The jobs demoted this call have been settled (kept running or stopped)."""
        for q, lst in enumerate(self.entering):
            if lst:
                lst.clear()
                self.entering_gpus[q] = 0.0

    def next_crossing(self) -> float | None:
        h = self._crossings
        while h and self._valid(h[0]) is None:
            heapq.heappop(h)
        return h[0][0] if h else None

    def lowest_first(self) -> Iterator[tuple[tuple[int, int], JobState]]:
        """Running jobs from the lowest priority up, keyed (queue, 2) if demoted into the queue
        this call (they are behind its waiting line, key (queue, 1)), else (queue, 0)."""
        for q in range(self.levels - 1, -1, -1):
            for e in reversed(self.entering[q]):
                yield (q, 2), e.job
            for e in reversed(self.running[q].values()):
                yield (q, 0), e.job


    # ------------------------------------------------------------------ following the engine
    def follow(self, snap: Snapshot) -> list[Entry]:
        """Apply the snapshot's deltas (arrivals join the end of queue 0's line in arrival order;
        finished jobs leave). Returns the entries that stopped running without the policy's plan
        (a failed run; someone else's stop): they head their queue's line. Reconciles job by
        job on the first call and whenever the counts disagree (a snapshot it did not follow)."""
        halted, arrived = [], snap.arrived
        for job in (sorted(arrived, key=lambda j: j.rank) if len(arrived) > 1 else arrived):
            if job.job_id not in self.entries:
                self._admit(job, snap.now)
        for job in snap.stopped:
            e = self.entries.get(job.job_id)
            if e is not None and e.running:
                halted.append(self._halt(e))
        for job in snap.finished:
            self._drop(job.job_id)
        if self._fresh or snap.num_running != len(self.allocations) or snap.num_pending != self.waiting:
            halted += self._reconcile(snap)
        self._fresh = False
        return halted

    def _admit(self, job: JobState, now: float) -> None:
        e = self.entries[job.job_id] = Entry(job)
        if job.status is not JobStatus.RUNNING:
            self.wait(e)
            return
        e.base_service = e.base_run = 0.0  # adopted running (a live controller's existing job)
        e.q = self.queue_of(e.service)
        e.first_run = job.last_start if job.last_start is not None else now
        self.allocations[job.job_id] = job.allocation
        self.run(e, now)

    def _halt(self, e: Entry) -> Entry:
        self.unrun(e)
        del self.allocations[e.job.job_id]
        e.token += 1
        self.wait(e, front=True)
        return e

    def _drop(self, job_id: str) -> None:
        e = self.entries.pop(job_id, None)
        if e is not None and e.running:
            self.unrun(e)
            del self.allocations[job_id]
        elif e is not None and e.wait_key is not None:
            self.unwait(e)

    def _reconcile(self, snap: Snapshot) -> list[Entry]:
        alive, halted = {j.job_id: j for j in (*snap.running, *snap.pending)}, []
        for jid, e in list(self.entries.items()):
            job = alive.get(jid)
            runs = job is not None and job.status is JobStatus.RUNNING
            if job is None:
                self._drop(jid)
            elif e.running and not runs:  # stopped by someone else
                halted.append(self._halt(e))
            elif runs and not e.running:  # started by someone else
                self.unwait(e)
                e.token += 1
                e.first_run = snap.now if e.first_run is None else e.first_run
                self.allocations[jid] = job.allocation
                self.run(e, snap.now)
        for job in sorted((j for jid, j in alive.items() if jid not in self.entries), key=lambda j: j.rank):
            self._admit(job, snap.now)
        return halted
