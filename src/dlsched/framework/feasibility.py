"""Jobs that can never fit the cluster are rejected at arrival with a reason, never left waiting."""

from __future__ import annotations

import numpy as np

from dlsched.core.cluster import RESOURCES, Cluster
from dlsched.core.job import JobSpec
from dlsched.framework.packing import pack


def never_fits(spec: JobSpec, cluster: Cluster) -> str:
    """Empty string if the job's smallest gang fits the empty cluster, else the reason it never can."""
    wd, pd, w, p, gt = spec.worker_demand, spec.ps_demand, spec.min_workers, spec.min_ps, spec.gpu_type
    cache = cluster.memo.setdefault("never_fits", {})
    key = (wd, pd, w, p, gt)
    hit = cache.get(key)
    if hit is not None:
        return hit
    mask = cluster.type_mask(gt)
    if not mask.any():
        reason = f"needs GPU type {gt}, which the cluster ({', '.join(cluster.gpu_types) or 'none'}) does not have"
    else:
        cap = np.where(mask[:, None], cluster.capacity, 0.0)
        total = w * np.asarray(wd) + p * np.asarray(pd)
        short = np.flatnonzero(total > cap.sum(axis=0) + 1e-9)
        if short.size:
            r = int(short[0])
            reason = (
                f"needs {total[r]:g} {RESOURCES[r]} at its minimum size ({w} workers, {p} PS) but the "
                f"cluster has {cap[:, r].sum():g}" + (f" of type {gt}" if gt else "")
            )
        elif pack(cluster, cluster.capacity, spec, w, p) is None:
            reason = f"its minimum gang ({w} workers, {p} PS) cannot be placed on the cluster's nodes even when empty"
        else:
            reason = ""
    cache[key] = reason
    return reason


def largest_gang(spec: JobSpec, cluster: Cluster) -> int:
    """The most workers (<= the requested number) the empty cluster could ever hold for this job.

    A job that asks for more workers than exist but declares a smaller minimum would otherwise
    wait forever under a rigid policy, blocking a FIFO queue behind it.
    """
    cache = cluster.memo.setdefault("largest_gang", {})
    key = (spec.worker_demand, spec.ps_demand, spec.num_workers, spec.min_workers, spec.num_ps, spec.gpu_type)
    hit = cache.get(key)
    if hit is not None:
        return hit
    best = spec.num_workers
    while best > spec.min_workers and pack(cluster, cluster.capacity, spec, best, spec.num_ps) is None:
        best -= 1
    cache[key] = best
    return best
