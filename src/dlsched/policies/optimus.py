"""Optimus (Peng et al., EuroSys'18): fitted speed and convergence models, greedy marginal gain.

Every slot (`interval`, 600 s as Optimus' TS_INTERVAL) the whole cluster is re-decided:

1. Base: each job gets its minimum size (1 PS + 1 worker, or its minimum workers) while the
   cluster has room. Order (`order`): "remaining" (default) = shortest estimated remaining time
   at that size first, so that when not every job fits, as for rigid duration-only jobs where
   this is all Optimus does, the admission is SRTF on estimates; "arrival" = Optimus' code.
2. Greedy: with Q = remaining iterations and T = Q/f(p, w), a max-heap of each job's best of
   gain_w = (T − Q/f(p, w+1)) / s_w and gain_ps = (T − Q/f(p+1, w)) / s_ps, where s is the
   task's demand in its dominant-share resource (Optimus' normalisation; `normalize=False` gives
   DL2's simulated Optimus, which does not normalise). Pop the best, add that task, recompute
   that job; stop when the best gain is ≤ 0 or nothing fits. Capacity is counted at cluster level.
   `jumps=True` (ours, default) also offers +1 PS and +1 worker together and doubled workers
   and/or PSs, each valued per dominant share added: with a placement-dependent true speed
   (DL2's analytic PS model as the oracle) a vgg-16 job at (2, 2) on one 2-GPU server gets slower
   with any single extra task, which needs a second server, yet runs 5x faster at (16, 16); plain
   single steps left it at (2, 2) with the cluster idle. With a concave speed the single steps
   still win, so this changes nothing there. `jumps=False` is the paper's greedy.
3. Placement: jobs by ascending p + w, each spread evenly over the fewest servers
   (`phases.placement.even_spread`); if that fails, packed (uneven) at the same size; if that
   fails too, shrunk task by task toward its minimum; else it waits.

Decisions of ours (the paper re-plans every slot for free; our engine charges restarts):
- Churn: a running job whose size is unchanged keeps its nodes when they still fit. A running
  job is resized only if that pays within the next slot: with H = min(interval, its remaining
  time), f_new·(H − restart_overhead) > f_now·H; otherwise it keeps its current size when the
  cluster-level budget allows, and the greedy is re-run around it (at most 4 re-runs).
- Events: `on_events=True` asks on arrivals/completions too, but then only pending jobs are
  sized (steps 1-3 in the free resources); running jobs are never resized off-slot, so an
  arrival does not wait up to a whole slot and does not cause restarts either.
- Estimates (`oracle=False`): speeds from `estimators.speed_model` (per job type, NNLS fit with
  ≥ 5/4/3 measured sizes, an optimistic prior before); remaining work from
  `estimators.progress_predictor` (loss-curve fit). A job of unknown remaining work counts as
  the median of the others. Profiling rule: a job type with no measured speed yet runs at its
  minimum size (the engine records the speed as soon as it starts); later sizes come from the
  prior, which credits unmeasured sizes optimistically, so jobs of a type keep moving to new
  sizes until the fit has its points; each new size adds a point shared by the whole type.
- `oracle=True` is DL2's simulated Optimus: the true throughput model (rate of the allocation
  `even_spread` would give on the empty cluster) and the true remaining iterations.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.core.plan import Plan
from dlsched.core.policy import Policy, keep_if_fits, take
from dlsched.core.snapshot import JobState, JobStatus, Snapshot
from dlsched.estimators.progress_predictor import RemainingWork, oracle_estimate
from dlsched.estimators.speed_model import SpeedPool
from dlsched.policies.phases.placement import even_spread, pack

ORDERS = ("remaining", "arrival")
_CHURN_ROUNDS = 5


@dataclass(eq=False)
class _Cand:
    """One job during a scheduling call: its estimates and its target size."""

    js: JobState
    q: float  # remaining iterations (estimate, or truth for the oracle)
    speed: Callable[[int, int], float | None]
    cur: tuple[int, int] | None  # (ps, workers) now, if running
    rank: int = 0  # position in the base-pass order
    p: int = 0
    w: int = 0
    fixed: bool = False  # kept at its current size this slot
    _memo: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        # plain floats: the greedy does ~10^5 three-element sums per call, where NumPy's
        # per-call overhead would dominate
        self.wd = tuple(float(x) for x in self.js.spec.worker_demand)
        self.pd = tuple(float(x) for x in self.js.spec.ps_demand)

    @property
    def spec(self) -> JobSpec:
        return self.js.spec

    def need(self, p: int, w: int) -> list[float]:
        """Resources of p PSs and w workers (negative counts give what a shrink frees)."""
        return [w * a + p * b for a, b in zip(self.wd, self.pd)]

    def f(self, p: int, w: int) -> float | None:
        key = (p, w)
        if key not in self._memo:
            self._memo[key] = self.speed(p, w)
        return self._memo[key]

    @property
    def minimum(self) -> tuple[int, int]:
        return self.spec.min_ps, self.spec.min_workers


class Optimus(Policy):
    name = "optimus"

    def __init__(
        self,
        interval: float | None = 600.0,
        on_events: bool = True,
        oracle: bool = False,
        order: str = "remaining",
        normalize: bool = True,
        jumps: bool = True,
    ):
        if interval is not None and not interval > 0:
            raise ConfigError(f"optimus: interval must be > 0 seconds, got {interval}")
        if order not in ORDERS:
            raise ConfigError(f"optimus: order must be one of {', '.join(ORDERS)}, got {order!r}")
        if interval is None and not on_events:
            raise ConfigError("optimus: with no interval and on_events=False it would never be asked")
        self.interval = interval
        self.on_events = on_events
        self.oracle = oracle
        self.order = order
        self.normalize = normalize
        self.jumps = jumps
        self.reset(None, 0)  # type: ignore[arg-type]

    def reset(self, cluster: Cluster, seed: int) -> None:
        self.speeds = SpeedPool()
        self.work = RemainingWork()
        self._oracle_rates: dict[str, dict[tuple[int, int], float]] = {}

    # ------------------------------------------------------------------ the call
    def schedule(self, snap: Snapshot) -> Plan:
        jobs = snap.running + snap.pending
        if not self.oracle:
            for js in jobs:
                self.speeds.observe(js)
            self.work.observe(jobs)
        full = self.interval is None or bool({"tick", "wake"} & set(snap.events))
        plan = Plan()
        if full:
            if self.oracle:  # forget the true rates of jobs that have left
                live = {js.job_id for js in jobs}
                self._oracle_rates = {k: v for k, v in self._oracle_rates.items() if k in live}
            cands = [self._cand(snap, js) for js in jobs]
            free = snap.cluster.capacity.copy()
        else:
            cands = [self._cand(snap, js) for js in snap.pending]
            free = snap.free.copy()
            for js in snap.running:
                plan.assign(js.job_id, js.allocation)
        if not cands:
            return plan
        self._rank(cands)
        share = _dominant_share(snap.cluster)
        budget = [float(x) for x in free.sum(axis=0)]
        self._allocate(cands, budget, share)
        if full:
            self._avoid_churn(snap, cands, budget, share)
        self._place(snap.cluster, free, cands, plan)
        return plan

    # ------------------------------------------------------------------ estimates
    def _cand(self, snap: Snapshot, js: JobState) -> _Cand:
        cur = (js.num_ps, js.num_workers) if js.status is JobStatus.RUNNING else None
        if self.oracle:
            q = oracle_estimate(snap, js).remaining

            def speed(p: int, w: int, js: JobState = js) -> float | None:
                return self._oracle_rate(snap, js.spec, p, w)
        else:
            q = self.work.estimate(js).remaining
            model = self.speeds.model(js.spec)

            def speed(p: int, w: int, model=model) -> float | None:
                return model.predict(p, w)
        return _Cand(js=js, q=max(q, 0.0), speed=speed, cur=cur)

    def _oracle_rate(self, snap: Snapshot, spec: JobSpec, p: int, w: int) -> float:
        rates = self._oracle_rates.setdefault(spec.job_id, {})
        rate = rates.get((p, w))
        if rate is None:
            cap = snap.cluster.capacity
            alloc = even_spread(snap.cluster, cap, spec, w, p) or pack(snap.cluster, cap, spec, w, p)
            rate = snap.oracle.rate(spec, alloc, snap.cluster) if alloc is not None else 0.0
            rates[(p, w)] = rate
        return rate

    def _rank(self, cands: list[_Cand]) -> None:
        """Fill unknown remaining work with the median, then order the base pass."""
        known = [c.q for c in cands if math.isfinite(c.q)]
        fill = float(np.median(known)) if known else 1.0
        for c in cands:
            if not math.isfinite(c.q):
                c.q = fill
        if self.order == "arrival":
            keys = [0.0] * len(cands)
        else:
            times = [_time(c.q, c.f(*c.minimum)) for c in cands]
            finite = [t for t in times if t is not None]
            mid = float(np.median(finite)) if finite else 0.0
            keys = [mid if t is None else t for t in times]
        ranked = sorted(range(len(cands)), key=lambda i: (keys[i], cands[i].spec.submit_time, cands[i].js.index))
        for r, i in enumerate(ranked):
            cands[i].rank = r
        cands.sort(key=lambda c: c.rank)

    # ------------------------------------------------------------------ sizing
    def _allocate(self, cands: list[_Cand], budget: list[float], share: list[float]) -> list[float]:
        """Steps 1-2 at cluster level; sets every candidate's (p, w). Returns what is left."""
        left = list(budget)
        for c in cands:
            c.p, c.w = c.cur if c.fixed and c.cur else (0, 0)
            if c.fixed:
                _sub(left, c.need(c.p, c.w))
        for c in cands:
            if c.fixed:
                continue
            p, w = c.minimum
            need = c.need(p, w)
            if _fits(need, left):
                c.p, c.w = p, w
                _sub(left, need)
        heap: list[tuple[float, int, int, int, int]] = []
        seq = 0
        for i, c in enumerate(cands):
            if c.w and not c.fixed:
                seq = self._push(heap, c, i, left, share, seq)
        while heap:  # a job has at most one entry, so its (p, w) is unchanged since the push
            neg, _, i, p, w = heapq.heappop(heap)
            if -neg <= 0:
                break
            c = cands[i]
            need = c.need(p - c.p, w - c.w)
            if _fits(need, left):
                c.p, c.w = p, w
                _sub(left, need)
            seq = self._push(heap, c, i, left, share, seq)
        return left

    def _push(self, heap: list, c: _Cand, i: int, left: list[float], share: list[float], seq: int) -> int:
        best = self._best_gain(c, left, share)
        if best is not None:
            heapq.heappush(heap, (-best[0], seq, i, best[1], best[2]))
        return seq + 1

    def _moves(self, c: _Cand) -> set[tuple[int, int]]:
        """Sizes one greedy step may go to: +1 worker or +1 PS (Optimus), and with `jumps` also
        +1 of each and doubled workers/PSs, so that a true speed that only pays off once a job
        fills whole servers does not leave it stuck at a local optimum."""
        spec, p, w = c.spec, c.p, c.w
        max_p, max_w = spec.max_ps, spec.max_workers
        out = {(p, w + 1), (p + 1, w)} if max_p else {(p, w + 1)}
        if self.jumps:
            out |= {(p, 2 * w), (2 * p, 2 * w), (2 * p, w), (p + 1, w + 1)} if max_p else {(p, 2 * w)}
        return {(min(a, max_p), min(b, max_w)) for a, b in out} - {(p, w)}

    def _best_gain(
        self, c: _Cand, left: list[float], share: list[float]
    ) -> tuple[float, int, int] | None:
        """The best fitting move by time saved per unit of dominant share added."""
        t0 = _time(c.q, c.f(c.p, c.w))
        if t0 is None:  # type never measured: profile at the minimum first
            return None
        best = None
        for p, w in sorted(self._moves(c)):
            need = c.need(p - c.p, w - c.w)
            if not _fits(need, left):
                continue
            t1 = _time(c.q, c.f(p, w))
            if t1 is None:
                continue
            gain = t0 - t1 if math.isfinite(t0) else (math.inf if math.isfinite(t1) else 0.0)
            if self.normalize:
                gain /= max(max(n * s for n, s in zip(need, share)), 1e-12)
            if best is None or gain > best[0]:
                best = (gain, p, w)
        return best

    def _avoid_churn(self, snap: Snapshot, cands: list[_Cand], budget: list[float], share: list[float]) -> None:
        """Keep running jobs at their size unless a resize pays back within the next slot."""
        horizon = self.interval or 600.0
        for round_ in range(_CHURN_ROUNDS):
            left = list(budget)
            for c in cands:
                _sub(left, c.need(c.p, c.w))
            newly = False
            for c in sorted(cands, key=lambda c: -c.q):
                if c.cur is None or c.fixed or (c.p, c.w) == (0, 0):
                    continue
                if (c.p, c.w) == c.cur:
                    c.fixed = True
                    continue
                if _resize_pays(c, horizon, snap.restart_overhead):
                    continue
                delta = c.need(c.cur[0] - c.p, c.cur[1] - c.w)
                if _fits(delta, left):
                    _sub(left, delta)
                    c.p, c.w = c.cur
                    c.fixed = newly = True
            if not newly or round_ == _CHURN_ROUNDS - 1:
                return  # fixing only ever used budget that was left, so targets stay feasible
            self._allocate(cands, budget, share)

    # ------------------------------------------------------------------ placement
    def _place(self, cluster: Cluster, free: np.ndarray, cands: list[_Cand], plan: Plan) -> None:
        sized = [c for c in cands if c.w > 0]
        for c in sized:  # unchanged running jobs keep their nodes first
            if c.cur == (c.p, c.w):
                alloc = keep_if_fits(c.js, free)
                if alloc is not None:
                    take(free, alloc, c.spec)
                    plan.assign(c.js.job_id, alloc)
        for c in sorted(sized, key=lambda c: (c.p + c.w, c.rank)):
            if c.js.job_id in plan.allocations:
                continue
            alloc = self._place_one(cluster, free, c)
            if alloc is not None:
                take(free, alloc, c.spec)
                plan.assign(c.js.job_id, alloc)

    def _place_one(self, cluster: Cluster, free: np.ndarray, c: _Cand) -> Allocation | None:
        p, w = c.p, c.w
        min_p, min_w = c.minimum
        while True:
            alloc = keep_if_fits(c.js, free) if c.cur == (p, w) else None
            alloc = alloc or even_spread(cluster, free, c.spec, w, p) or pack(cluster, free, c.spec, w, p)
            if alloc is not None:
                return alloc
            if w > min_w and (w >= p or p <= min_p):
                w -= 1
            elif p > min_p:
                p -= 1
            else:
                return None


def _time(q: float, f: float | None) -> float | None:
    """Seconds to do q iterations at f iterations/s (inf at f = 0; None when f is unknown)."""
    if f is None:
        return None
    return q / f if f > 0 else math.inf


def _resize_pays(c: _Cand, horizon: float, restart: float) -> bool:
    f_now = c.js.rate if c.js.rate > 0 else (c.f(*c.cur) or 0.0)
    f_new = c.f(c.p, c.w)
    if f_new is None:
        return False
    h = min(horizon, c.q / f_now) if f_now > 0 else horizon
    return f_new * max(0.0, h - restart) > f_now * h


def _dominant_share(cluster: Cluster) -> list[float]:
    """Per-resource weight 1/total capacity (0 for a resource the cluster has none of): a task's
    dominant share is the largest of its demands times these."""
    return [1.0 / t if t > 0 else 0.0 for t in cluster.total.tolist()]


def _fits(need: list[float], left: list[float]) -> bool:
    return all(n <= r + 1e-9 for n, r in zip(need, left))


def _sub(left: list[float], need: list[float]) -> None:
    for k, n in enumerate(need):
        left[k] -= n


def optimus(
    interval: float | None = 600.0,
    on_events: bool = True,
    oracle: bool = False,
    order: str = "remaining",
    normalize: bool = True,
    jumps: bool = True,
) -> Optimus:
    """Optimus baseline; `oracle=True` is DL2's simulated Optimus (true speeds and work)."""
    return Optimus(
        interval=interval, on_events=on_events, oracle=oracle, order=order, normalize=normalize, jumps=jumps
    )
