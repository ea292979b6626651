"""Placement phase: which nodes get a job's workers and parameter servers.

All strategies work on the (N, 3) free-resource array with NumPy, never per-node Python loops
over the whole cluster, so a round stays fast at 10,000 GPUs (`even_spread` walks the nodes in
compiled code, `placement_compiled`, where Numba is installed: the same allocation).

- `Pack`: fewest nodes (best-fit single node first, then the roomiest nodes, rack-local first):
  what locality-aware schedulers do.
- `Spread`: task by task on the least-allocated node (the default Kubernetes LeastAllocated score):
  balances load, scatters jobs.
- `LeastLoaded`: task by task on the node with the least used resources (DL2's simulator).
Both are `score.TaskByTask` with one of the node scores of `score.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.compiled import kernel
from dlsched.core.job import JobSpec
from dlsched.framework.packing import _EPS, eligible as _eligible, pack
from dlsched.framework.scoring import Score, TaskByTask, least_allocated, least_loaded


@dataclass(frozen=True)
class Pack:
    """Consolidate: one node if any fits the whole job (best fit), else as few nodes as possible."""

    name: str = "pack"

    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        return pack(cluster, free, spec, workers, ps)


@dataclass(frozen=True)
class Spread(TaskByTask):
    """Task by task on the node kube-scheduler's LeastAllocated score prefers (`score.least_allocated`)."""

    score: Score = least_allocated
    name: str = "spread"


@dataclass(frozen=True)
class LeastLoaded(TaskByTask):
    """Task by task on the node with the least used resources (DL2's simulator placement)."""

    score: Score = least_loaded
    name: str = "least-loaded"


_NO_MASK = np.zeros(0, dtype=bool)  # `one_task`'s mask when every node is eligible


PLACEMENTS = {"pack": Pack(), "spread": Spread(), "least-loaded": LeastLoaded()}


# --- Optimus ---------------------------------------------------------------------------------


def even_spread(
    cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
) -> Allocation | None:
    """Optimus' placement: p PSs and w workers spread evenly over the fewest servers that fit.

    Optimus' theorem (EuroSys'18): for k servers, p/k PSs and w/k workers on each is optimal,
    and the smallest feasible k minimises the job's time. As in its code, candidate servers are
    taken roomiest first (most room for this job's average task, then lowest index) and tasks are
    dealt round-robin: workers first, the PSs continuing where the workers stopped, so the
    remainders land on different servers. The smallest k (up to the number of tasks) that fits
    wins; all k are checked in one array operation. Where Numba is installed this runs compiled
    (`placement_compiled`: the same allocation; tests compare them).
    """
    tasks = workers + ps
    if tasks <= 0:
        return None
    mask = _eligible(cluster, spec)
    if free.shape[1] == 3 and (compiled := _compiled(tasks)) is not None:  # the same allocation
        args = (free, _NO_MASK if mask is None else mask, mask is not None, *spec.worker_demand,
                *spec.ps_demand, workers, ps, _EPS)
        if tasks == 1:  # most trace jobs
            i = compiled(*args)
            return Allocation((i,), (int(workers),), (int(ps),)) if i >= 0 else None
        w_all = np.zeros(len(free), dtype=np.int64)
        p_all = np.zeros(len(free), dtype=np.int64)
        return Allocation.from_counts(w_all, p_all) if compiled(*args, w_all, p_all) else None
    wd = np.asarray(spec.worker_demand)
    pd = np.asarray(spec.ps_demand)
    avail = free if mask is None else np.where(mask[:, None], free, 0.0)
    avg = (workers * wd + ps * pd) / tasks
    need = avg > 0
    if need.any():
        room = ((avail[:, need] + _EPS) / avg[need]).min(axis=1)
    else:
        room = np.full(avail.shape[0], float(tasks))
    if mask is not None:
        room = np.where(mask, room, -1.0)
    if tasks == 1:  # most trace jobs (93% of Philly's): k = 1, the roomiest server or nothing
        return _one_task(room, avail, workers, ps, workers * wd + ps * pd)
    order = np.lexsort((np.arange(len(room)), -room))
    order = order[room[order] > 0]
    if len(order) == 0:
        return None
    # no k below this can work: some server would need more than the roomiest one has
    total = workers * wd + ps * pd
    top = avail[order].max(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        k_lo = np.where(total > _EPS, np.ceil(total / np.maximum(top, _EPS) - 1e-9), 1.0).max()
    k_min, k_max = max(1, int(min(k_lo, tasks))), min(tasks, len(order))
    if k_min > k_max:
        return None
    # every candidate k at once: row k-k_min, column i = the i-th roomiest server (i < k)
    ks = np.arange(k_min, k_max + 1)[:, None]
    idx = np.arange(k_max)[None, :]
    used = idx < ks
    w_cnt = np.where(used, workers // ks + (idx < workers % ks), 0)
    p_cnt = np.where(used, ps // ks + ((idx - workers) % ks < ps % ks), 0)
    use = w_cnt[:, :, None] * wd + p_cnt[:, :, None] * pd
    ok = (avail[order[:k_max]][None, :, :] + _EPS >= use).all(axis=(1, 2))
    if not ok.any():
        return None
    row = int(np.argmax(ok))
    k = k_min + row
    w_all = np.zeros(len(room), dtype=np.int64)
    p_all = np.zeros(len(room), dtype=np.int64)
    w_all[order[:k]] = w_cnt[row, :k]
    p_all[order[:k]] = p_cnt[row, :k]
    return Allocation.from_counts(w_all, p_all)


def _compiled(tasks: int) -> Callable | None:
    """`placement_compiled`'s walk for this many tasks; None without Numba."""
    return kernel("dlsched.policies.phases.placement_compiled", "one_task" if tasks == 1 else "spread")


def _one_task(room: np.ndarray, avail: np.ndarray, workers: int, ps: int, use: np.ndarray) -> Allocation | None:
    """`even_spread` of a single task without the sort and the table of k: the general path
    takes the roomiest server (lowest index among equals: `argmax`'s first maximum) when its room
    is positive and the task fits there. The same allocation, a third of the NumPy calls."""
    i = int(np.argmax(room))
    if not room[i] > 0 or not (avail[i] + _EPS >= use).all():
        return None
    return Allocation((i,), (int(workers),), (int(ps),))


@dataclass(frozen=True)
class EvenSpread:
    """Optimus' placement as a Placement phase (see `even_spread`)."""

    name: str = "even-spread"

    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        return even_spread(cluster, free, spec, workers, ps)
