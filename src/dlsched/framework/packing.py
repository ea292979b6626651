"""Packing: the first-fit mechanism that feasibility, validation and the `Pack` placement share,
and the accounting steps every placement and the core do on a resource array (`add_use`,
`keep_if_fits`).

`pack` is the locality-first packer (fewest nodes, best-fit single node, roomiest rack first).
It lives below the policies because the framework itself needs it: whether a job's minimum gang
can ever fit the empty cluster (`framework.feasibility`) is decided by packing it.
All of it works on the (N, 3) free-resource array with NumPy, never per-node loops over a large
cluster; on a small one (up to SCAN nodes) the best single node is found by a plain-Python walk,
where NumPy's per-call overhead would cost more than the work.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec

if TYPE_CHECKING:  # the annotation only: snapshot imports this module's callers
    from dlsched.core.snapshot import JobState

_EPS = 1e-9
SMALL = 512  # up to this many nodes, 2-D passes (fewer NumPy calls); above, column by column
SCAN = 100  # up to this many nodes (measured crossover ~100-128), the best whole node is found by a plain-Python walk


def eligible(cluster: Cluster, spec: JobSpec) -> np.ndarray | None:
    """Mask of nodes of the job's GPU type, or None when the job takes any type."""
    return None if not spec.gpu_type else cluster.type_mask(spec.gpu_type)


def fit_count(free: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """How many tasks of `demand` fit on each node (a large number where demand is all zero)."""
    if len(free) <= SMALL:
        need = demand > 0
        if not need.any():
            return np.full(free.shape[0], 1 << 30)
        return np.floor((free[:, need] + _EPS) / demand[need]).min(axis=1).astype(np.int64)
    out = None  # column by column on a large cluster (see best_whole_node)
    for r in np.flatnonzero(demand > 0).tolist():
        k = np.floor((free[:, r] + _EPS) / demand[r])
        out = k if out is None else np.minimum(out, k, out=out)
    if out is None:
        return np.full(free.shape[0], 1 << 30)
    return out.astype(np.int64)


def best_whole_node(free: np.ndarray, total: Sequence[float]) -> int | None:
    """The node that keeps the least free GPU (then CPU) once `total` (3 amounts) is taken from
    it, lowest index on ties; None when no node has room for all of it.

    Up to SCAN nodes, a plain-Python walk (`_scan_whole_node`); above, the fit test is one 2-D
    pass up to SMALL nodes and column by column beyond (there a reduction along the 3-wide axis
    costs more than three comparisons). All three give the same node."""
    n = len(free)
    if n <= SCAN:
        return _scan_whole_node(free, total)
    t0, t1, t2 = (float(x) for x in total)
    if n <= SMALL:
        fits = free + _EPS >= np.array((t0, t1, t2))
        ok = fits[:, 0] & fits[:, 1]  # what .all(axis=1) gives, in fewer NumPy steps
        ok &= fits[:, 2]
    else:
        ok = free[:, 0] + _EPS >= t0
        ok &= free[:, 1] + _EPS >= t1
        ok &= free[:, 2] + _EPS >= t2
    cand = ok.nonzero()[0]
    if not len(cand):
        return None
    # least GPU left, then least CPU left, then the lowest index: narrowing column by column is
    # what a lexsort of (index, CPU left, GPU left) picks, without sorting
    left = free[cand, 0] - t0
    cand = cand[left == np.minimum.reduce(left)]
    if len(cand) > 1:
        left = free[cand, 1] - t1
        cand = cand[left == np.minimum.reduce(left)]
    return int(cand[0])


def _scan_whole_node(free: np.ndarray, total: Sequence[float]) -> int | None:
    """`best_whole_node` on a small cluster, in plain Python: on 80 nodes the NumPy passes cost
    ~12 calls of ~1 µs each, while the GPU column as a list and one walk over it cost a few µs.
    Only a node that fits the GPUs and is no worse than the best so far on GPU left reads its
    CPU and memory. The same float expressions as the NumPy path (IEEE doubles both), so the same
    node: least GPU left, then least CPU left, then the lowest index (strict comparisons)."""
    t0, t1, t2 = (float(x) for x in total)
    item, eps = free.item, _EPS
    best, best_g, best_c = None, math.inf, math.inf
    for i, g in enumerate(free[:, 0].tolist()):
        if g + eps >= t0:
            lg = g - t0
            if lg <= best_g:
                c = item(i, 1)
                if c + eps >= t1 and item(i, 2) + eps >= t2:
                    lc = c - t1
                    if best is None or lg < best_g or lc < best_c:
                        best, best_g, best_c = i, lg, lc
    return best


def pack(
    cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
) -> Allocation | None:
    wd, pd = spec.worker_demand, spec.ps_demand
    mask = eligible(cluster, spec)
    avail = free if mask is None else np.where(mask[:, None], free, 0.0)
    total = (workers * wd[0] + ps * pd[0], workers * wd[1] + ps * pd[1], workers * wd[2] + ps * pd[2])
    best = best_whole_node(avail, total)
    if best is not None:
        return Allocation((best,), (int(workers),), (int(ps),))
    if workers + ps <= 1:
        return None
    wd, pd = np.asarray(wd), np.asarray(pd)
    w_fit = fit_count(avail, wd)
    capped = np.minimum(w_fit, workers)
    if int(capped.sum()) < workers:
        return None
    # Fill the roomiest nodes first, preferring the rack with the most room so the job stays
    # rack-local when it can.
    rack_room = np.bincount(cluster.rack, weights=capped)
    order = np.flatnonzero(w_fit > 0)  # a node with no room is never used: sort only the others
    order = order[np.lexsort((order, -w_fit[order], -rack_room[cluster.rack[order]]))]
    if not ps:
        return _workers_in_order(order.tolist(), w_fit.tolist(), workers)
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
        if k <= 0:  # nodes are ordered rack-first, so a full node does not end the search
            continue
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


def ps_beside(avail: np.ndarray, spec: JobSpec, workers: np.ndarray, worker_nodes: Sequence[int],
              ps: int, others: np.ndarray | None = None, mask: np.ndarray | None = None) -> np.ndarray | None:
    """PS counts per node for `ps` parameter servers placed beside a job's workers: on the
    workers' nodes first (in `worker_nodes` order) in the room the workers leave, then on the
    other nodes in `others` order (None: the most PS room first; eligible ones only, per `mask`).
    None when they do not all fit.

    Why one rule: a PS next to its workers talks to them over the fast intra-node link; the
    placements that choose workers their own way (speed-aware, the learned one) share this step."""
    room = avail - np.asarray(workers)[:, None] * np.asarray(spec.worker_demand, dtype=float)
    fits = fit_count(room, np.asarray(spec.ps_demand, dtype=float))
    if mask is not None:
        fits = np.where(mask, fits, 0)
    if others is None:
        others = np.argsort(-fits, kind="stable")
    used = set(int(n) for n in worker_nodes)
    order = [int(n) for n in worker_nodes] + [int(n) for n in others if int(n) not in used]
    counts = np.zeros(len(avail), dtype=np.int64)
    left = ps
    for n in order:
        if not left:
            break
        k = int(min(fits[n], left))
        if k > 0:
            counts[n] = k
            left -= k
    return None if left else counts


def _workers_in_order(order: list[int], fit: list[int], workers: int) -> Allocation:
    """`pack`'s walk when there are no PSs, in plain Python: each node in `order` takes as many
    of the workers still to place as fit there (the caller checked that all of them fit)."""
    placed: dict[int, int] = {}
    left = workers
    for n in order:
        k = fit[n] if fit[n] < left else left
        placed[n] = k
        left -= k
        if not left:
            break
    nodes = sorted(placed)
    return Allocation(tuple(nodes), tuple(placed[n] for n in nodes), (0,) * len(nodes))


def keep_if_fits(job: JobState, free: np.ndarray) -> Allocation | None:
    """The job's current allocation, if it still fits in `free` (sticky placement)."""
    alloc = job.allocation
    if alloc is None:
        return None
    use = alloc.usage(np.asarray(job.spec.worker_demand), np.asarray(job.spec.ps_demand))
    if (free[list(alloc.nodes)] + 1e-9 >= use).all():
        return alloc
    return None


def add_use(arr: np.ndarray, spec: JobSpec, alloc: Allocation, sign: float = 1.0) -> None:
    """Add (sign 1) or remove (sign -1) an allocation's resources in `arr` (N, 3), row by row:
    most allocations have one node or a few, where this is several times cheaper than a
    scatter-add (and an allocation never names a node twice)."""
    wd, pd = spec.worker_demand, spec.ps_demand
    for n, w, p in zip(alloc.nodes, alloc.workers, alloc.ps):
        a0, a1, a2 = arr[n].tolist()  # one read and one write of the row: cheaper than three += on it
        arr[n] = (a0 + sign * (w * wd[0] + p * pd[0]), a1 + sign * (w * wd[1] + p * pd[1]),
                  a2 + sign * (w * wd[2] + p * pd[2]))
