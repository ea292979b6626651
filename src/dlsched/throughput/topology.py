"""How far a job's tasks are spread: one node, several nodes in one rack, or several racks.

Analytic communication models price a transfer by the slowest link it crosses; this module names
that link once so the ring and parameter-server models agree on it.
"""

from __future__ import annotations

from enum import IntEnum

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster, Network

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
