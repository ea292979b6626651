"""Jobs that can never fit the cluster are rejected at arrival with a reason, never left waiting."""

from __future__ import annotations

import numpy as np

from dlsched.core.cluster import RESOURCES, Cluster
from dlsched.core.job import JobSpec
from dlsched.policies.phases.placement import pack


def never_fits(spec: JobSpec, cluster: Cluster) -> str:
    """Empty string if the job's smallest gang fits the empty cluster, else the reason it never can."""
    return _never_fits(cluster, spec.worker_demand, spec.ps_demand, spec.min_workers, spec.min_ps, spec.gpu_type, spec)


_cache: dict[tuple, str] = {}


def _never_fits(cluster: Cluster, wd, pd, w, p, gt, spec: JobSpec) -> str:
    key = (id(cluster), wd, pd, w, p, gt)
    hit = _cache.get(key)
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
    if len(_cache) > 100_000:
        _cache.clear()
    _cache[key] = reason
    return reason
