"""`PhasedPolicy`: admission → ordering → sizing → placement, over the one realiser.

Each phase is a small object from `dlsched.policies.phases` (the protocols are in
`dlsched.core.policy`); this class runs them in order and hands the ranked, sized list to
`phases.realise`, so a policy that is a composition is a few lines of configuration (fifo, edf,
srtf, drf, qos). With an ordering whose key is fixed while a job waits and a job-by-job sizing, it
keeps its waiting line across calls (`phases.book.Book`, kept up by the snapshot's deltas)
instead of re-sorting every job on every call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

from dlsched.core.cluster import Cluster
from dlsched.core.plan import Plan
from dlsched.core.policy import (
    Admission, Keyed, Observer, Ordering, Placement, Policy, Resets, SizeOne, Sizing, Wakes,
)
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.policies.phases.book import Book
from dlsched.policies.phases.realise import PREEMPT, Preempt, Realiser, ShrinkRule, gpus_of, realise


@dataclass(eq=False)
class PhasedPolicy(Policy):
    """admission → ordering → sizing → placement, realised by `policies.phases.realise`.

    - `preempt`: "none" (running jobs keep their nodes; only pending jobs go through the phases,
      unless `resize`), "minimal" (every job is ranked; lower-ranked running jobs are preempted
      only when that lets a higher-ranked one start) or "replan" (every job is re-placed from an
      empty cluster; unchanged running jobs keep their nodes when they still fit).
    - `resize` (with "none"): running jobs go through the phases too and may grow in place.
    - `backfill`: when a job does not fit, try the next ones; without it the first job that does
      not fit blocks everything behind it (strict FIFO).
    - `shrink`: when a job does not fit at its size, try smaller sizes (`True`: fewer workers down
      to its minimum; or a `ShrinkRule`).
    - `observers`: estimators the phases share, told what is seen once per call.
    Phases may also declare `observe`, `reset` and `wake_at` (the protocols above). `admission`
    None admits every job.

    Incremental case: with no admission, a `Keyed` ordering, a `SizeOne` sizing, no `resize` or
    `shrink`, and preempt "none" (FIFO) or "minimal" with backfill (rigid SRTF), the waiting
    line and the running plan are a `Book` kept up by the snapshot's deltas; a call walks the
    line from its head (with "none" and `backfill`, only job sizes that fit what is free) instead
    of sorting every job. With "minimal", running jobs are ranked only when a waiting job does not
    fit in what is free (then, and only then, may it preempt). Same plans, less work.
    """

    admission: Admission | None
    ordering: Ordering
    sizing: Sizing
    placement: Placement
    name: str = "phased"
    preempt: "Preempt" = "none"
    resize: bool = False
    backfill: bool = True
    shrink: "bool | ShrinkRule" = False
    observers: tuple[Observer, ...] = ()

    def __post_init__(self) -> None:

        if self.preempt not in PREEMPT:
            raise ValueError(f"preempt must be one of {PREEMPT}, got {self.preempt!r}")
        parts = (*self.observers, self.admission, self.ordering, self.sizing, self.placement)
        self._observers = [p for p in parts if isinstance(p, Observer)]
        self._resets = [p for p in parts if isinstance(p, Resets)]
        self._wakers = [p for p in parts if isinstance(p, Wakes)]
        self._size_one = self.sizing.size_one if isinstance(self.sizing, SizeOne) else None
        self._book: Book | None = None
        self._incremental = (
            self.admission is None and isinstance(self.ordering, Keyed) and self._size_one is not None
            and not self.resize and not self.shrink
            and (self.preempt == "none" or (self.preempt == "minimal" and self.backfill))
        )

    def reset(self, cluster: Cluster, seed: int) -> None:
        self._book = None
        for p in self._resets:
            p.reset()

    def forget(self) -> None:
        """Drop the kept line: another policy planned meanwhile (its plans are not in the book),
        so the next call rebuilds it from the snapshot."""
        self._book = None

    def schedule(self, snap: Snapshot) -> Plan:

        for p in self._observers:
            p.observe(snap)
        if self._incremental:
            return self._from_book(snap)
        everyone = self.preempt != "none" or self.resize
        candidates = [*snap.running, *snap.pending] if everyone else snap.pending
        admitted, rejected = candidates, {}
        if self.admission is not None:
            admitted, rejected = self.admission.admit(snap, candidates)
        ordered = self.ordering.order(snap, admitted)
        if (size_one := self._size_one) is not None:
            sized = ((j, *size_one(snap, j)) for j in ordered)
        else:
            sized = self.sizing.size(snap, ordered)
        allocations = realise(
            snap, sized, self.placement, preempt=self.preempt, shrink=self.shrink, backfill=self.backfill
        )
        return Plan(allocations=allocations, rejected=dict(rejected), wake_at=self._wake(snap),
                    keep_running=self.preempt == "none")

    def waiting_reasons(self, snap: Snapshot, plan: Plan) -> dict[str, str]:
        """Without backfilling the line stops at the first job that does not fit: every waiting job
        after it waits behind it, however small (the live service shows this; the job that blocks
        gets the service's own reason: which resource it lacks)."""
        if self.backfill:
            return {}
        started = plan.allocations
        line = [j for j in self.ordering.order(snap, list(snap.pending)) if j.job_id not in started]
        if len(line) < 2:
            return {}
        head = line[0].job_id
        return {j.job_id: f"behind {head} in {self.name}'s order: no job starts past one that does not "
                          "fit (no backfilling)" for j in line[1:]}

    def _wake(self, snap: Snapshot) -> float | None:
        wakes = [t for p in self._wakers if (t := p.wake_at(snap)) is not None]
        return min(wakes) if wakes else None

    def _from_book(self, snap: Snapshot) -> Plan:
        size_one = self._size_one
        if self._book is None:
            # by GPU count only to let backfilling skip sizes that cannot fit; strict FIFO sizes lazily
            gpus = (lambda s, j: gpus_of(j.spec, *size_one(s, j))) if self.backfill else (lambda s, j: 0.0)
            self._book = Book(self.ordering.key, gpus, getattr(self.ordering, "clock_bound", None))  # type: ignore[attr-defined]
        book = self._book
        if book.follow(snap) and self.preempt == "minimal":  # a fresh book: running jobs may be
            # at other sizes than the sizing's (adopted): the list path resizes them
            everyone = [*snap.running, *snap.pending]
            ordered = self.ordering.order(snap, everyone)
            allocations = realise(snap, ((j, *size_one(snap, j)) for j in ordered), self.placement)
            book.record(allocations, [j for j in snap.pending if j.job_id in allocations])
            return Plan(allocations=dict(allocations), wake_at=self._wake(snap))
        if self.preempt == "none":  # the plan lists only what starts: running jobs keep running
            r = Realiser(snap, self.placement, preempt="none")
            for job in book.line.walk(r.room if self.backfill else None):
                if r.offer(job, *size_one(snap, job)) is None and not self.backfill:
                    break
            book.running.update(r.allocations)
            book.record(book.running, r.started)
            return Plan(allocations=r.allocations, wake_at=self._wake(snap), keep_running=True)
        r = Realiser(snap, self.placement, preempt=self.preempt, keep=book.running)
        self._walk_minimal(snap, book, r)
        book.record(r.allocations, r.started)
        started = {j.job_id: r.allocations[j.job_id] for j in r.started if j.job_id in r.allocations}
        return Plan(allocations=started, keep_running=True, preempt=set(r.preempted), wake_at=self._wake(snap))

    def _walk_minimal(self, snap: Snapshot, book: Book, r: Realiser) -> None:
        """Waiting jobs in key order. One that does not fit in what is free may preempt running
        jobs ranked below it, lowest first (`Book.victims`, which keys only as many as it hands out).

        When a job could not start even with every job below it preempted, those jobs' GPUs bound
        what any later job could get (keys only grow along the walk), so from then on the walk
        skips job sizes above free + that bound (a bound that only shrinks as the walk goes on)."""
        size_one, line = self._size_one, book.line
        room_below = [math.inf]  # GPUs of the running jobs below the walk's position, at most
        for job in line.walk(lambda: r.free_gpus + room_below[0]):
            k, (w, p) = line.key_of(job.job_id), size_one(snap, job)  # type: ignore[misc]
            if r.offer(job, w, p, key=k) is not None:
                continue
            victims = _Counted(book.victims(snap, k))
            r.allow(victims, math.inf)  # `victims` is exhausted when the offer fails
            before = len(r.preempted)
            if r.offer(job, w, p, key=k) is None:
                room_below[0] = victims.gpus
            else:
                room_below[0] -= sum(gpus_of(v.spec, v.num_workers, v.num_ps) for v in list(r.preempted.values())[before:])
            r.allow(iter(()), 0.0)


class _Counted:
    """An iterator of (key, job) that adds up the GPUs of the jobs it has handed out."""

    def __init__(self, it: Iterator[tuple[Any, JobState]]):
        self.it, self.gpus = it, 0.0

    def __iter__(self) -> "_Counted":
        return self

    def __next__(self) -> tuple[Any, JobState]:
        k, v = next(self.it)
        self.gpus += gpus_of(v.spec, v.num_workers, v.num_ps)
        return k, v
