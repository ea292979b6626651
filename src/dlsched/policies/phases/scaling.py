"""Load-aware scaling of running jobs: shrink them to make room for a waiting job, grow them when
the cluster is idle.

Why: a rigid scheduler leaves GPUs idle when few jobs run and makes new jobs wait when many do.
Elastic jobs (TensorFlow PS jobs with DRAGON's min/max instances, PyTorch elastic) can give back
workers and take them again; every resize costs a restart (checkpoint, stop, start at the new
size), which the engine charges as `restart_overhead` of no progress, so both directions are
applied sparingly: scale-down only for a job that has starved, scale-up only after a quiet spell.

Both functions work on a dict of planned allocations and a free-resource array and return the
allocations they changed, so any policy can combine them with its own ordering and placement.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.snapshot import JobState
from dlsched.policies.phases.locality import grow_order, shrink_order, with_worker


def scale_down_until(
    jobs: Iterable[JobState],
    allocs: dict[str, Allocation],
    free: np.ndarray,
    fits: Callable[[np.ndarray], bool],
    order: Callable[[Allocation], list[int]] = shrink_order,
    floor: Callable[[JobState], int] | None = None,
) -> dict[str, Allocation] | None:
    """Remove workers one at a time (never below `floor(job)`, a job's minimum by default, never a
    PS) until `fits(free)`.

    Jobs are visited in the given order and, within a job, its nodes in `order` (loneliest worker
    first by default). Returns the shrunk allocations, or None — and nothing changed — when even
    removing every removable worker would not make room: shrinking running jobs for a request that
    still cannot start would only cost them restarts.
    """
    if fits(free):
        return {}
    trial = free.copy()
    changed: dict[str, Allocation] = {}
    for job in jobs:
        alloc = changed.get(job.job_id, allocs[job.job_id])
        wd = np.asarray(job.spec.worker_demand)
        low = job.spec.min_workers if floor is None else floor(job)
        for node in order(alloc):
            while alloc.num_workers > low and alloc.as_dict().get(node, (0, 0))[0] > 0:
                alloc = with_worker(alloc, node, -1)
                trial[node] += wd
                changed[job.job_id] = alloc
                if fits(trial):
                    free[:] = trial
                    return changed
    return None


def scale_up(
    cluster: Cluster,
    jobs: Iterable[JobState],
    allocs: dict[str, Allocation],
    free: np.ndarray,
    local_first: bool = True,
) -> dict[str, Allocation]:
    """Give running jobs more workers, up to their maximum, while they fit; `free` is updated.

    With `local_first` each job grows on its own nodes first (`grow_order`), job by job in the
    given order, and never into a rack it does not use yet (that would send its traffic over the
    spine and can make it slower than before). Without it, DRAGON's released controller order is
    used: for each node in index order, each job takes as many workers as fit there.
    """
    jobs = list(jobs)
    changed: dict[str, Allocation] = {}

    def add(job: JobState, node: int) -> None:
        alloc = changed.get(job.job_id, allocs[job.job_id])
        changed[job.job_id] = with_worker(alloc, node, 1)
        free[node] -= np.asarray(job.spec.worker_demand)

    def room_for(job: JobState, node: int) -> bool:
        if job.spec.gpu_type and not cluster.type_mask(job.spec.gpu_type)[node]:
            return False
        return bool((free[node] + 1e-9 >= np.asarray(job.spec.worker_demand)).all())

    def size(job: JobState) -> int:
        return changed.get(job.job_id, allocs[job.job_id]).num_workers

    if local_first:
        for job in jobs:
            while size(job) < job.spec.max_workers:
                nodes = grow_order(cluster, free, job.spec, changed.get(job.job_id, allocs[job.job_id]),
                                   new_racks=False)
                if not nodes:
                    break
                add(job, nodes[0])
    else:
        for node in range(len(free)):
            for job in jobs:
                while size(job) < job.spec.max_workers and room_for(job, node):
                    add(job, node)
    return changed


def room_at_minimum(jobs: Iterable[JobState], free: np.ndarray) -> np.ndarray:
    """What would be free if every one of the running `jobs` gave back its workers beyond its
    minimum (loneliest first, as `scale_down_until` takes them; never a PS): the room a waiting job
    can be given under a sizing that lends idle capacity to elastic jobs and takes it back for a
    newcomer. A copy; equal to `free` when no job is above its minimum."""
    room = np.array(free, dtype=float)
    for job in jobs:
        extra = job.num_workers - job.spec.min_workers
        if extra <= 0:
            continue
        wd = np.asarray(job.spec.worker_demand)
        held = job.allocation.as_dict()
        for node in shrink_order(job.allocation):
            k = min(extra, held[node][0])
            room[node] += k * wd
            extra -= k
            if not extra:
                break
    return room
