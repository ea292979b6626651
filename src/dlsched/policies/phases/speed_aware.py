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
single node of each GPU type that fits the whole job, and per GPU type multi-node fills in three
orders (`Pack`'s roomiest rack and roomiest nodes; the roomiest rack first, fastest inside it;
fastest machines first). A job mixes types only when no one type can take it: it would run at the
slower type's pace. A job that has waited may skip shapes far slower than its packed rate and
wait for room instead (`min_efficiency`, consolidation patience).
Candidates of equal objective are told apart as `Pack` would: one node (best fit, then the lowest
index), else the fewest racks, then the fills' order, `Pack`'s first. So on a homogeneous cluster
with no estimates it places exactly as `Pack` does (measured on the embedded ITP run: the same
mean JCT and GPU-hours as Tiresias with Pack).
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
from dlsched.framework.packing import _EPS, eligible, fit_count, pack, ps_beside

if TYPE_CHECKING:
    from dlsched.throughput.base import ThroughputModel

#: Factors are floored here: a plan never divides by, or multiplies with, a non-positive speed.
_MIN_FACTOR = 1e-6
#: Relative tolerance under which two objectives count as equal (then the tie rule of `place` decides).
_TIE = 1e-9
#: A job declined for a too-slow placement (`min_efficiency`) is declined only until it has waited
#: this long in all (then it takes what there is): long enough for the long queues of a busy
#: cluster (on the embedded ITP run 8 h kept half the gain: 5.10 vs 4.78 h mean JCT, 24 h all of it).
PATIENCE_S = 24 * 3600.0


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
    # tie, and ties go as `Pack` would place, so small noise does not fragment the cluster
    # (PAL likewise groups machines into a few performance classes)
    resolution: float = 0.0
    # consolidation patience: while other jobs run, a waiting job skips candidates whose profile
    # rate is below this share of its rate packed on that GPU type (fewest nodes, rack-local), and
    # waits when none is left, until it has waited PATIENCE_S: room frees up soon on a busy
    # cluster, and a job started spread over leftover GPUs keeps that slow placement (0: off)
    min_efficiency: float = 0.8
    _profile: ThroughputModel | None = field(default=None, init=False, repr=False)
    _now: float = field(default=0.0, init=False, repr=False)
    _planned: np.ndarray | None = field(default=None, init=False, repr=False)
    # per JobSpec (weakly: finished jobs go): (gpu type, allocation shape) -> profile rate.
    # Keyed by the spec, not only its model key: models read more of a spec than `model`
    # (`spec.extra`, its requested size), so two jobs of one model may differ.
    _rates: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary, init=False, repr=False)
    _waited: dict[str, float] = field(default_factory=dict, init=False, repr=False)  # pending job id -> s waited
    _busy: bool = field(default=False, init=False, repr=False)  # does any job run?

    def __post_init__(self) -> None:
        if not self.risk >= 0:
            raise ValueError(f"risk must be >= 0, got {self.risk}")
        if not self.resolution >= 0:
            raise ValueError(f"resolution must be >= 0, got {self.resolution}")
        if not 0 <= self.min_efficiency <= 1:
            raise ValueError(f"min_efficiency must be in [0, 1], got {self.min_efficiency}")

    # ------------------------------------------------------------------ Observer / Resets
    def observe(self, snap: Snapshot) -> None:
        self._profile, self._now, self._planned = snap.profile, snap.now, None
        self._waited = {j.spec.job_id: j.waited for j in snap.pending} if self.min_efficiency > 0 else {}
        self._busy = bool(snap.running)
        if self.estimate is not None:
            self.estimate.observe(snap)

    def reset(self) -> None:
        self._profile, self._now, self._planned = None, 0.0, None
        self._rates = weakref.WeakKeyDictionary()
        self._waited, self._busy = {}, False
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
        """The profile's rate of `spec` on `alloc` (all of `gpu_type`), cached by its shape: tasks
        per node and rack sharing (a count of nodes alone would give a rack-local and a
        cross-rack spread the same rate)."""
        if not _supports(self._profile, spec):
            return float(alloc.num_workers)
        per = self._rates.get(spec)
        if per is None:
            per = self._rates[spec] = {}
        # the allocation's shape: tasks per node and which of its nodes share a rack (racks
        # relabelled by first appearance); node ids are left out, all nodes of a type are alike
        racks: dict[int, int] = {}
        key = (gpu_type, alloc.workers, alloc.ps,
               tuple(racks.setdefault(r, len(racks)) for r in cluster.rack[list(alloc.nodes)].tolist()))
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
            # (b) multi-node fills over this type's nodes (see `_fills`)
            if workers + ps > 1:
                cands.extend((a, tname) for a in self._fills(cluster, avail, spec, of_type, w_fit, score, workers, ps, mask)
                             if a.num_nodes > 1)
        if not cands and workers + ps > 1:  # no one type can take it: across types, at the slowest one's pace
            for alloc in self._fills(cluster, avail, spec, np.ones(len(avail), dtype=bool), w_fit, score, workers, ps, mask):
                cands.append((alloc, "+".join(sorted({str(names[tidx[n]]) for n in alloc.nodes}))))
        if not cands:
            return None
        objs = np.array([self.objective(cluster, spec, a, tn) for a, tn in cands])
        if self.patient(spec):  # too slow a shape is no candidate: the best of the others, or wait for room
            objs[[self._slow_shape(cluster, spec, a) for a, _ in cands]] = -np.inf
        top = objs.max()
        if not top > 0:  # the profile says the job makes no progress on any candidate: wait
            return None

        def tie(i: int) -> tuple[int, int, int, float, int]:
            # one node (best fit, then the lowest index), else the fewest racks, then `_fills`' order
            a = cands[i][0]
            if a.num_nodes == 1:
                return 0, 1, 0, float(gpu_left[a.nodes[0]]), a.nodes[0]
            return 1, len(set(cluster.rack[list(a.nodes)].tolist())), i, 0.0, 0

        return cands[min((i for i in range(len(cands)) if objs[i] >= top - _TIE * abs(top)), key=tie)][0]

    def patient(self, spec: JobSpec) -> bool:
        """Would this job rather wait than start on too slow a shape (`min_efficiency`)? Only a
        job the snapshot shows waiting, for less than PATIENCE_S, while others run (an idle
        cluster frees nothing)."""
        return self.min_efficiency > 0 and self._busy and self._waited.get(spec.job_id, PATIENCE_S) < PATIENCE_S

    def too_slow(self, cluster: Cluster, spec: JobSpec, alloc: Allocation) -> bool:
        """Is `alloc` too slow a shape (`_slow_shape`) for a `patient` job?"""
        return self.patient(spec) and self._slow_shape(cluster, spec, alloc)

    def _slow_shape(self, cluster: Cluster, spec: JobSpec, alloc: Allocation) -> bool:
        """On one GPU type, is the profile's rate on `alloc` below `min_efficiency` of the job's
        rate packed (by `pack`) on an empty cluster of that type? Never when the type cannot hold
        it at all. Machine factors are left out: this is the shape's loss (spread over nodes and
        racks); slow machines are the objective's business, and waiting for every machine to be
        nominal would wait for nothing on a cluster where many are slow."""
        names, tidx, _ = cluster.type_groups()
        types = set(tidx[list(alloc.nodes)].tolist())
        if len(types) != 1:
            return False
        t = types.pop()
        per = self._rates.setdefault(spec, {})
        key = ("packed", names[t], alloc.num_workers, alloc.num_ps)
        ideal = per.get(key)
        if ideal is None:
            packed = pack(cluster, np.where((tidx == t)[:, None], cluster.capacity, 0.0), spec,
                          alloc.num_workers, alloc.num_ps)
            ideal = per[key] = 0.0 if packed is None else self._rate(spec, packed, cluster, names[t])
        return ideal > 0 and self._rate(spec, alloc, cluster, names[t]) / ideal < self.min_efficiency

    @staticmethod
    def _fills(cluster: Cluster, avail: np.ndarray, spec: JobSpec, among: np.ndarray, w_fit: np.ndarray,
               score: np.ndarray, workers: int, ps: int, mask: np.ndarray | None) -> list[Allocation]:
        """Multi-node candidates over the nodes in `among`, each node in turn taking as many
        workers as fit, in three orders: `Pack`'s (the roomiest rack, then the roomiest nodes:
        few nodes, rack-local); the roomiest rack first, fastest machines first inside it; and
        fastest machines first (most room, then lowest index on ties). Only the objective can
        tell which is best: the fastest machines may be scattered one free GPU apart, and a job
        spread over more nodes or racks pays for it in the profile's rate (a synchronous job at
        its slowest machine, an all-reduce over the slower link); on equal objectives the
        earlier order wins, so with no estimate the placement is `Pack`'s. PSs go beside the workers
        (`framework.packing.ps_beside`), else on eligible nodes in decreasing score. Distinct
        allocations only; none when the nodes cannot take all the workers."""
        nodes = np.flatnonzero(among & (w_fit > 0))
        if int(w_fit[nodes].sum()) < workers:
            return []
        fit, sc = w_fit[nodes], score[nodes]
        rack_room = np.bincount(cluster.rack[nodes], weights=fit)[cluster.rack[nodes]]
        orders = (nodes[np.lexsort((nodes, -fit, -rack_room))], nodes[np.lexsort((nodes, -fit, -sc, -rack_room))],
                  nodes[np.lexsort((nodes, -fit, -sc))])
        others = None
        out: list[Allocation] = []
        for order in orders:
            take = np.minimum(w_fit[order], np.maximum(workers - np.concatenate(([0], np.cumsum(w_fit[order])[:-1])), 0))
            used, take = order[take > 0], take[take > 0]
            w_all = np.zeros(len(avail), dtype=np.int64)
            w_all[used] = take
            p_all = np.zeros(len(avail), dtype=np.int64)
            if ps:
                if others is None:
                    everyone = np.arange(len(avail))
                    others = everyone[np.lexsort((everyone, -score))]
                p_all = ps_beside(avail, spec, w_all, used, ps, others, mask)
                if p_all is None:
                    continue
            alloc = Allocation.from_counts(w_all, p_all)
            if alloc not in out:
                out.append(alloc)
        return out
