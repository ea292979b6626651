"""Speed-aware placement: the mechanism the heterogeneity baselines and the learned placement share.

Why: on a public-cloud cluster machines differ twice over. GPU *types* differ (what Gavel's
per-type throughput matrix captures, `Snapshot.profile`), and machines of one type differ too
(same-model GPUs ~8% apart, rare 1.5x-slow outliers, stragglers appearing mid-run: what PAL's
per-machine performance scores capture). A synchronous data-parallel job runs at its slowest
machine, so a placement must predict

    rate(alloc) = profile.rate(spec, alloc, cluster) × min over alloc's nodes of the node's factor

and pick the allocation that maximises it (or it per USD/hour). What differs between policies is
only where the per-node factors come from — a `SpeedEstimate`:

- none (Gavel-style): every machine at factor 1, type-level knowledge only;
- measured running means (PAL-style, `estimators.node_speeds.RunningMeanSpeeds`);
- a Gaussian process over machines (the Dual-Agent placement agent), planning with mean - risk×sd.

`SpeedAwarePlacement` builds a few candidates and scores each with `predicted_rate`: the best
single node of each GPU type that fits the whole job, and per GPU type a greedy multi-node fill in
decreasing per-node score (a job mixes types only when no one type can take it: it would run at
the slower type's pace).
Candidates of equal objective are told apart by fewer nodes, then best fit (fewest GPUs left on
their nodes), then the lowest node index, so on a homogeneous cluster with no estimates it consolidates like `Pack`.
All per-node work is NumPy over the nodes; the Python loops run over GPU types and candidates.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import GPU, Cluster
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import Snapshot
from dlsched.framework.packing import _EPS, eligible, fit_count

if TYPE_CHECKING:
    from dlsched.throughput.base import ThroughputModel

#: Factors are floored here: a plan never divides by, or multiplies with, a non-positive speed.
_MIN_FACTOR = 1e-6
#: Relative tolerance under which two objectives count as equal (then fewer nodes win).
_TIE = 1e-9


@runtime_checkable
class SpeedEstimate(Protocol):
    """Per-node speed factors learnt from what jobs measure (`JobState.node_speeds`)."""

    def observe(self, snap: Snapshot) -> None:
        """Fold in what the snapshot's jobs measured since the previous call."""

    def reset(self) -> None:
        """Forget everything (before a run)."""

    def speeds(self, now: float, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
        """(mean, sd), each (N,): the estimated speed factor of every node and its uncertainty."""


def _supports(profile: ThroughputModel | None, spec: JobSpec) -> bool:
    return profile is not None and profile.supports(spec)


def predicted_rate(
    profile: ThroughputModel | None, spec: JobSpec, alloc: Allocation, cluster: Cluster, factors: np.ndarray
) -> float:
    """Iterations/s `spec` is predicted to run at on `alloc`: the type-level profile's rate (one
    iteration/s per worker when there is no profile or it does not know the job) × the smallest
    factor over the allocation's nodes (a synchronous job runs at its slowest machine)."""
    base = profile.rate(spec, alloc, cluster) if _supports(profile, spec) else float(alloc.num_workers)
    return float(base) * float(np.min(np.asarray(factors)[list(alloc.nodes)]))


@dataclass
class SpeedAwarePlacement:
    """Place a job where it is predicted to run fastest (or cheapest per iteration).

    `estimate` gives per-node factors (None: all 1); plans use mean - `risk`×sd; with `per_dollar`
    (and a cluster with prices) the objective is the predicted rate per USD/hour of the
    allocation's GPUs. A Placement phase that is also an Observer (keeps the profile and the clock,
    feeds the estimate) and Resets.
    """

    name: str = "speed-aware"
    estimate: SpeedEstimate | None = None
    risk: float = 0.0
    per_dollar: bool = False
    # objective = rate / (USD/hour)^price_weight when the cluster has prices: 0 is the rate alone,
    # 1 the rate per dollar (`per_dollar` is 1); in between trades a little speed for a lower fee
    price_weight: float = 0.0
    # planned factors are rounded to multiples of this (0: not rounded): machines a few % apart then
    # tie, and ties go to fewer nodes and best fit, so small noise does not fragment the cluster
    # (PAL likewise groups machines into a few performance classes)
    resolution: float = 0.0
    _profile: ThroughputModel | None = field(default=None, init=False, repr=False)
    _now: float = field(default=0.0, init=False, repr=False)
    _planned: np.ndarray | None = field(default=None, init=False, repr=False)
    # per JobSpec (weakly: finished jobs go): (gpu type, workers, ps, nodes) -> profile rate.
    # Keyed by the spec, not only its model key: models read more of a spec than `model`
    # (`spec.extra`, its requested size), so two jobs of one model may differ.
    _rates: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.risk >= 0:
            raise ValueError(f"risk must be >= 0, got {self.risk}")
        if not self.resolution >= 0:
            raise ValueError(f"resolution must be >= 0, got {self.resolution}")

    # ------------------------------------------------------------------ Observer / Resets
    def observe(self, snap: Snapshot) -> None:
        self._profile, self._now, self._planned = snap.profile, snap.now, None
        if self.estimate is not None:
            self.estimate.observe(snap)

    def reset(self) -> None:
        self._profile, self._now, self._planned = None, 0.0, None
        self._rates = weakref.WeakKeyDictionary()
        if self.estimate is not None:
            self.estimate.reset()

    def factors(self, cluster: Cluster) -> np.ndarray:
        """(N,) planned speed factor of every node: mean - risk×sd (1 everywhere without an estimate)."""
        p = self._planned
        if p is None or len(p) != cluster.num_nodes:
            if self.estimate is None:
                p = np.ones(cluster.num_nodes)
            else:
                mean, sd = self.estimate.speeds(self._now, cluster)
                p = np.asarray(mean, dtype=float) - self.risk * np.asarray(sd, dtype=float)
                if self.resolution > 0:
                    p = np.round(p / self.resolution) * self.resolution
                p = np.maximum(p, _MIN_FACTOR)
            self._planned = p
        return p

    # ------------------------------------------------------------------ rates
    def _rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster, gpu_type: str) -> float:
        """The profile's rate of `spec` on `alloc` (all of `gpu_type`), cached by its shape."""
        if not _supports(self._profile, spec):
            return float(alloc.num_workers)
        per = self._rates.get(spec)
        if per is None:
            per = self._rates[spec] = {}
        key = (gpu_type, alloc.num_workers, alloc.num_ps, alloc.num_nodes)
        r = per.get(key)
        if r is None:
            r = per[key] = float(self._profile.rate(spec, alloc, cluster))
        return r

    def _cost(self, cluster: Cluster, spec: JobSpec, alloc: Allocation) -> float:
        """USD/hour of the allocation's GPUs (0 on a cluster without prices)."""
        if cluster.price is None:
            return 0.0
        gpus = np.asarray(alloc.workers, dtype=float) * spec.worker_demand[GPU] + np.asarray(alloc.ps, dtype=float) * spec.ps_demand[GPU]
        return float((gpus * cluster.price[list(alloc.nodes)]).sum())

    def objective(self, cluster: Cluster, spec: JobSpec, alloc: Allocation, gpu_type: str) -> float:
        """What the placement maximises: the predicted rate, over (USD/hour)^price_weight (1 with `per_dollar`)."""
        f = self.factors(cluster)
        rate = self._rate(spec, alloc, cluster, gpu_type) * float(f[list(alloc.nodes)].min())
        weight = 1.0 if self.per_dollar else self.price_weight
        if weight > 0 and cluster.price is not None:
            cost = self._cost(cluster, spec, alloc)
            if cost > 0:
                return rate / cost ** weight
        return rate

    # ------------------------------------------------------------------ place
    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        """The best candidate allocation of `workers` workers and `ps` PSs within `free`, or None.
        `free` is not changed."""
        if workers <= 0:
            return None
        names, tidx, first = cluster.type_groups()
        mask = eligible(cluster, spec)
        avail = free if mask is None else np.where(mask[:, None], free, 0.0)
        wd, pd = np.asarray(spec.worker_demand, dtype=float), np.asarray(spec.ps_demand, dtype=float)
        f = self.factors(cluster)
        # per-node score: one worker's profile rate on the node's type × its planned factor (per price)
        r1 = np.array([self._rate(spec, Allocation.single_node(int(first[t]), 1, ps), cluster, names[t])
                       for t in range(len(names))])
        score = r1[tidx] * f
        weight = 1.0 if self.per_dollar else self.price_weight
        if weight > 0 and cluster.price is not None:
            score = score / np.maximum(cluster.price * wd[GPU], _EPS) ** weight
        total = workers * wd + ps * pd
        whole = (avail + _EPS >= total).all(axis=1)
        if mask is not None:
            whole &= mask
        w_fit = np.minimum(fit_count(avail, wd), workers)
        if mask is not None:
            w_fit = np.where(mask, w_fit, 0)
        cands: list[tuple[Allocation, str]] = []
        gpu_left = avail[:, GPU] - total[GPU]
        for t, tname in enumerate(names):
            of_type = tidx == t
            # (a) the best single node of this type that takes the whole job (best fit on ties)
            one = np.flatnonzero(whole & of_type)
            if len(one):
                n = int(one[np.lexsort((one, gpu_left[one], -score[one]))[0]])
                cands.append((Allocation.single_node(n, workers, ps), tname))
            # (b) greedy: nodes of this type in decreasing score, each filled with what fits
            if workers + ps > 1:
                alloc = self._greedy(avail, of_type, w_fit, score, wd, pd, workers, ps, mask)
                if alloc is not None and alloc.num_nodes > 1:
                    cands.append((alloc, tname))
        if not cands and workers + ps > 1:  # no one type can take it: across types, at the slowest one's pace
            alloc = self._greedy(avail, np.ones(len(avail), dtype=bool), w_fit, score, wd, pd, workers, ps, mask)
            if alloc is not None:
                cands.append((alloc, "+".join(sorted({str(names[tidx[n]]) for n in alloc.nodes}))))
        if not cands:
            return None
        objs = np.array([self.objective(cluster, spec, a, tn) for a, tn in cands])
        top = objs.max()
        if not top > 0:  # the profile says the job makes no progress on any candidate: wait
            return None

        def tie(i: int) -> tuple[int, float, int]:  # fewer nodes, then best fit, then lowest index
            a = cands[i][0]
            left = float(avail[list(a.nodes), GPU].sum()) - total[GPU]
            return a.num_nodes, left, a.nodes[0]

        return cands[min((i for i in range(len(cands)) if objs[i] >= top - _TIE * abs(top)), key=tie)][0]

    @staticmethod
    def _greedy(avail: np.ndarray, of_type: np.ndarray, w_fit: np.ndarray, score: np.ndarray, wd: np.ndarray,
                pd: np.ndarray, workers: int, ps: int, mask: np.ndarray | None) -> Allocation | None:
        """Workers on nodes of one type in decreasing score (most room, then lowest index on ties),
        each taking as many as fit; PSs beside them where room is left, else on any eligible node
        in decreasing score. None when the type cannot take them all."""
        nodes = np.flatnonzero(of_type & (w_fit > 0))
        if int(w_fit[nodes].sum()) < workers:
            return None
        nodes = nodes[np.lexsort((nodes, -w_fit[nodes], -score[nodes]))]
        take = np.minimum(w_fit[nodes], np.maximum(workers - np.concatenate(([0], np.cumsum(w_fit[nodes])[:-1])), 0))
        nodes, take = nodes[take > 0], take[take > 0]
        w_all = np.zeros(len(avail), dtype=np.int64)
        w_all[nodes] = take
        p_all = np.zeros(len(avail), dtype=np.int64)
        if ps:
            room = avail - w_all[:, None] * wd
            p_fit = fit_count(room, pd)
            if mask is not None:
                p_fit = np.where(mask, p_fit, 0)
            used = w_all > 0
            others = np.flatnonzero(~used & (p_fit > 0))
            order = np.concatenate((nodes, others[np.lexsort((others, -score[others]))]))
            left = ps
            for n in order.tolist():
                k = int(min(p_fit[n], left))
                if k > 0:
                    p_all[n] = k
                    left -= k
                if not left:
                    break
            if left:
                return None
        return Allocation.from_counts(w_all, p_all)
