"""What the analytic models (ring all-reduce, parameter server) share, so they agree: how far a
job's tasks are spread (one node, several nodes in one rack, or several racks), the bandwidth of
the slowest link a transfer then crosses, and a job's own compute time and model size.
"""

from __future__ import annotations

from enum import IntEnum

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster, Network
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec

#: Cluster.Network holds GB/s; the analytic models work in MB/s like DL2's constants (1 GB = 1000 MB).
MB_PER_GB = 1000.0


class Span(IntEnum):
    NODE = 0  # every task on one node: intra-node links only
    RACK = 1  # several nodes under one top-of-rack switch
    RACKS = 2  # several racks: the spine is the bottleneck


def span(alloc: Allocation, cluster: Cluster) -> Span:
    nodes = alloc.nodes
    if len(nodes) <= 1:
        return Span.NODE
    racks = cluster.rack[list(nodes)]
    return Span.RACK if (racks == racks[0]).all() else Span.RACKS


def bandwidth_mbs(network: Network, where: Span) -> float:
    """Bandwidth in MB/s of the slowest link a transfer spanning `where` crosses."""
    gbps = (network.intra_node_gbps, network.inter_node_gbps, network.inter_rack_gbps)[where]
    return gbps * MB_PER_GB


def has_extra(spec: JobSpec) -> bool:
    """Whether the job describes itself (`compute_s` and `model_size_mb` in `spec.extra`)."""
    return "compute_s" in spec.extra and "model_size_mb" in spec.extra


def extra_params(spec: JobSpec) -> tuple[float, float]:
    """(compute_s, model_size_mb) from `spec.extra`; a ConfigError naming the job when invalid."""
    try:
        compute, size = float(spec.extra["compute_s"]), float(spec.extra["model_size_mb"])
    except (TypeError, ValueError):
        raise ConfigError(f"job {spec.job_id!r}: extra 'compute_s' and 'model_size_mb' must be numbers") from None
    if not (compute > 0 and size >= 0):
        raise ConfigError(f"job {spec.job_id!r}: need compute_s > 0 and model_size_mb >= 0")
    return compute, size
