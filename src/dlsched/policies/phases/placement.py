"""Placement phase: which nodes get a job's workers and parameter servers.

All strategies work on the (N, 3) free-resource array with NumPy, never per-node Python loops
over the whole cluster, so a round stays fast at 10,000 GPUs.

- `Pack`: fewest nodes (best-fit single node first, then the roomiest nodes, rack-local first):
  what locality-aware schedulers do.
- `Spread`: task by task on the least-allocated node (the default Kubernetes LeastAllocated score):
  balances load, scatters jobs.
- `LeastLoaded`: task by task on the node with the least used resources (DL2's simulator).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec

_EPS = 1e-9


def fit_count(free: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """How many tasks of `demand` fit on each node (a large number where demand is all zero)."""
    need = demand > 0
    if not need.any():
        return np.full(free.shape[0], 1 << 30)
    return np.floor((free[:, need] + _EPS) / demand[need]).min(axis=1).astype(np.int64)


def _eligible(cluster: Cluster, spec: JobSpec) -> np.ndarray | None:
    return None if not spec.gpu_type else cluster.type_mask(spec.gpu_type)


@dataclass(frozen=True)
class Pack:
    """Consolidate: one node if any fits the whole job (best fit), else as few nodes as possible."""

    name: str = "pack"

    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        return pack(cluster, free, spec, workers, ps)


def pack(
    cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
) -> Allocation | None:
    wd = np.asarray(spec.worker_demand)
    pd = np.asarray(spec.ps_demand)
    mask = _eligible(cluster, spec)
    avail = free if mask is None else np.where(mask[:, None], free, 0.0)
    total = workers * wd + ps * pd
    whole = (avail + _EPS >= total).all(axis=1)
    if whole.any():
        cand = np.flatnonzero(whole)
        # best fit: the node left with the least free GPU (then CPU), lowest index on ties
        left = avail[cand] - total
        best = cand[np.lexsort((cand, left[:, 1], left[:, 0]))[0]]
        return Allocation.single_node(int(best), workers, ps)
    if workers + ps <= 1:
        return None
    w_fit = fit_count(avail, wd)
    if int(np.minimum(w_fit, workers).sum()) < workers:
        return None
    # Fill the roomiest nodes first, preferring the rack with the most room so the job stays
    # rack-local when it can.
    rack_room = np.bincount(cluster.rack, weights=np.minimum(w_fit, workers))
    order = np.lexsort((np.arange(len(w_fit)), -w_fit, -rack_room[cluster.rack]))
    w_counts = np.zeros(len(w_fit), dtype=np.int64)
    p_counts = np.zeros(len(w_fit), dtype=np.int64)
    left_w, left_p = workers, ps
    room = avail.copy()
    # Place PSs beside the workers: each visited node takes its share of workers, then PSs fit in
    # what remains there; PSs still unplaced go to any node with room afterwards.
    for n in order:
        if left_w == 0:
            break
        k = int(min(w_fit[n], left_w))
        if k <= 0:
            break
        w_counts[n] = k
        room[n] -= k * wd
        left_w -= k
        if left_p:
            kp = int(min(fit_count(room[n : n + 1], pd)[0], left_p, max(1, -(-ps * k // workers))))
            p_counts[n] = kp
            room[n] -= kp * pd
            left_p -= kp
    if left_w:
        return None
    if left_p:
        p_fit = fit_count(room, pd)
        for n in np.argsort(-p_fit, kind="stable"):
            if left_p == 0 or p_fit[n] <= 0:
                break
            kp = int(min(p_fit[n], left_p))
            p_counts[n] += kp
            left_p -= kp
        if left_p:
            return None
    return Allocation.from_counts(w_counts, p_counts)


def _task_by_task(
    cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int, score
) -> Allocation | None:
    """Place tasks one at a time on the best-scoring node that fits (PSs first, then workers)."""
    mask = _eligible(cluster, spec)
    room = free.copy()
    if mask is not None:
        room[~mask] = 0.0
    counts = {0: np.zeros(len(room), dtype=np.int64), 1: np.zeros(len(room), dtype=np.int64)}
    tasks = [(1, np.asarray(spec.ps_demand))] * ps + [(0, np.asarray(spec.worker_demand))] * workers
    for role, d in tasks:
        ok = (room + _EPS >= d).all(axis=1)
        if mask is not None:
            ok &= mask
        if not ok.any():
            return None
        s = np.where(ok, score(room, cluster.capacity), -np.inf)
        n = int(np.argmax(s))
        room[n] -= d
        counts[role][n] += 1
    return Allocation.from_counts(counts[0], counts[1])


def _least_allocated(room: np.ndarray, cap: np.ndarray) -> np.ndarray:
    # kube-scheduler LeastAllocated: mean free fraction over the resources the node has
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(cap > 0, room / np.where(cap > 0, cap, 1.0), np.nan)
    return np.nanmean(frac, axis=1)


def _least_loaded(room: np.ndarray, cap: np.ndarray) -> np.ndarray:
    return -(cap - room).sum(axis=1)


@dataclass(frozen=True)
class Spread:
    """Task by task on the node with the largest free fraction (Kubernetes LeastAllocated)."""

    name: str = "spread"

    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        return _task_by_task(cluster, free, spec, workers, ps, _least_allocated)


@dataclass(frozen=True)
class LeastLoaded:
    """Task by task on the node with the least used resources (DL2's simulator placement)."""

    name: str = "least-loaded"

    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        return _task_by_task(cluster, free, spec, workers, ps, _least_loaded)


PLACEMENTS = {"pack": Pack(), "spread": Spread(), "least-loaded": LeastLoaded()}
