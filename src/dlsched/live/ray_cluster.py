"""A local multi-node Ray cluster on this machine: several raylets on 127.0.0.1, labelled for dlsched.

Why: trying the Ray backend (tests, the fidelity experiment, a demo of `dlsched serve --backend
ray`) needs more than one Ray node, and one machine can host several raylets. Every node gets the
GPU-slot resource and the `dlsched_node_<name>` label the Ray backend pins placements with, and
everything listens on loopback only. `close()` stops every process the cluster started and
reports any that survived, by PID, so callers can assert nothing leaked.
"""

from __future__ import annotations

import time
from typing import Mapping

from dlsched.core.errors import ConfigError

#: Per raylet: small, since many of them share one machine.
DEFAULT_OBJECT_STORE = 80 * 2**20


class LocalRayCluster:
    """Raylets named after `nodes` ({"a": 2, "b": 2} = two nodes with 2 slots each)."""

    def __init__(self, nodes: Mapping[str, float], slot_resource: str = "gpu_slot", cpus_per_node: int = 2,
                 node_resource_prefix: str = "dlsched_node_", object_store_memory: int = DEFAULT_OBJECT_STORE):
        if not nodes:
            raise ConfigError("a local Ray cluster needs at least one node")
        for name, slots in nodes.items():
            if not name or not str(name).replace("-", "").replace("_", "").isalnum():
                raise ConfigError(f"node name {name!r}: use letters, digits, '-' and '_'")
            if slots < 0:
                raise ConfigError(f"node {name!r}: slots must be >= 0, got {slots}")
        from ray.cluster_utils import Cluster

        common = dict(node_ip_address="127.0.0.1", num_cpus=cpus_per_node, object_store_memory=object_store_memory)
        names = list(nodes)
        self.names = names
        def args(name: str) -> dict:
            gpus = int(nodes[name]) if slot_resource == "GPU" else 0  # Ray counts GPUs it is told of
            return dict(resources=self._resources(name, nodes[name], slot_resource, node_resource_prefix),
                        num_gpus=gpus, **common)

        self._cluster = Cluster(initialize_head=True, head_node_args=dict(include_dashboard=False, **args(names[0])))
        try:
            for name in names[1:]:
                self._cluster.add_node(**args(name))
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _resources(name: str, slots: float, slot_resource: str, prefix: str) -> dict[str, float]:
        res = {f"{prefix}{name}": 1.0}
        if slots and slot_resource != "GPU":
            res[slot_resource] = float(slots)
        return res

    @property
    def address(self) -> str:
        return self._cluster.address

    def pids(self) -> set[int]:
        """Every process of the cluster now: raylets, GCS, agents and their children (workers)."""
        import psutil

        out: set[int] = set()
        for node in [self._cluster.head_node, *self._cluster.worker_nodes]:
            if node is None:
                continue
            for procs in node.all_processes.values():
                for p in procs:
                    out.add(p.process.pid)
                    try:
                        out.update(c.pid for c in psutil.Process(p.process.pid).children(recursive=True))
                    except psutil.NoSuchProcess:
                        pass
        return out

    def close(self, extra_pids: set[int] | None = None, timeout: float = 15.0) -> list[int]:
        """Stop every node; returns the PIDs (of the cluster, and `extra_pids`) still alive after
        `timeout`, which should be none."""
        import psutil

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

    def __enter__(self) -> "LocalRayCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
