"""Deadline phases: earliest-deadline-first ordering and deadline-feasibility admission.

Why a feasibility check at all: under scarcity, a job that cannot meet its deadline even at its
largest size only takes resources from jobs that still can (the QoS framework's "prefer jobs with
the least slack that can still meet their deadline", seed-systems.md section 4, our
reconstruction). Such a job is never dropped silently: it is either rejected with the reason, or
deprioritised (kept, ordered behind every job that can still make it) and the reason recorded in
`DeadlineFeasibility.late`.

"Cannot be met" is judged optimistically, from observables only: the low end of the remaining-work
estimate (exact when the user declared the work, else the job's own loss-curve fit; never the
history of other jobs or a guess) at an upper bound of the speed at the job's maximum size (linear
scaling from the type's fastest measured point per worker, or the fitted speed model of Optimus,
shared, when that is faster), plus a restart pause if the job must be resized to get there. A job whose speed or work is unknown is never judged infeasible: no
evidence, no rejection.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter
from typing import Callable

import numpy as np

from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import JobState, JobStatus, Snapshot
from dlsched.estimators.completion_predictor import CompletionPredictor
from dlsched.estimators.speed_model import SpeedPool
from dlsched.policies.phases.sizing import ps_for, requested_workers

MODES = ("reject", "deprioritise")
_RANK = attrgetter("rank")
_VERSION = attrgetter("version")
#: Remaining-work sources about the job itself, the only ones a rejection may rest on.
JUDGED = ("known", "oracle", "fit")



def _unknown(workers: int) -> None:
    """`EarliestFinish.times` of a job whose work or speed is unknown: no time at any size."""
    return None


def candidate_sizes(lo: int, hi: int) -> list[int]:
    """Sizes worth evaluating between lo and hi: both ends and the powers of two between (a job
    allowed 128 workers need not be priced at each of them on every call)."""
    sizes = {lo, hi}
    k = 1
    while k < hi:
        if k > lo:
            sizes.add(k)
        k *= 2
    return sorted(sizes)


class JobsWith:
    """Ids of the jobs in the system whose spec has a property (`has`), kept from the snapshot's
    deltas. Call `observe` on every call that sees deltas (the first one sees every job)."""

    def __init__(self, has: Callable[[JobSpec], bool]) -> None:
        self.has = has
        self.ids: set[str] = set()
        self._first = True

    def observe(self, snap: Snapshot) -> None:
        for j in (snap.running + snap.pending) if self._first else snap.arrived:
            if self.has(j.spec):
                self.ids.add(j.job_id)
        for j in snap.finished:
            self.ids.discard(j.job_id)
        self._first = False

    def none(self) -> bool:
        """Known to be none (False before the first `observe`: nobody has looked)."""
        return not self._first and not self.ids

    def reset(self) -> None:
        self.ids.clear()
        self._first = True


def _has_deadline(spec: JobSpec) -> bool:
    return spec.deadline is not None


class DeadlineJobs(JobsWith):
    """The jobs in the system that have a deadline.

    Why: with none, every deadline phase gives the same answer at any time (nothing to judge,
    EDF is arrival order, nothing grows), so a call may skip their per-job work."""

    def __init__(self) -> None:
        super().__init__(_has_deadline)


@dataclass(eq=False)
class EarliestFinish:
    """The earliest completion a job could reach at a given size, from the shared estimators.

    `speed(job, workers)` is the type's fitted speed (iterations/s) at that size, None when the
    type was never measured. The policy that owns this object calls `observe` once per call.
    """

    predictor: CompletionPredictor = field(default_factory=CompletionPredictor)
    # pooled by requested size too where iterations are seconds at it (a 1-GPU and an 8-GPU bert
    # job both run 1 iteration/s at their requested sizes): `profile_key`'s `sized`
    speeds: SpeedPool = field(default_factory=lambda: SpeedPool(sized=True))
    deadlines: DeadlineJobs = field(default_factory=DeadlineJobs)
    # running job -> the version `speeds` last learnt from (it skips a job at a version it saw)
    _seen: dict[JobState, int] = field(default_factory=dict, repr=False)

    def forget_seen(self) -> None:
        """`speeds` was replaced: it has seen nothing."""
        self._seen.clear()

    def observe(self, snap: Snapshot) -> None:
        """Merge new measured speeds and finished jobs' totals, from what changed only: a rate is
        measured while a job runs (a job stopped since the last call is in `snap.stopped`), and a
        job's total becomes history when it leaves (`snap.finished`); waiting jobs add nothing."""
        running, seen = snap.running, self._seen
        # the pool learns from a job only at a version it has not seen with rates (a start or a
        # resize bumps it): find those by one set difference instead of one call per running job,
        # then tell the pool in `snap.running` order as before (its sums are floats)
        changed = dict(zip(running, map(_VERSION, running))).items() - seen.items()
        if changed:
            at = dict(zip(running, range(len(running))))
            for j, version in sorted(changed, key=lambda item: at[item[0]]):
                self.speeds.observe(j)
                if j.observed_rates:
                    seen[j] = version
        for j in snap.stopped:
            self.speeds.observe(j)
            seen.pop(j, None)
        for j in snap.finished:
            seen.pop(j, None)
        self.predictor.observe(list(snap.finished))
        self.deadlines.observe(snap)

    def pause(self, snap: Snapshot, job: JobState, workers: int) -> float:
        """Seconds before the job steps again at `workers`: a restart unless it already runs so,
        or it has never started (first start; the engine's start-up delay is not visible)."""
        if job.status is JobStatus.RUNNING:
            if workers == job.num_workers:
                return max(0.0, job.resume_at - snap.now)
            return snap.restart_overhead
        return snap.restart_overhead if job.first_start is not None else 0.0

    def _per_worker(self, job: JobState) -> float | None:
        """The best measured speed per worker of the job's type (its own current rate included)."""
        return max((f / w for w, f in self._points(job).items()), default=None)

    def _points(self, job: JobState) -> dict[int, float]:
        """Measured speeds of the job's type by worker count (the best over PS counts), its own
        current rate included."""
        out: dict[int, float] = {}
        pts = self.speeds.points(job.spec)
        if job.status is JobStatus.RUNNING and job.rate > 0 and job.num_workers > 0:
            pts = {**pts, (job.num_ps, job.num_workers): job.rate}
        for (_, w), f in pts.items():
            if w > 0 and f > out.get(w, 0.0):
                out[w] = f
        return out

    def at(self, snap: Snapshot, job: JobState, workers: int, optimistic: bool = False) -> float | None:
        """Completion time at `workers` workers (None = unknown); the job's measured rate beats
        the model at its current size. `optimistic` uses the low end of the remaining-work range
        and a speed the job cannot beat: linear scaling from its type's fastest measured point per
        worker, or the model if that is faster (Optimus' prior penalises a PS job with fewer PSs
        than workers, which can make it *pessimistic*; a rejection must not rest on that)."""
        return self.times(snap, job, optimistic)(workers)

    def times(self, snap: Snapshot, job: JobState, optimistic: bool = False,
              measured: bool = True) -> Callable[[int], float | None]:
        """`at` for one job at any number of sizes: its remaining work, speed model and measured
        points are looked up once, not once per size (the autoscaler and admission try many
        sizes of every waiting and running job on every call). `measured=False`: the speed model
        alone, also for a running job at its own size (what a waiting job is judged by)."""
        est = self.predictor.remaining(job)
        if optimistic and est.source not in JUDGED:
            return _unknown  # other jobs' history or a guess is no evidence to reject this one
        work = est.low if optimistic else est.remaining
        if not math.isfinite(work):
            return _unknown
        spec, now = job.spec, snap.now
        model = self.speeds.model(spec)
        rate = job.rate if measured and job.status is JobStatus.RUNNING and job.rate > 0 else None
        per_worker = self._per_worker(job) if optimistic else 0.0
        if per_worker is None:
            return _unknown

        def at(workers: int) -> float | None:
            if rate is not None and workers == job.num_workers:
                f: float | None = rate  # measured beats modelled
            else:
                f = model.predict(ps_for(spec, workers), workers, nearest=True)
            if optimistic:
                f = max(per_worker * workers, f or 0.0)
            if f is None or not f > 0:
                return None
            return now + self.pause(snap, job, workers) + work / f

        return at

    def first_size(self, snap: Snapshot, job: JobState, lo: int, hi: int, target: float) -> int | None:
        """The smallest size in lo..hi at which the job is predicted (`at`) to finish by `target`,
        trying sizes in order; None when none does, or when a size's time is unknown before one
        does. For a waiting job without PSs, in one array operation (same arithmetic as `at`):
        the autoscaler asks it for every waiting job on every call, up to 64 sizes each."""
        if job.status is JobStatus.RUNNING or job.spec.max_ps != 0 or lo > hi:
            at = self.times(snap, job)
            for w in range(lo, hi + 1):
                t = at(w)
                if t is None or t <= target:
                    return None if t is None else w
            return None
        work = self.predictor.remaining(job).remaining
        if not math.isfinite(work):
            return None
        f = self.speeds.model(job.spec).table(hi, nearest=True)[lo:]
        known = f > 0  # False where NaN
        t = snap.now + self.pause(snap, job, lo) + work / np.where(known, f, 1.0)
        stop = ~known | (t <= target)
        i = int(np.argmax(stop))
        return lo + i if stop[i] and known[i] else None

    def best(self, snap: Snapshot, job: JobState) -> float | None:
        """Earliest optimistic completion over the job's sizes (None when nothing is known)."""
        lo = job.num_workers if job.status is JobStatus.RUNNING else job.spec.min_workers
        at = self.times(snap, job, optimistic=True)
        times = [at(w) for w in candidate_sizes(max(lo, 1), job.spec.max_workers)]
        known = [t for t in times if t is not None]
        return min(known) if known else None


@dataclass(eq=False)
class DeadlineFeasibility:
    """Admission: reject (or deprioritise) jobs whose deadline cannot be met even at max size.

    `late` holds {job_id: reason} of every job judged unable to make its deadline in the last
    call, running ones included. Only a job that has never run is rejected: the answer then costs
    the user nothing spent and comes while they can still act on it (resubmit later, smaller, or
    elsewhere); a job that has run (running, or waiting after a preemption) is deprioritised,
    never thrown away with its progress.
    """

    finish: EarliestFinish
    mode: str = "reject"
    late: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"deadline feasibility mode must be one of {', '.join(MODES)}, got {self.mode!r}")

    def admit(self, snap: Snapshot, jobs: list[JobState]) -> tuple[list[JobState], dict[str, str]]:
        self.late = {}
        rejected: dict[str, str] = {}
        if self.finish.deadlines.none():
            return list(jobs), rejected  # nothing to judge
        admitted: list[JobState] = []
        for job in jobs:
            if job.spec.deadline is None:  # nothing to judge (`reason` says "")
                admitted.append(job)
                continue
            reason = self.reason(snap, job)
            if reason and self.mode == "reject" and job.status is JobStatus.PENDING and job.first_start is None:
                rejected[job.job_id] = reason
                continue
            if reason:
                self.late[job.job_id] = reason
            admitted.append(job)
        return admitted, rejected

    def reason(self, snap: Snapshot, job: JobState) -> str:
        """Why the job cannot meet its deadline, or "" if it still can (or nobody can tell)."""
        d = job.spec.deadline
        if d is None:
            return ""
        if snap.now >= d:
            return f"deadline {d:.0f} s passed (now {snap.now:.0f} s) before the job finished"
        if job.status is JobStatus.RUNNING and not self.finish.predictor.ready(job, snap.now):
            return ""  # not yet at its prediction point: no judgement (and no loss fit to pay for)
        if job.first_start is None and job.declared_work is None:
            return ""  # never ran, work not declared: no evidence about the job itself (`JUDGED`)
        best = self.finish.best(snap, job)
        if best is not None and best > d + 1e-6:
            return (
                f"deadline infeasible: even at its maximum of {job.spec.max_workers} workers it would "
                f"finish at {best:.0f} s at the earliest, {best - d:.0f} s after its deadline {d:.0f} s"
            )
        return ""


@dataclass(eq=False)
class EarliestDeadline:
    """Ordering: jobs that can still make their deadline first, earliest deadline first; then jobs
    without a deadline (arrival order); then late jobs, earliest deadline first, or with `finish`
    shortest predicted remaining time first.

    `late` is a callable giving the ids judged late (by a `DeadlineFeasibility`); without one no
    job is late and this is plain EDF.

    Why late jobs by predicted remaining time (`finish`, the QoS framework's own prediction): a
    late job's deadline is lost whatever the order, so its deadline says nothing about what the
    order can still save, while its remaining time says how soon it can be done. In deadline order
    on ITP cluster03's overload (3,011 jobs at load 0.8), the late jobs waited behind each other by
    deadline and qos' mean JCT was 5.6x DRF's (67.4 against 12.1 h); see docs/QOS.md. A late job
    whose time cannot be predicted counts as the median of the others' (Optimus' rule for unknown
    work); when none can be, late jobs stay in deadline order.
    """

    late: Callable[[], dict[str, str]] | None = None
    #: jobs in the system with a deadline (None: unknown); with none and none late, EDF is rank order
    deadlines: DeadlineJobs | None = None
    #: predicts late jobs' remaining time (None: late jobs in deadline order)
    finish: EarliestFinish | None = None

    def key(self, snap: Snapshot, job: JobState, late: dict[str, str] | None = None) -> tuple:
        """Fixed while a job waits when no job is ever late (plain EDF), so a `PhasedPolicy`
        keeps its waiting line across calls instead of re-sorting every job on every call. (Late
        jobs make an admission phase, and a `PhasedPolicy` with one always sorts with `order`,
        which is where `finish` orders them.)"""
        if late is None:
            late = self.late() if self.late is not None else {}
        return _edf_key(late, job)

    def order(self, snap: Snapshot, jobs: list[JobState]) -> list[JobState]:
        late = self.late() if self.late is not None else {}
        if not late and self.deadlines is not None and self.deadlines.none():
            return sorted(jobs, key=_RANK)  # every key is (1, 0.0, rank)
        if not late or self.finish is None:
            return sorted(jobs, key=partial(_edf_key, late))
        keys = {j.job_id: _edf_key(late, j) for j in jobs}
        keys.update(self._late_keys(snap, [j for j in jobs if j.job_id in late]))
        return sorted(jobs, key=lambda j: keys[j.job_id])

    def _late_keys(self, snap: Snapshot, jobs: list[JobState]) -> dict[str, tuple]:
        """(2, predicted seconds left at the job's size, rank) for each late job."""
        left = {j.job_id: self._left(snap, j) for j in jobs}
        known = [t for t in left.values() if t is not None]
        if not known:
            return {}
        fill = float(statistics.median(known))
        return {j.job_id: (2, fill if left[j.job_id] is None else left[j.job_id], j.rank) for j in jobs}

    def _left(self, snap: Snapshot, job: JobState) -> float | None:
        """Seconds until the job is predicted done at its size (running: its own; waiting: its
        requested one), a restart pause included; None when unknown. Every job's speed is its
        type's speed model's, a running job's too: with its measured rate instead, a running job
        and a waiting one of similar length swapped places each time the one started ran slower
        than the model had said (on 195job one late job was stopped 84 times)."""
        w = job.num_workers if job.status is JobStatus.RUNNING else requested_workers(job.spec)
        t = self.finish.times(snap, job, measured=False)(w)  # type: ignore[union-attr]
        return None if t is None else t - snap.now


def _edf_key(late: dict[str, str], job: JobState) -> tuple:
    """`EarliestDeadline.key` (one Python call per job when sorting every job of a call)."""
    d = job.spec.deadline
    group = 2 if job.job_id in late else (1 if d is None else 0)
    return (group, d if d is not None else 0.0, job.rank)
