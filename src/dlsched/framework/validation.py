"""Plan checks. A policy bug must fail loudly, naming the job and the node, before anything applies."""

from __future__ import annotations

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import RESOURCES, Cluster
from dlsched.core.errors import PlanError
from dlsched.core.job import Architecture, JobSpec


def check_shape(policy: str, now: float, spec: JobSpec, alloc: Allocation, cluster: Cluster, gang: bool = True) -> None:
    """Gang (min..max workers, PS rules), node indices and GPU-type constraint of one allocation."""
    def where() -> str:  # formatted only when a check fails: this runs for every job started
        return f"policy {policy!r} at t={now:.1f}: job {spec.job_id!r}"

    if not isinstance(alloc, Allocation):
        raise PlanError(f"{where()}: allocation must be an Allocation, got {type(alloc).__name__}")
    n, gpu_type, nodes = cluster.num_nodes, spec.gpu_type, alloc.nodes
    for node, w, p in zip(nodes, alloc.workers, alloc.ps):
        if not 0 <= node < n:
            raise PlanError(f"{where()}: node index {node} is not in the cluster (0..{n - 1})")
        if w < 0 or p < 0:
            raise PlanError(f"{where()}: negative task count on node {cluster.node_names[node]}")
        if gpu_type and w and cluster.gpu_type[node] != gpu_type:
            raise PlanError(
                f"{where()}: needs GPU type {gpu_type} but node {cluster.node_names[node]} "
                f"has {cluster.gpu_type[node]}"
            )
    if len(nodes) > 1 and len(set(nodes)) != len(nodes):
        raise PlanError(f"{where()}: a node appears twice in the allocation")
    if not gang:
        return
    w, p = alloc.num_workers, alloc.num_ps
    if not spec.min_workers <= w <= spec.max_workers:
        raise PlanError(
            f"{where()}: {w} workers is outside [{spec.min_workers}, {spec.max_workers}] "
            "(gang scheduling: a job runs with at least its minimum workers or not at all)"
        )
    if spec.arch is Architecture.PS:
        if not spec.min_ps <= p <= spec.max_ps:
            raise PlanError(f"{where()}: a PS job needs {spec.min_ps}..{spec.max_ps} parameter servers, got {p}")
    elif p:
        raise PlanError(f"{where()}: a {spec.arch.value} job has no parameter servers, plan gives {p}")


def check_capacity(
    policy: str, now: float, cluster: Cluster, after: np.ndarray, touched: np.ndarray, holders,
    capacity: np.ndarray | None = None,
) -> None:
    """`after[i]` is node `touched[i]`'s use after the plan; `holders(node)` names the jobs on a
    node (error path only). `capacity` is what the nodes offer now (a failed node offers 0); the
    cluster's by default."""
    cap = cluster.capacity if capacity is None else capacity
    over = after > cap[touched] + 1e-6
    if not over.any():
        return
    i, r = np.argwhere(over)[0]
    node = int(touched[i])
    raise PlanError(
        f"policy {policy!r} at t={now:.1f} over-allocates node {cluster.node_names[node]}: "
        f"{RESOURCES[r]} {after[i, r]:g} > capacity {cap[node, r]:g}"
        f"{' (the node is down)' if not cap[node].any() else ''}; "
        f"jobs there: {', '.join(holders(node))}"
    )
