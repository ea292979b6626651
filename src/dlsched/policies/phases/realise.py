"""The realiser: a ranked list of (job, workers, ps) → allocations. Written once for every policy.

Three preemption modes, because published schedulers differ exactly there:

- `"none"` (FIFO, EDF, the QoS framework): running jobs keep their allocations and are never
  stopped. A running job listed at a larger size grows in what is free plus its own resources
  (falling back to its current allocation); listed at its size or smaller, it is left alone.
- `"minimal"` (SRTF, DRF, Dorm, RRH, Tiresias): running jobs missing from the list are stopped; a
  running job at an unchanged size keeps its Allocation object (the engine skips it). A pending
  (or resized) job is placed in what is free; only if it does not fit are lower-priority running
  jobs considered as victims, lowest priority first, and only if freeing them lets it be placed
  are they preempted (the fewest such, from the bottom). Re-planning from an empty cluster would
  let a newcomer land on a lower-priority job's nodes and push it elsewhere although there was
  room. GPU counts are compared as scalars before any placement is attempted, and a failed
  placement asks once "would freeing every candidate help at all?" instead of once per victim.
- `"replan"` (DL2's elastic SRTF, Optimus' slot): every job is placed from an empty cluster in
  list order; a running job keeps its nodes when it stays at its size and they still fit.

Everywhere: a running job tried at exactly its current size keeps its nodes if they are still
free (no restart for nothing); `shrink` tries smaller sizes (a `ShrinkRule`; `True` means one
worker fewer at a time down to the job's minimum) in what is free, never preempting for them;
without `backfill` the first job that cannot be placed stops the walk (strict FIFO), so a lazily
sized list is consumed only up to there.

`Realiser` is the streaming form, for a policy that keeps its own ranked indexes and must not
walk every job on every call (Tiresias): it offers jobs one at a time, hands the realiser its
running jobs lowest-priority-first as a lazy iterator of (key, job), and tells it the GPUs
of lower priority (`below`). `realise` is the list form built on it.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Literal

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import GPU
from dlsched.core.job import JobSpec
from dlsched.core.policy import Placement
from dlsched.framework.packing import add_use, keep_if_fits
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.policies.phases.sizing import ps_for

Preempt = Literal["none", "minimal", "replan"]
PREEMPT: tuple[str, ...] = ("none", "minimal", "replan")
#: Smaller sizes to try, best first, for a job that did not fit at (workers, ps).
ShrinkRule = Callable[[JobSpec, int, int], Iterable[tuple[int, int]]]
_EPS = 1e-9


def fewer_workers(spec: JobSpec, workers: int, ps: int) -> Iterator[tuple[int, int]]:
    """One worker fewer at a time down to the minimum; PSs capped at the workers (their minimum kept)."""
    for w in range(workers - 1, spec.min_workers - 1, -1):
        yield w, ps_for(spec, w, ps, per_worker=True)


def gpus_of(spec: JobSpec, workers: int, ps: int) -> float:
    return workers * spec.worker_demand[GPU] + ps * spec.ps_demand[GPU]


class Realiser:
    """One realisation: offer jobs highest priority first; `allocations` is the result.

    `allocations` starts as `keep` (running jobs that stay where they are). For `"minimal"`,
    `victims` yields (key, job) of running jobs lowest priority first, lazily, and `below` is the
    GPUs of running jobs below the walk's position; a job offered with `key` may preempt victims
    whose key is greater. The caller lowers `below` with `passed(key, gpus)` as its walk passes
    running jobs (victims already taken are not counted twice).
    """

    def __init__(
        self,
        snap: Snapshot,
        placement: Placement,
        *,
        preempt: Preempt = "minimal",
        shrink: bool | ShrinkRule = False,
        keep: dict[str, Allocation] | None = None,
        victims: Iterator[tuple[object, JobState]] = iter(()),
        below: float = 0.0,
        free: np.ndarray | None = None,
        free_gpus: float | None = None,
    ):
        self.snap, self.placement, self.preempt = snap, placement, preempt
        self.shrink: ShrinkRule | None = fewer_workers if shrink is True else (shrink or None)
        self.allocations: dict[str, Allocation] = {} if keep is None else keep
        self._free = free  # copied from the snapshot only when first needed
        # placements not yet taken out of `_free`: most walks place one job and read `free` no
        # more, so the array is brought up to date only when it is read again (same order of updates)
        self._owed: list[tuple[JobSpec, Allocation]] = []
        if free_gpus is None:
            free_gpus = float((snap.free if free is None else free)[:, GPU].sum())
        self.free_gpus = free_gpus
        self.below = below
        self._victims, self._peeked = victims, []
        self.preempted: dict[str, JobState] = {}
        self.started: list[JobState] = []
        self.gone: dict[object, float] = {}  # victims' GPUs by key

    @property
    def free(self) -> np.ndarray:
        """What is free as of the jobs placed so far (a copy of the snapshot's, made when first read)."""
        if self._free is None:
            self._free = np.array(self.snap.free, dtype=float)
        if self._owed:
            for spec, alloc in self._owed:
                add_use(self._free, spec, alloc, -1.0)
            self._owed.clear()
        return self._free

    def allow(self, victims: Iterator[tuple[object, JobState]], below: float) -> None:
        """From now on `victims` (running jobs, lowest priority first) may be preempted, `below`
        GPUs of them ranking below the walk's position: for a caller that ranks its running jobs
        only once a waiting job does not fit in what is free."""
        self._victims, self._peeked, self.below = victims, [], below

    def passed(self, key: object, gpus: float) -> None:
        """The walk passed running jobs of `key` holding `gpus`: they are no longer below it."""
        self.below -= gpus - self.gone.get(key, 0.0)

    def room(self) -> float:
        """GPUs a job offered now could get at most: free plus everything preemptible below."""
        return self.free_gpus + (self.below if self.preempt == "minimal" else 0.0)

    # ------------------------------------------------------------------ one job
    def offer(self, job: JobState, workers: int, ps: int, key: object = None) -> Allocation | None:
        """Place `job` at (workers, ps) (or smaller, with `shrink`); None if it cannot run now."""
        if self.preempt == "none" and job.allocation is not None:
            return self._grow(job, workers, ps)
        spec = job.spec
        need = gpus_of(spec, workers, ps)
        alloc = None
        if need <= self.free_gpus + _EPS:
            alloc = self._try(job, self.free, workers, ps)
            if alloc is not None:
                self._take(job, alloc, need)
        if alloc is None and self.preempt == "minimal" and need <= self.free_gpus + self.below + _EPS:
            alloc = self._preempt_for(job, workers, ps, key, need)
        if alloc is None and self.shrink is not None:
            for w2, p2 in self.shrink(spec, workers, ps):
                need2 = gpus_of(spec, w2, p2)
                if need2 > self.free_gpus + _EPS:
                    continue
                alloc = self._try(job, self.free, w2, p2)
                if alloc is not None:
                    self._take(job, alloc, need2)
                    break
        if alloc is not None:
            self.allocations[spec.job_id] = alloc
            self.started.append(job)
        return alloc

    def _try(self, job: JobState, free: np.ndarray, workers: int, ps: int) -> Allocation | None:
        a = job.allocation
        if a is not None and a.num_workers == workers and a.num_ps == ps:
            kept = keep_if_fits(job, free)
            if kept is not None:
                return kept
        return self.placement.place(self.snap.cluster, free, job.spec, workers, ps)

    def _take(self, job: JobState, alloc: Allocation, gpus: float) -> None:
        self._owed.append((job.spec, alloc))  # taken out of `free` when it is next read
        self.free_gpus -= gpus

    def _grow(self, job: JobState, workers: int, ps: int) -> Allocation | None:
        """`"none"`: a running job only grows, in what is free plus its own resources."""
        cur = job.allocation
        if workers <= cur.num_workers:
            return cur
        spec = job.spec
        room = self.free.copy()
        add_use(room, spec, cur)
        sizes = [(workers, ps)]
        if self.shrink is not None:
            sizes += [(w, p) for w, p in self.shrink(spec, workers, ps) if w > cur.num_workers]
        for w, p in sizes:
            alloc = self.placement.place(self.snap.cluster, room, spec, w, p)
            if alloc is not None:
                add_use(room, spec, alloc, -1.0)
                self._free = room
                self.free_gpus += gpus_of(spec, cur.num_workers, cur.num_ps) - gpus_of(spec, w, p)
                self.allocations[spec.job_id] = alloc
                return alloc
        return cur

    # ------------------------------------------------------------------ minimal preemption
    def _victim(self, i: int, key: object) -> JobState | None:
        """The i-th running job from the bottom, if it ranks below `key`."""
        while len(self._peeked) <= i:
            nxt = next(self._victims, None)
            if nxt is None:
                return None
            self._peeked.append(nxt)
        vkey, v = self._peeked[i]
        return v if vkey > key else None  # type: ignore[operator]

    def _preempt_for(self, job: JobState, workers: int, ps: int, key: object, need: float) -> Allocation | None:
        spec = job.spec
        trial, got, i, alloc, checked = self.free.copy(), 0.0, 0, None, False
        while (v := self._victim(i, key)) is not None:
            i += 1
            add_use(trial, v.spec, v.allocation)
            got += gpus_of(v.spec, v.num_workers, v.num_ps)
            if need > self.free_gpus + got + _EPS:
                continue
            alloc = self.placement.place(self.snap.cluster, trial, spec, workers, ps)
            if alloc is not None:
                break
            if not checked:  # would freeing every candidate help at all? one try, not one per victim
                checked, every, k = True, trial.copy(), i
                while (u := self._victim(k, key)) is not None:
                    add_use(every, u.spec, u.allocation)
                    k += 1
                if self.placement.place(self.snap.cluster, every, spec, workers, ps) is None:
                    break
        if alloc is None:
            return None
        for vkey, v in self._peeked[:i]:
            del self.allocations[v.spec.job_id]
            self.preempted[v.spec.job_id] = v
            self.gone[vkey] = self.gone.get(vkey, 0.0) + gpus_of(v.spec, v.num_workers, v.num_ps)
        del self._peeked[:i]
        self._free = trial
        self._owed.append((spec, alloc))
        self.free_gpus += got - need
        self.below -= got
        return alloc


def realise(
    snap: Snapshot,
    sized: Iterable[tuple[JobState, int, int]],
    placement: Placement,
    *,
    preempt: Preempt = "minimal",
    shrink: bool | ShrinkRule = False,
    backfill: bool = True,
) -> dict[str, Allocation]:
    """Allocations of every job that should run, from `sized` highest priority first.

    With `"minimal"` or `"replan"`, `sized` lists every job that may run (running and pending
    mixed) and running jobs left out are stopped; with `"none"` running jobs always keep running
    and need not be listed, and only the jobs that start or grow are returned (their plan is a
    `keep_running` one, so a decision costs what changed, not the number of running jobs). `sized` may be lazy: only `"minimal"` reads it all up front.
    """
    if preempt not in PREEMPT:
        raise ValueError(f"preempt must be one of {PREEMPT}, got {preempt!r}")
    if preempt == "none":  # only what starts or grows: the caller's plan says `keep_running`
        r = Realiser(snap, placement, preempt="none", shrink=shrink)
        for job, w, p in sized:
            if r.offer(job, w, p) is None and not backfill:
                break
        return r.allocations
    if preempt == "replan":
        r = Realiser(snap, placement, preempt="replan", shrink=shrink, free=np.array(snap.capacity, dtype=float))
        for job, w, p in sized:
            if r.offer(job, w, p) is None and not backfill:
                break
        return r.allocations
    sized = list(sized)
    keep: dict[str, Allocation] = {}
    runs: list[tuple[int, JobState, float]] = []  # (position, job, GPUs) of running jobs kept in place
    for pos, (job, w, p) in enumerate(sized):
        a = job.allocation
        if a is not None and a.num_workers == w and a.num_ps == p:
            runs.append((pos, job, gpus_of(job.spec, w, p)))
            keep[job.spec.job_id] = a
    free = np.array(snap.free, dtype=float)
    for job in snap.running:  # stopped or resized: release what they hold
        if job.spec.job_id not in keep:
            add_use(free, job.spec, job.allocation)
    r = Realiser(snap, placement, preempt="minimal", shrink=shrink, keep=keep, free=free,
                 victims=((pos, job) for pos, job, _ in reversed(runs)), below=sum(g for _, _, g in runs))
    nxt = 0  # next entry of `runs` the walk has not passed yet
    for pos, (job, w, p) in enumerate(sized):
        while nxt < len(runs) and runs[nxt][0] <= pos:
            r.passed(runs[nxt][0], runs[nxt][2])
            nxt += 1
        jid = job.spec.job_id
        if jid in r.allocations or jid in r.preempted:
            continue
        if r.offer(job, w, p, key=pos) is None and not backfill:
            break
    return r.allocations
