"""Optimus (Peng et al., EuroSys'18): fitted speed and convergence models, greedy marginal gain.

Every slot (600 s, Optimus' TS_INTERVAL; the `Every` wrapper asks) the cluster is re-decided:
1. Base: each job gets its minimum size while the cluster has room, shortest estimated remaining
   time at that size first (`order="remaining"`; rigid jobs get only this, i.e. SRTF on estimates)
   or in arrival order (`"arrival"`, Optimus' code).
2. Greedy: with Q = remaining iterations and T = Q/f(p, w), a max-heap of each job's best move by
   time saved per unit of dominant share added (`normalize=False`: unnormalised, DL2's simulated
   Optimus); pop the best, add it, recompute that job; stop when no gain > 0 fits. Counted at
   cluster level. Moves are +1 worker or +1 PS; `jumps=True` (ours) also +1 of each and doubled
   workers/PSs: with a placement-dependent speed (DL2's analytic PS model) a vgg-16 job at (2, 2)
   gets slower with any single task that needs a second server, yet runs 5x faster at (16, 16).
3. Placement through the shared realiser (`phases.realise`, from the empty cluster), by ascending
   p + w: evenly over the fewest servers (`even_spread`), else packed, else shrunk toward the
   minimum a task at a time, else the job waits.

Ours (the paper re-plans for free; our engine charges restarts):
- Churn: a running job is resized only if that pays within the slot (with H = min(slot, its
  remaining time), f_new·(H − restart_overhead) > f_now·H); otherwise it keeps its size when the
  budget allows and the greedy re-runs around it (≤ 4 times). Measured on 12 elastic PS jobs
  (10 s restarts): 60 restarts instead of 72 at the same mean JCT; with restarts that never pay
  back, none at all.
- Events: arrivals/completions size only waiting jobs in what is free (no restart, no wait for
  the slot). A call that cannot change anything returns at once: on an event, when no waiting
  job's minimum fits the free resources; on a slot, when nothing waits and every job is rigid.
  A slot whose targets are exactly the running jobs at their sizes (a full cluster whose queue
  ranks below them) returns "keep running" instead of re-placing every job to the same nodes.
- Estimates (`optimus_estimates`, kept across calls): speeds from `estimators.speed_model` (per job type; an optimistic prior until the fit
  has its points, so a type keeps trying new sizes), remaining work from
  `estimators.progress_predictor` (declared work, else a loss-curve fit); unknown work counts as
  the median of the others. As an oracle (`Oracle`, DL2's simulated Optimus): the true rate of
  the allocation `even_spread` would give on the empty cluster, and the true remaining work.
"""

from __future__ import annotations

import heapq
import math
from typing import Iterator, Sequence

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.core.plan import Plan
from dlsched.core.policy import Every, Oracle, Policy
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.estimators.speed_model import SpeedPool
from dlsched.framework.packing import add_use, pack
from dlsched.policies.phases.placement import even_spread
from dlsched.policies.optimus_estimates import Cand, Estimates, rank, time_to
from dlsched.policies.phases.realise import Realiser, realise

ORDERS = ("remaining", "arrival")
_CHURN_ROUNDS = 5


class Optimus(Policy):
    """See the module docstring. `slot`: the slot length in seconds (the churn horizon; a call is a
    full re-plan on a tick or wake), None = every call re-plans; the trigger is the `Every` wrapper."""

    name = "optimus"

    def __init__(self, slot: float | None = 600.0, order: str = "remaining", normalize: bool = True, jumps: bool = True):
        if order not in ORDERS:
            raise ConfigError(f"optimus: order must be one of {', '.join(ORDERS)}, got {order!r}")
        self.slot, self.order, self.normalize, self.jumps = slot, order, normalize, jumps
        self.reset(None, 0)

    def reset(self, cluster: Cluster | None, seed: int) -> None:
        self.estimates = Estimates()
        self._moved: list[JobState] = []  # jobs the last plan started or resized: new speed points
        self._seq = 0  # heap tie-breaker
        self._needs = _MinimumNeeds()

    @property
    def speeds(self) -> SpeedPool:
        """The speed model's measured points per job type (what the policy has learnt)."""
        return self.estimates.speeds

    # ------------------------------------------------------------------ the call
    def schedule(self, snap: Snapshot) -> Plan:
        self._needs.update(snap)
        full = self.slot is None or bool({"tick", "wake"} & set(snap.events))
        self.estimates.forget(snap.finished)
        if snap.oracle is None:
            self.estimates.observe(snap, self._moved)
        jobs, free = (snap.running + snap.pending, snap.cluster.capacity) if full else (snap.pending, snap.free)
        budget = free.sum(axis=0).tolist()  # counted at cluster level
        settled = (not snap.pending and not any(js.spec.elastic for js in snap.running)) if full \
            else not self._needs.any_fits(jobs, budget)
        if settled:  # nothing this call could change: every running job keeps its size and nodes
            self._moved = []
            return Plan(keep_running=True)
        cands = self.estimates.candidates(snap, jobs, _EVEN_THEN_PACK.place)
        rank(cands, self.order)
        share = _dominant_share(snap.cluster)
        self._allocate(cands, budget, share)
        if full:
            self._avoid_churn(snap, cands, budget, share)
        sized = sorted((c for c in cands if c.w > 0), key=lambda c: (c.cur != (c.p, c.w), c.p + c.w, c.rank))
        allocations = None
        if full and _keeps_sizes(snap, sized):  # the re-plan would put every kept running job back
            new = [c for c in sized if c.cur is None]
            if len(sized) - len(new) == len(snap.running):
                sized, full = new, False  # none stops: place only the newcomers, the rest keeps running
            else:
                allocations = _replan_around_kept(snap, sized, new)
        if allocations is None:
            allocations = realise(snap, ((c.js, c.w, c.p) for c in sized), _EVEN_THEN_PACK,
                                  preempt="replan" if full else "none", shrink=_optimus_shrink)
        self._moved = [c.js for c in sized if allocations.get(c.js.job_id, c.js.allocation) is not c.js.allocation]
        return Plan(allocations=allocations, keep_running=not full)

    # ------------------------------------------------------------------ sizing
    def _allocate(self, cands: list[Cand], budget: list[float], share: list[float]) -> None:
        """Steps 1-2 at cluster level: sets every candidate's (p, w) within `budget`."""
        left = list(budget)
        for c in cands:
            c.p, c.w = c.cur if c.fixed and c.cur else (0, 0)
            if c.fixed:
                _sub(left, c.need(c.p, c.w))
        for c in cands:
            if not c.fixed and _fits(c.min_need, left):
                c.p, c.w = c.minimum
                _sub(left, c.min_need)
        heap: list[tuple[float, int, int, int, int]] = []
        for i, c in enumerate(cands):
            if c.w and not c.fixed:
                self._push(heap, c, i, left, share)
        while heap:  # a job has at most one entry, so its (p, w) is unchanged since the push
            neg, _, i, p, w = heapq.heappop(heap)
            if -neg <= 0:
                break
            c = cands[i]
            need = c.need(p - c.p, w - c.w)
            if _fits(need, left):
                c.p, c.w = p, w
                _sub(left, need)
            self._push(heap, c, i, left, share)

    def _push(self, heap: list, c: Cand, i: int, left: list[float], share: list[float]) -> None:
        best = self._best_gain(c, left, share)
        if best is not None:
            self._seq += 1
            heapq.heappush(heap, (-best[0], self._seq, i, best[1], best[2]))

    def _moves(self, c: Cand) -> set[tuple[int, int]]:
        """Sizes one greedy step may go to: +1 worker or +1 PS (Optimus), and with `jumps` also
        +1 of each and doubled workers/PSs (see the module docstring)."""
        spec, p, w = c.js.spec, c.p, c.w
        max_p, max_w = spec.max_ps, spec.max_workers
        out = {(p, w + 1), (p + 1, w)} if max_p else {(p, w + 1)}
        if self.jumps:
            out |= {(p, 2 * w), (2 * p, 2 * w), (2 * p, w), (p + 1, w + 1)} if max_p else {(p, 2 * w)}
        return {(min(a, max_p), min(b, max_w)) for a, b in out} - {(p, w)}

    def _best_gain(self, c: Cand, left: list[float], share: list[float]) -> tuple[float, int, int] | None:
        """The best fitting move by time saved per unit of dominant share added."""
        if c.js.spec.min_workers == c.js.spec.max_workers and c.js.spec.min_ps == c.js.spec.max_ps:
            return None  # rigid: no move exists
        t0 = time_to(c.q, c.f(c.p, c.w))
        if t0 is None:  # type never measured: profile at the minimum first
            return None
        best = None
        for p, w in sorted(self._moves(c)):
            need = c.need(p - c.p, w - c.w)
            if not _fits(need, left):
                continue
            t1 = time_to(c.q, c.f(p, w))
            if t1 is None:
                continue
            gain = t0 - t1 if math.isfinite(t0) else (math.inf if math.isfinite(t1) else 0.0)
            if self.normalize:
                gain /= max(max(n * s for n, s in zip(need, share)), 1e-12)
            if best is None or gain > best[0]:
                best = (gain, p, w)
        return best

    def _avoid_churn(self, snap: Snapshot, cands: list[Cand], budget: list[float], share: list[float]) -> None:
        """Keep running jobs at their size unless a resize pays back within the next slot."""
        horizon = self.slot or 600.0
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


class _EvenThenPack:
    """Optimus' placement: evenly over the fewest servers (`even_spread`), else packed unevenly."""

    name = "even-spread"

    def place(self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int) -> Allocation | None:
        return even_spread(cluster, free, spec, workers, ps) or pack(cluster, free, spec, workers, ps)


_EVEN_THEN_PACK = _EvenThenPack()


def _optimus_shrink(spec: JobSpec, w: int, p: int) -> Iterator[tuple[int, int]]:
    """Smaller sizes toward the minimum: a worker fewer while workers ≥ PSs, else a PS fewer."""
    while True:
        if w > spec.min_workers and (w >= p or p <= spec.min_ps):
            w -= 1
        elif p > spec.min_ps:
            p -= 1
        else:
            return
        yield w, p


class _MinimumNeeds:
    """The resources of each job's minimum size (as `Cand.need`), for the jobs in the system, and
    how many jobs have each: every arrival and completion asks whether any waiting job's minimum
    fits in what is free (counted at cluster level, as the base pass does). A trace has a handful
    of minimum sizes, so when none of those fits, the answer is no without reading the queue.

    Kept from the snapshots' `arrived` and `finished`; when the count of jobs it knows differs
    from the snapshot's (a policy asked for the first time mid-run), it is rebuilt from the jobs.
    """

    def __init__(self) -> None:
        self.of: dict[JobSpec, tuple[float, ...]] = {}  # specs hash by identity
        self.kinds: dict[tuple[float, ...], int] = {}

    def update(self, snap: Snapshot) -> None:
        for js in snap.finished:
            need = self.of.pop(js.spec, None)
            if need is not None:
                self._count(need, -1)
        for js in snap.arrived:
            self._add(js.spec)
        if len(self.of) != snap.num_pending + snap.num_running:
            self.of, self.kinds = {}, {}
            for js in snap.running + snap.pending:
                self._add(js.spec)

    def _add(self, spec: JobSpec) -> tuple[float, ...]:
        need = self.of.get(spec)
        if need is None:
            # `JobSpec.demand` at the minimum, written out: a NumPy call per arrival cost 1% of a run
            need = self.of[spec] = tuple(spec.min_workers * a + spec.min_ps * b
                                         for a, b in zip(spec.worker_demand, spec.ps_demand))
            self._count(need, 1)
        return need

    def _count(self, need: tuple[float, ...], step: int) -> None:
        n = self.kinds.get(need, 0) + step
        if n:
            self.kinds[need] = n
        else:
            del self.kinds[need]

    def any_fits(self, jobs: list[JobState], budget: list[float]) -> bool:
        """Whether any of `jobs` (waiting) has a minimum that fits in `budget` (free resources
        counted at cluster level)."""
        fitting = {need for need in self.kinds if _fits(need, budget)}
        if not fitting:  # no job in the system has a minimum that fits
            return False
        of = self.of
        for js in jobs:
            need = of.get(js.spec)
            if need in fitting or (need is None and _fits(self._add(js.spec), budget)):
                return True
        return False


def _keeps_sizes(snap: Snapshot, sized: list[Cand]) -> bool:
    """Whether every running job among a slot's targets stays at its current size, and all
    running jobs' allocations still fit the nodes (nothing over-committed, e.g. on a failed node).

    Then the re-plan from the empty cluster offers those jobs first (`sized` puts unchanged sizes
    first), and each keeps its nodes: its allocation fits in what the others leave. The newcomers
    are offered what is left: what is free now plus what the running jobs not among the targets
    release. `_replan_around_kept` gives that plan without re-placing every kept job.
    """
    return all(c.cur == (c.p, c.w) for c in sized if c.cur is not None) and bool((snap.free >= -1e-12).all())


def _replan_around_kept(snap: Snapshot, sized: list[Cand], new: list[Cand]) -> dict[str, Allocation]:
    """realise(..., preempt="replan") of `sized` when `_keeps_sizes` holds: the kept running jobs
    on their own nodes, the newcomers `new` offered in order around them."""
    keep = {c.js.job_id: c.js.allocation for c in sized if c.cur is not None}
    free = np.array(snap.free, dtype=float)
    for js in snap.running:
        if js.job_id not in keep:  # stopped by this plan: its resources are offered again
            add_use(free, js.spec, js.allocation)
    r = Realiser(snap, _EVEN_THEN_PACK, preempt="replan", shrink=_optimus_shrink, keep=keep, free=free)
    for c in new:
        r.offer(c.js, c.w, c.p)
    return r.allocations


def _resize_pays(c: Cand, horizon: float, restart: float) -> bool:
    f_now = c.js.rate if c.js.rate > 0 else (c.f(*c.cur) or 0.0)
    f_new = c.f(c.p, c.w)
    if f_new is None:
        return False
    h = min(horizon, c.q / f_now) if f_now > 0 else horizon
    return f_new * max(0.0, h - restart) > f_now * h


def _dominant_share(cluster: Cluster) -> list[float]:
    """Per-resource weight 1/total capacity (0 for a resource the cluster has none of): a task's
    dominant share is the largest of its demands times these. Memoised on the cluster (its
    capacity is read-only): asked on every call."""
    share = cluster.memo.get("optimus_share")
    if share is None:
        share = cluster.memo["optimus_share"] = [1.0 / t if t > 0 else 0.0 for t in cluster.total.tolist()]
    return share


def _fits(need: Sequence[float], left: list[float]) -> bool:
    for n, r in zip(need, left):  # a loop, not all(genexpr): called for every job on every call
        if not n <= r + 1e-9:
            return False
    return True


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
) -> Policy:
    """Optimus asked every `interval` seconds (and on arrivals/completions with `on_events`);
    `oracle=True` is DL2's simulated Optimus (true speeds and work), reported as an oracle."""
    if interval is not None and not interval > 0:
        raise ConfigError(f"optimus: interval must be > 0 seconds, got {interval}")
    if interval is None and not on_events:
        raise ConfigError("optimus: with no interval and on_events=False it would never be asked")
    pol: Policy = Optimus(slot=interval, order=order, normalize=normalize, jumps=jumps)
    if interval is not None:
        pol = Every(pol, interval, events=on_events)
    return Oracle(pol) if oracle else pol
