"""Ray clusters as dlsched sees them: connecting and naming nodes.

Labelling nodes. The scheduler needs stable node names and the Ray backend needs to pin bundles to
nodes. Give each Ray node a custom resource `dlsched_node_<name>` (value 1), and GPU slots either
as Ray's `GPU` resource or, on CPU machines, as a custom resource named by `slot_resource`::

    ray start --head --node-ip-address=10.0.0.1 --resources '{"gpu_slot": 4, "dlsched_node_a": 1}'
    ray start --address=10.0.0.1:6379 --resources '{"gpu_slot": 4, "dlsched_node_b": 1}'

Unlabelled nodes are named `ray-<node id prefix>` and pinned through Ray's built-in
`node:<ip>` resource, which only works when each node has its own IP (one raylet per machine);
several unlabelled raylets on one IP cannot be told apart and get no pin (`RayNode.pin` None).
Node order (the indices of `Allocation`) is labelled nodes sorted by name, then unlabelled ones
by id (`discover_nodes`).

Loopback. `connect(None, ...)` starts a private one-node Ray whose GCS, raylet and agents listen on
127.0.0.1 only (through `ray.cluster_utils.Cluster`: in Ray 2.60 `ray.init(_node_ip_address=
"127.0.0.1")` still listens on every interface), labelled `dlsched_node_local`. Ray also rewrites
a `127.0.0.1` address into the machine's public IP before connecting, which fails for a cluster
bound to loopback (`ray start --node-ip-address=127.0.0.1`); `connect` reaches such addresses
without that rewrite (`_keep_loopback`).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError

#: Per raylet: small, since many of them share one machine.
DEFAULT_OBJECT_STORE = 80 * 2**20
GIB = 2**30
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
#: The custom resource standing for GPU slots on CPU machines (when `slot_resource` is not given).
DEFAULT_SLOT = "gpu_slot"


@dataclass(frozen=True)
class RayNode:
    """One Ray node as the scheduler sees it."""

    name: str
    node_id: str
    ip: str
    resources: dict[str, float]
    pin: str | None  # the resource a bundle takes a sliver of to land on this node


def connect(address: str | None, prefix: str, num_cpus: int | None = None) -> Any:
    """`ray.init` for the Ray backend. `address` None: start a private one-node Ray on loopback
    (labelled `<prefix>local`, one GPU slot per CPU) and return it (a `ray.cluster_utils.Cluster`,
    for shutting down); otherwise connect to "auto", "host:port" or "ray://host:port" and return None."""
    import ray

    if address is None:
        cpus = num_cpus or os.cpu_count() or 1
        # ray.init() would listen on every interface whatever _node_ip_address says (Ray 2.60);
        # a head started this way binds its GCS, raylet and agents to the given IP only.
        from ray.cluster_utils import Cluster as _LocalRay

        head = _LocalRay(initialize_head=True, head_node_args=dict(
            node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=cpus, num_gpus=_count_gpus(),
            resources={DEFAULT_SLOT: float(cpus), f"{prefix}local": 1.0}, object_store_memory=DEFAULT_OBJECT_STORE))
        try:
            with _keep_loopback(True):
                ray.init(address=head.address, _node_ip_address="127.0.0.1", log_to_driver=False, logging_level=logging.WARNING)
        except BaseException:
            head.shutdown()
            raise
        return head
    _check_reachable(address)
    if address.startswith("ray://"):
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        return None
    loopback = (address.rsplit(":", 1)[0] if ":" in address else address) in LOOPBACK
    with _keep_loopback(loopback):
        ray.init(address=address, _node_ip_address="127.0.0.1" if loopback else None, log_to_driver=False,
                 logging_level=logging.WARNING)
    return None


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail in one line when a "host:port" address does not accept a connection: `ray.init` would
    otherwise retry for minutes before it says so. "auto" (the local node's cluster) is Ray's to find."""
    hostport = address.removeprefix("ray://")
    if hostport == "auto" or ":" not in hostport:
        return
    host, _, port = hostport.rpartition(":")
    if not port.isdigit():
        raise ConfigError(f"Ray address {address!r}: expected auto, host:port or ray://host:port")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ConfigError(f"cannot reach Ray at {address}: {exc.strerror or exc} (is the head running, and is the port open?)") from None


def discover_nodes(prefix: str) -> list[RayNode]:
    """The alive Ray nodes, named and ordered (see "Labelling nodes")."""
    import ray

    alive = [n for n in ray.nodes() if n.get("Alive")]
    ips = [n["NodeManagerAddress"] for n in alive]
    labelled, unlabelled, seen = [], [], {}
    for n in alive:
        res = {k: float(v) for k, v in n["Resources"].items()}
        labels = [k[len(prefix):] for k in res if k.startswith(prefix)]
        if len(labels) > 1:
            raise ConfigError(f"Ray node {n['NodeID'][:8]} has several {prefix}* resources: {labels}")
        if labels:
            name = labels[0]
            if name in seen:
                raise ConfigError(f"two Ray nodes are labelled {prefix}{name} "
                                  f"({seen[name][:8]} and {n['NodeID'][:8]}); labels must be unique")
            seen[name] = n["NodeID"]
            labelled.append(RayNode(name, n["NodeID"], n["NodeManagerAddress"], res, f"{prefix}{name}"))
        else:
            unique_ip = ips.count(n["NodeManagerAddress"]) == 1
            pin = f"node:{n['NodeManagerAddress']}" if unique_ip else None
            unlabelled.append(RayNode(f"ray-{n['NodeID'][:8]}", n["NodeID"], n["NodeManagerAddress"], res, pin))
    if not alive:
        raise ConfigError("the Ray cluster has no alive nodes")
    return sorted(labelled, key=lambda x: x.name) + sorted(unlabelled, key=lambda x: x.node_id)


def to_cluster(nodes: list[RayNode], slot_resource: str, name: str) -> Cluster:
    """The scheduler's view of `nodes`: GPU slots (`slot_resource`), CPUs, memory in GiB."""
    caps, types = [], []
    for n in nodes:
        r = n.resources
        caps.append([r.get(slot_resource, 0.0), r.get("CPU", 0.0), r.get("memory", 0.0) / GIB])
        acc = [k.split(":", 1)[1] for k in r if k.startswith("accelerator_type:")]
        types.append(acc[0] if acc else "generic")
    k = len(nodes)
    return Cluster(name=name, capacity=np.array(caps, dtype=float), gpu_type=np.array(types, dtype=object),
                   rack=np.zeros(k, dtype=int), speed=np.ones(k), node_names=tuple(n.name for n in nodes))


def _count_gpus() -> int:
    """NVIDIA GPUs on this machine (for the private local Ray), without importing torch."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


@contextmanager
def _keep_loopback(on: bool) -> Iterator[None]:
    """While connecting, make Ray resolve "127.0.0.1" to itself instead of the public IP.

    Ray (as of 2.x) canonicalises a loopback bootstrap address to the node's routable IP,
    which nothing listens on when the cluster was started with --node-ip-address=127.0.0.1;
    its own switch for single-machine use (ENABLE_RAY_CLUSTER, normally for macOS/Windows)
    turns that off. Only the connection step is affected."""
    if not on:
        yield
        return
    from ray._private import ray_constants

    old = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = old

