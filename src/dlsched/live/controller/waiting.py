"""Why a queued job waits: one line per job for the API, the status page and `dlsched status`.

A queued job that says nothing looks stuck. The reason is worked out in this order, the first
that applies winning:

1. a note the controller set for the job (e.g. backing off after a failed run): `notes`;
2. a partial reservation it sits on (a hold: the rest of its gang does not fit yet);
3. the resource that keeps its smallest gang out of the free capacity now, computed from the
   cluster state alone, for any policy ("needs 1 CPU per worker, the largest free node has 0");
4. what the policy said at its last decision (`Policy.waiting_reasons`, optional);
5. otherwise it fits: the policy did not pick it at its last decision, or has not decided since
   the job arrived.

Jobs of one demand shape share the resource check, so a round costs one packing per shape, not
per job.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from dlsched.core.cluster import CPU, GPU, MEM, Cluster
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import JobState
from dlsched.framework.packing import pack


def _amount(value: float, r: int) -> str:
    if r == GPU:
        return f"{value:g} GPU" + ("" if value == 1 else "s")
    if r == CPU:
        return f"{value:g} CPU" + ("" if value == 1 else "s")
    return f"{value:g} GB of memory"


def _gang(w: int, p: int) -> str:
    return f"{w} worker{'s' if w != 1 else ''}" + (f" + {p} PS" if p else "")


def blocked_by(spec: JobSpec, free: np.ndarray, cluster: Cluster) -> str:
    """Why the job's smallest gang does not fit `free` (nodes x resources) now; "" when it does."""
    w, p = spec.min_workers, spec.min_ps
    if pack(cluster, free, spec, w, p) is not None:
        return ""
    mask = cluster.type_mask(spec.gpu_type) if spec.gpu_type else np.ones(len(free), dtype=bool)
    room = free[mask] if mask.any() else np.zeros((1, free.shape[1]))
    for task, demand, count in (("worker", spec.worker_demand, w), ("PS", spec.ps_demand, p)):
        if not count:
            continue
        for r in (GPU, CPU, MEM):
            largest = float(room[:, r].max())
            if demand[r] > largest + 1e-9:
                return f"needs {_amount(demand[r], r)} per {task}, the largest free node has {largest:g}"
    total = w * np.asarray(spec.worker_demand) + p * np.asarray(spec.ps_demand)
    for r in (GPU, CPU, MEM):
        if total[r] > room[:, r].sum() + 1e-9:
            return (f"needs {_amount(total[r], r)} at its smallest size ({_gang(w, p)}), "
                    f"{room[:, r].sum():g} free")
    return f"its smallest size ({_gang(w, p)}) does not fit the free nodes together: they are fragmented"


def waiting_reasons(pending: Mapping[str, JobState], free: np.ndarray, cluster: Cluster, *,
                    notes: Mapping[str, str], policy_said: Mapping[str, str], policy: str,
                    last_decision: float | None) -> dict[str, str]:
    """Why each job of `pending` waits (see the module docstring for the order)."""
    shapes: dict[tuple, str] = {}
    out: dict[str, str] = {}
    for jid, js in pending.items():
        if notes.get(jid):
            out[jid] = notes[jid]
            continue
        if js.held is not None:
            out[jid] = (f"holds a partial placement ({js.held.num_workers} of its workers' resources); "
                        "starts when the rest fits")
            continue
        s = js.spec
        key = (s.worker_demand, s.ps_demand, s.min_workers, s.min_ps, s.gpu_type)
        if key not in shapes:
            shapes[key] = blocked_by(s, free, cluster)
        if shapes[key]:
            out[jid] = shapes[key]
        elif policy_said.get(jid):
            out[jid] = policy_said[jid]
        elif last_decision is None or (js.last_stop or js.spec.submit_time) > last_decision:
            out[jid] = f"fits now: waiting for the policy's ({policy}) next decision"
        else:
            out[jid] = f"fits now, but the policy ({policy}) did not start it at its last decision"
    return out
