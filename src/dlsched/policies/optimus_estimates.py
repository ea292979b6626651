"""Optimus' per-job estimates for one call: remaining iterations Q, speed f(p, w), base-pass order.

`Estimates` builds a call's candidates from the estimators (`speed_model.SpeedPool`,
`progress_predictor.RemainingWork`) or, for an oracle, from the truth. Kept across calls: a
waiting job has made no progress since it was last estimated, so no loss fit can be due for it;
its remaining work changes only when its type's history of finished totals grows, its speeds only
when its type's speed model is refitted. Such a job reuses its candidate and redoes only the part
whose input changed — with ~1,000 jobs waiting, re-estimating every one in full on every call
(fit check, history and model look-ups) was most of a call's cost.
"""

from __future__ import annotations

import math
import operator
import statistics
from dataclasses import dataclass, field
from typing import Callable, Sequence

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import JobState, JobStatus, Snapshot
from dlsched.estimators.progress_predictor import RemainingWork, oracle_estimate
from dlsched.estimators.speed_model import SpeedModel, SpeedPool, profile_key

#: How the oracle places a job to learn its true rate: (cluster, free, spec, workers, ps) -> allocation.
Placer = Callable[[Cluster, object, JobSpec, int, int], "Allocation | None"]


@dataclass(eq=False)
class Cand:
    """One job during a scheduling call: its estimates and its target size (p PSs, w workers)."""

    js: JobState
    est: float  # remaining iterations (estimate, or truth for the oracle; inf = unknown)
    speed: Callable[[int, int], float | None]
    cur: tuple[int, int] | None = None  # (ps, workers) now, if running
    q: float = 0.0  # remaining iterations this call (`est`, or the median when unknown)
    rank: int = 0  # position in the base-pass order
    p: int = 0
    w: int = 0
    fixed: bool = False  # kept at its current size this slot
    _memo: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        spec = self.js.spec  # demands are tuples of floats: the greedy's many 3-element sums stay cheap
        self.wd, self.pd = spec.worker_demand, spec.ps_demand
        self.minimum = (spec.min_ps, spec.min_workers)
        self.min_need = self.need(*self.minimum)  # read by every call's base pass (read only)
        self.tie = (spec.submit_time, self.js.index)  # the ranking's tie-breakers

    def start_call(self, est: float) -> "Cand":
        """Reset what a call decides (a kept candidate is reused by the next call)."""
        js = self.js
        self.est, self.q, self.rank, self.p, self.w, self.fixed = est, est, 0, 0, 0, False
        self.cur = (js.num_ps, js.num_workers) if js.status is JobStatus.RUNNING else None
        return self

    def need(self, p: int, w: int) -> list[float]:
        """Resources of p PSs and w workers (negative counts give what a shrink frees)."""
        return [w * a + p * b for a, b in zip(self.wd, self.pd)]

    def f(self, p: int, w: int) -> float | None:
        key = (p, w)
        if key not in self._memo:
            self._memo[key] = self.speed(p, w)
        return self._memo[key]

    def f_min(self) -> float | None:
        """`f(*minimum)`, which every call's ranking asks of every job: one look-up when known."""
        memo = self._memo
        key = self.minimum
        return memo[key] if key in memo else self.f(*key)


@dataclass(eq=False)
class _Kept:
    """A job's candidate with what its estimate was made from (see the module docstring)."""

    cand: Cand
    done: float  # progress the estimate is for
    key: tuple  # the job's type (`profile_key`)
    history: Sequence[float]  # its type's finished totals (a sorted list that grows in place)
    seen: int  # len(history) when estimated
    model: SpeedModel


class Estimates:
    """The estimators a policy keeps across calls, and each job's last candidate."""

    def __init__(self) -> None:
        self.speeds = SpeedPool()
        self.work = RemainingWork()
        self._oracle_rates: dict[str, dict[tuple[int, int], float]] = {}
        self._kept: dict[str, _Kept] = {}

    def observe(self, snap: Snapshot, moved: Sequence[JobState]) -> None:
        """Feed the estimators what changed: new speeds of the jobs the last plan moved (all running
        jobs on any other event, e.g. a node's speed changing) and the work of finished jobs."""
        other = set(snap.events) - {"arrival", "completion", "tick", "wake"}
        for js in snap.running if other else moved:
            if js.status is JobStatus.RUNNING:
                self.speeds.observe(js)
        self.work.observe(list(snap.finished))

    def forget(self, finished: Sequence[JobState]) -> None:
        for js in finished:
            self._kept.pop(js.job_id, None)
            self._oracle_rates.pop(js.job_id, None)

    def candidates(self, snap: Snapshot, jobs: Sequence[JobState], placer: Placer) -> list[Cand]:
        """One candidate per job, estimates filled in (`rank` orders them)."""
        if snap.oracle is not None:
            return [self._oracle_cand(snap, js, placer) for js in jobs]
        out: list[Cand] = []
        redo: list[tuple[JobState, _Kept | None, float]] = []
        kept_of, running = self._kept.get, JobStatus.RUNNING
        for js in jobs:  # the loop every call pays per job in the system: kept lean
            kept = kept_of(js.spec.job_id)
            if js.status is running or kept is None:
                redo.append((js, kept, js.progress))
            elif kept.done == js._progress:  # a waiting job's progress is its stored value
                out.append(self._refresh(js, kept))
            else:
                redo.append((js, kept, js._progress))
        # the call's due loss fits in one batched call (each job's progress read once)
        self.work.prefit([js for js, _, _ in redo], [done for _, _, done in redo])
        for js, kept, done in redo:
            out.append(self._estimate(js, kept, done))
        return out

    def _refresh(self, js: JobState, kept: _Kept) -> Cand:
        """A waiting job's candidate at the progress it was estimated at (so no fit is due): its
        remaining work again only if its type's history grew and the estimate reads it, its speeds
        if the model changed."""
        cand = kept.cand
        est = cand.est
        if len(kept.history) != kept.seen:
            if self.work.reads_history(js, kept.done):  # else its fit decides: unchanged
                est = max(self.work.remaining(js, kept.done, kept.history), 0.0)
            kept.seen = len(kept.history)
        if self.speeds.current(kept.key) is not kept.model:
            self._set_model(kept, self.speeds.model(js.spec, kept.key))
        return cand.start_call(est)

    def _estimate(self, js: JobState, kept: _Kept | None, done: float) -> Cand:
        """A job estimated at its progress `done` (a running job, or one that ran since)."""
        key = kept.key if kept is not None else profile_key(js.spec)
        history = self.work.history_of(key)
        est = max(self.work.remaining(js, done, history), 0.0)
        model = self.speeds.model(js.spec, key)
        if kept is None:
            cand = Cand(js=js, est=est, speed=model.predict)
            kept = self._kept[js.job_id] = _Kept(cand, done, key, history, len(history), model)
        kept.done, kept.seen = done, len(history)
        if kept.model is not model:
            self._set_model(kept, model)
        return kept.cand.start_call(est)

    @staticmethod
    def _set_model(kept: _Kept, model: SpeedModel) -> None:
        """The type's speed model was refitted: predict from the new one (forget the old speeds)."""
        kept.model = model
        kept.cand.speed = model.predict
        kept.cand._memo.clear()

    def _oracle_cand(self, snap: Snapshot, js: JobState, placer: Placer) -> Cand:
        def speed(p: int, w: int, spec: JobSpec = js.spec) -> float | None:
            return self._oracle_rate(snap, spec, p, w, placer)

        est = max(oracle_estimate(snap, js).remaining, 0.0)
        return Cand(js=js, est=est, speed=speed).start_call(est)

    def _oracle_rate(self, snap: Snapshot, spec: JobSpec, p: int, w: int, placer: Placer) -> float:
        """The true rate of the allocation `placer` gives on the empty cluster (DL2's oracle)."""
        rates = self._oracle_rates.setdefault(spec.job_id, {})
        rate = rates.get((p, w))
        if rate is None:
            alloc = placer(snap.cluster, snap.cluster.capacity, spec, w, p)
            rate = snap.oracle.rate(spec, alloc, snap.cluster) if alloc is not None else 0.0
            rates[(p, w)] = rate
        return rate


def rank(cands: list[Cand], order: str) -> None:
    """Fill unknown remaining work with the median, then order the base pass (in place)."""
    if not all(math.isfinite(c.q) for c in cands):  # the medians only where one is read
        known = [c.q for c in cands if math.isfinite(c.q)]
        fill = float(statistics.median(known)) if known else 1.0  # np.median's value, less overhead
        for c in cands:
            if not math.isfinite(c.q):
                c.q = fill
    if order == "arrival":
        keys = [0.0] * len(cands)
    else:
        keys = [time_to(c.q, c.f_min()) for c in cands]
        if None in keys:
            finite = [t for t in keys if t is not None]
            mid = float(statistics.median(finite)) if finite else 0.0
            keys = [mid if t is None else t for t in keys]
    # (key, submit time, index) is unique per job (index), so sorting the tuples is the order
    ranked = sorted([(k, c.tie, c) for k, c in zip(keys, cands)], key=_RANK_KEY)
    cands[:] = [t[2] for t in ranked]
    for r, c in enumerate(cands):
        c.rank = r


_RANK_KEY = operator.itemgetter(0, 1)


def time_to(q: float, f: float | None) -> float | None:
    """Seconds to do q iterations at f iterations/s (inf at f = 0; None when f is unknown)."""
    if f is None:
        return None
    return q / f if f > 0 else math.inf
