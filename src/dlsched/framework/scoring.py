"""Scores: of nodes (where a task goes), with the one task-by-task placer every "spread"-like
placement uses, and of jobs (DRF's dominant share).

Why one module: the same kube-scheduler score was once written three times with three different
formulas (before/after placing, GPU scored or not, a zero capacity divided by 1 or skipped), so
policies documented as "Kubernetes LeastAllocated" spread differently. A score here is a plain
function `(free, cap, demand) -> (N,) scores`, higher is better, over all nodes at once with NumPy
(never a per-node Python loop), so a placement round stays fast at 10,000 GPUs.

- `least_allocated`: kube-scheduler's NodeResourcesFit LeastAllocated (equal weights, floats
  instead of kube's 0..100 integers).
- `least_loaded`: the node with the least used resources in total (DL2's simulator).
- `TaskByTask(score)`: tasks one at a time (PSs first) on the best-scoring node that fits. `place`
  is all-or-nothing (a Placement phase); `bind` binds as many as fit and keeps the rest pending
  (pod-by-pod binding: kube-default, `gang.bind_pods`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import CPU, MEM, Cluster
from dlsched.core.job import JobSpec
from dlsched.framework.packing import _EPS, eligible

#: (free (N, R), capacity (N, R), demand (R,)) -> (N,) scores, higher is better.
Score = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def least_allocated(
    free: np.ndarray,
    cap: np.ndarray,
    demand: np.ndarray,
    resources: Sequence[int] = (CPU, MEM),
    after: bool = True,
) -> np.ndarray:
    """kube-scheduler's LeastAllocated: the mean over `resources` of (free - demand) / capacity.

    As kube does (NodeResourcesFit, `leastResourceScorer`): the pod's own request counts
    (`after=True`; `after=False` scores the node before placing), a resource the node has none of
    is left out of the mean rather than divided by anything, and a node with none of the scored
    resources scores 0. By default only CPU and memory are scored; GPUs are only filtered on, as
    in kube-scheduler's default configuration.
    """
    idx = list(resources)
    c = cap[:, idx]
    left = free[:, idx] - demand[idx] if after else free[:, idx]
    has = c > 0
    frac = np.where(has, left / np.where(has, c, 1.0), 0.0)
    n = has.sum(axis=1)
    return frac.sum(axis=1) / np.maximum(n, 1)


def least_loaded(free: np.ndarray, cap: np.ndarray, demand: np.ndarray | None = None) -> np.ndarray:
    """Minus the node's used resources summed over every resource (DL2's simulator placement).
    The demand is the same on every node, so it does not change the order and is not added."""
    return -(cap - free).sum(axis=1)


def fitting_nodes(free: np.ndarray, demand: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
    """Mask of the nodes with room for one task of `demand` (within `allowed`, if given)."""
    ok = (free + _EPS >= demand).all(axis=1)
    if allowed is not None:
        ok &= allowed
    return ok


def best_node(
    free: np.ndarray,
    cap: np.ndarray,
    demand: np.ndarray,
    score: Score,
    allowed: np.ndarray | None = None,
    prefer: np.ndarray | None = None,
    ties: np.random.Generator | None = None,
) -> int:
    """The best-scoring node where `demand` fits, or -1. Ties go to the lowest index, or with
    `ties` to one of the tied nodes drawn from it (kube-scheduler's `selectHost` picks at random).

    `allowed` masks the nodes a task may use (its GPU type); among fitting nodes, any in `prefer`
    beats every other (a binder that keeps a job's pods together)."""
    ok = fitting_nodes(free, demand, allowed)
    if prefer is not None and (ok & prefer).any():
        ok &= prefer
    if not ok.any():
        return -1
    scores = np.where(ok, score(free, cap, demand), -np.inf)
    if ties is None:
        return int(np.argmax(scores))
    top = np.flatnonzero(scores >= scores.max() - _EPS)
    return int(top[ties.integers(len(top))]) if len(top) > 1 else int(top[0])


@dataclass(frozen=True)
class TaskByTask:
    """Place a job's tasks one at a time (PSs first, then workers) on the best node for `score`."""

    score: Score
    name: str

    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        """All of the tasks, or None (a Placement phase). `free` is not changed."""
        have: dict[int, tuple[int, int]] = {}
        if not self.bind(cluster, free.copy(), spec, have, workers, ps, all_or_nothing=True):
            return None
        return Allocation.of(have)

    def bind(
        self,
        cluster: Cluster,
        room: np.ndarray,
        spec: JobSpec,
        have: dict[int, tuple[int, int]],
        workers: int,
        ps: int,
        local_first: bool = False,
        all_or_nothing: bool = False,
        ties: np.random.Generator | None = None,
    ) -> bool:
        """Bind the tasks still missing from `have` ({node: (workers, ps)}) up to `workers` and
        `ps`, as many as fit; `room` and `have` are updated in place. Returns True when complete.

        A task that fits nowhere leaves the rest of its kind pending (they are identical and room
        only shrinks), but the other kind is still tried, as kube-scheduler's queue does not
        block on one pod. With `local_first`, a node the job already uses beats every other;
        `ties` as in `best_node`."""
        mask = eligible(cluster, spec)
        cap = cluster.capacity
        complete = True
        for role, want, demand in ((1, ps, spec.ps_demand), (0, workers, spec.worker_demand)):
            d = np.asarray(demand, dtype=float)
            for _ in range(want - sum(t[role] for t in have.values())):
                prefer = None
                if local_first and have:
                    prefer = np.zeros(len(room), dtype=bool)
                    prefer[list(have)] = True
                n = best_node(room, cap, d, self.score, mask, prefer, ties)
                if n < 0:
                    complete = False
                    break
                room[n] -= d
                w, p = have.get(n, (0, 0))
                have[n] = (w + (role == 0), p + (role == 1))
            if not complete and all_or_nothing:
                return False
        return complete


def dominant_share(use: np.ndarray, total: np.ndarray) -> np.ndarray | float:
    """DRF's dominant share: the largest fraction of the cluster's total of any resource that
    `use` (..., R) holds; a resource the cluster has none of counts 0. Vectorised over leading axes."""
    use = np.asarray(use, dtype=float)
    total = np.asarray(total, dtype=float)
    frac = np.divide(use, total, out=np.zeros(np.broadcast(use, total).shape), where=total > 0)
    return frac.max(axis=-1)
