"""Gang scheduling that respects task dependencies, and its opposite (pod-by-pod binding).

Why: a parameter-server job cannot train until every PS is up (workers block on their first
pull), and synchronous training needs its minimum set of workers. A scheduler that binds tasks
one by one, as kube-scheduler does with the pods tf-operator creates, lets a job sit on some of
its resources while it waits for the rest; two such jobs can hold everything and wait for each
other for ever. Gang scheduling places the dependent set atomically or not at all.

- `Gang` wraps any Placement: all of the job's PSs plus between its requested and its minimum
  number of workers, in one placement, or None. Any PhasedPolicy can use it as its placement.
- `bind_pods` is the non-gang behaviour, for policies (or ablations) that do not gang-schedule:
  it binds as many of the missing tasks as fit now, PSs first, and reports whether the job is
  complete. The caller puts an incomplete result in `Plan.held`, so the engine counts those
  resources as held-but-idle GPU time (`held_gpu_hours` in every report).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.policy import Placement
from dlsched.framework.scoring import Score, TaskByTask, least_allocated
from dlsched.policies.phases.sizing import ps_for



@dataclass(frozen=True)
class Gang:
    """All PSs and at least `min_workers` workers together, as many workers as fit up to the
    size asked for; nothing otherwise."""

    placement: Placement
    name: str = "gang"

    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        for w in range(max(workers, spec.min_workers), spec.min_workers - 1, -1):
            alloc = self.placement.place(cluster, free, spec, w, ps_for(spec, w, ps))
            if alloc is not None:
                return alloc
        return None


def bind_pods(
    cluster: Cluster,
    free: np.ndarray,
    spec: JobSpec,
    bound: Allocation | None,
    workers: int,
    ps: int,
    local_first: bool = True,
    score: Score = least_allocated,
) -> tuple[Allocation | None, bool]:
    """Bind the job's missing tasks one at a time (PSs before workers) where they fit.

    Returns (everything bound so far, complete?); `free` is not changed and must already exclude
    `bound` (the engine counts held tasks as used). A task goes to a node the job already uses
    when `local_first` (a locality-aware binder), else to the best node for `score`
    (kube-scheduler's LeastAllocated by default). The binding itself is `TaskByTask.bind`, the
    same one kube-default binds its pods with.
    """
    have = bound.as_dict() if bound is not None else {}
    complete = TaskByTask(score, "bind-pods").bind(cluster, free.copy(), spec, have, workers, ps, local_first)
    if not have:
        return None, False
    return Allocation.of(have), complete


def holds_partial_gang(spec: JobSpec, alloc: Allocation) -> bool:
    """True when an allocation lacks a PS or the minimum workers (a job that cannot train there)."""
    return alloc.num_ps < spec.min_ps or alloc.num_workers < spec.min_workers

