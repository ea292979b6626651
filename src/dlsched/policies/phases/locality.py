"""Locality-aware placement: keep a job's tasks on as few nodes as possible, and when a running
job grows or shrinks, grow it where it already is and shrink it where it is loneliest.

Why: in parameter-server training every worker pushes gradients to and pulls parameters from
every PS each step. Tasks on the PS's node use the node's internal bandwidth; tasks elsewhere share
the NIC (and, across racks, the rack uplink). With the analytic PS model
(`throughput.parameter_server`) a ResNet-50 job with 1 PS and 4 workers runs about 3× faster on one
node than with every task on its own node, so where tasks land shows up in JCT.

- `Locality` (a Placement phase): DRAGON's ScheduleJob. First try all replicas on one node (best
  fit); otherwise start from the nodes that hold the most of the job's tasks, the roomiest rack
  first, with the PSs beside the workers. That is exactly what `placement.pack` does, so it
  delegates to it rather than keeping a second copy.
- `grow_order` / `shrink_order`: the node orders DRAGON's load-aware scaling uses, exposed so any
  elastic policy can resize with the same locality rules.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.framework.packing import fit_count, pack


@dataclass(frozen=True)
class Locality:
    """One node if the whole job fits there, else the fewest nodes, rack-local first."""

    name: str = "locality"

    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        return pack(cluster, free, spec, workers, ps)


def grow_order(
    cluster: Cluster, free: np.ndarray, spec: JobSpec, alloc: Allocation, *, new_racks: bool = True
) -> list[int]:
    """Nodes where one more worker of this job fits, best first for locality.

    The job's PS nodes first (a worker there talks to its PS over the node's own bandwidth), then
    its other nodes, then nodes in the racks it already uses, then (unless `new_racks` is False)
    the rest by most room (so a spill-over lands where more workers could follow). A job that
    grows into a second rack sends every step's traffic over the spine, which can make it slower
    than before it grew: a locality-aware scaler passes `new_racks=False`.
    """
    wd = np.asarray(spec.worker_demand)
    fits = fit_count(free, wd)
    if spec.gpu_type:
        fits = np.where(cluster.type_mask(spec.gpu_type), fits, 0)
    cand = np.flatnonzero(fits > 0)
    if cand.size == 0:
        return []
    on = alloc.as_dict()
    racks = {int(cluster.rack[n]) for n in alloc.nodes}

    def key(n: int) -> tuple:
        w, p = on.get(int(n), (0, 0))
        tier = 0 if p > 0 else 1 if w > 0 else 2 if int(cluster.rack[n]) in racks else 3
        return (tier, -int(fits[n]), int(n))

    if not new_racks and racks:
        cand = cand[np.isin(cluster.rack[cand], list(racks))]
    return sorted((int(n) for n in cand), key=key)


def shrink_order(alloc: Allocation) -> list[int]:
    """The job's worker nodes, loneliest first: nodes without a PS, fewest workers first, and the
    PS nodes last (DRAGON's ScaleDown removes "lonely" workers away from the PS first, which both
    frees whole nodes and leaves the job's remaining traffic node-local)."""
    items = [(n, w, p) for n, w, p in zip(alloc.nodes, alloc.workers, alloc.ps) if w > 0]
    items.sort(key=lambda x: (x[2] > 0, x[1], x[0]))
    return [n for n, _, _ in items]


def with_worker(alloc: Allocation, node: int, delta: int) -> Allocation:
    """`alloc` with `delta` workers added (or removed, if negative) on `node`."""
    d = alloc.as_dict()
    w, p = d.get(node, (0, 0))
    d[node] = (w + delta, p)
    return Allocation.of(d)


def nodes_crossed(alloc: Allocation | None) -> int:
    """Node boundaries a job's traffic crosses: nodes spanned minus one."""
    return 0 if alloc is None else max(0, alloc.num_nodes - 1)
