"""A multi-node Ray cluster on this machine, for the Ray backend's tests.

Trying the Ray backend needs more than one Ray node, and one machine can host several raylets.
Every node gets the GPU-slot resource and the `dlsched_node_<name>` label the Ray backend pins
placements with, and everything listens on loopback only. `close()` stops every process the
cluster started and reports any that survived, by PID, so a test can assert nothing leaked.
"""

from __future__ import annotations

import time
from contextlib import suppress
from typing import Mapping

import psutil

from dlsched.live.backends.ray_cluster import DEFAULT_OBJECT_STORE


class LocalRayCluster:
    """Raylets named after `nodes` ({"a": 2, "b": 2} = two nodes with 2 slots each)."""

    def __init__(self, nodes: Mapping[str, float], slot_resource: str = "gpu_slot", cpus_per_node: int = 2):
        from ray.cluster_utils import Cluster

        def args(name: str) -> dict:
            slots = nodes[name]
            res = {f"dlsched_node_{name}": 1.0, **({slot_resource: float(slots)} if slot_resource != "GPU" else {})}
            return dict(resources=res, num_gpus=int(slots) if slot_resource == "GPU" else 0,
                        node_ip_address="127.0.0.1", num_cpus=cpus_per_node, object_store_memory=DEFAULT_OBJECT_STORE)

        names = list(nodes)
        self._args = args
        self._cluster = Cluster(initialize_head=True, head_node_args=dict(include_dashboard=False, **args(names[0])))
        self._workers: dict = {}  # name -> the worker node object (the head is names[0])
        try:
            for name in names[1:]:
                self._workers[name] = self._cluster.add_node(**args(name))
        except BaseException:
            self.close()
            raise

    def remove(self, name: str) -> None:
        """Stop the raylet labelled `name` (not the head): a node lost, for real."""
        self._cluster.remove_node(self._workers.pop(name), allow_graceful=False)

    def add(self, name: str) -> None:
        """Start a raylet labelled `name` again: the same node, back."""
        self._workers[name] = self._cluster.add_node(**self._args(name))

    @property
    def address(self) -> str:
        return self._cluster.address

    def pids(self) -> set[int]:
        """Every process of the cluster now: raylets, GCS, agents and their children (workers)."""
        out: set[int] = set()
        for node in [self._cluster.head_node, *self._cluster.worker_nodes]:
            for procs in (node.all_processes.values() if node is not None else ()):
                for p in procs:
                    out.add(p.process.pid)
                    with suppress(psutil.NoSuchProcess):
                        out.update(c.pid for c in psutil.Process(p.process.pid).children(recursive=True))
        return out

    def close(self, extra_pids: set[int] | None = None, timeout: float = 15.0) -> list[int]:
        """Stop every node; the PIDs (of the cluster, and `extra_pids`) still alive after `timeout`."""
        pids = self.pids() | set(extra_pids or ())
        self._cluster.shutdown()
        deadline = time.time() + timeout

        def alive(pid: int) -> bool:
            try:
                return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return False

        left = [p for p in pids if alive(p)]
        while left and time.time() < deadline:
            time.sleep(0.1)
            left = [p for p in left if alive(p)]
        return left
