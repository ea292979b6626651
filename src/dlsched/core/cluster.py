"""The cluster: nodes as rows of NumPy arrays, so accounting never loops over node objects."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dlsched.core.errors import ConfigError

#: The resource vector every demand and capacity uses, in this order.
RESOURCES: tuple[str, ...] = ("gpu", "cpu", "mem")
GPU, CPU, MEM = 0, 1, 2


@dataclass(frozen=True)
class Network:
    """Bandwidths (GB/s) a throughput model may use to price communication.

    Intra-node is NVLink/PCIe-class, inter-node crosses the top-of-rack switch and inter-rack the
    spine; keeping the three apart is what makes packing a job on fewer nodes (and racks) pay off.
    """

    intra_node_gbps: float = 50.0
    inter_node_gbps: float = 10.0
    inter_rack_gbps: float = 5.0


@dataclass(frozen=True, eq=False)
class Cluster:
    """Static description of a cluster. Free/used state lives in the simulator, not here."""

    name: str
    capacity: np.ndarray  # (N, 3) float: gpu, cpu, mem (GiB)
    gpu_type: np.ndarray  # (N,) str
    rack: np.ndarray  # (N,) int
    speed: np.ndarray  # (N,) float, 1.0 = nominal
    node_names: tuple[str, ...]
    network: Network = field(default_factory=Network)
    # USD per GPU-hour of each node (its GPU type's rental price): a job's fee is the GPU-hours it
    # held × these prices. None: the cluster has no prices (no fee is reported).
    price: np.ndarray | None = None
    # derived facts (feasibility of a demand shape, ...) memoised per cluster; never part of identity
    memo: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.node_names)
        cap = np.asarray(self.capacity, dtype=float)
        if cap.shape != (n, len(RESOURCES)):
            raise ConfigError(f"cluster {self.name!r}: capacity must be (nodes, 3), got {cap.shape}")
        if n == 0:
            raise ConfigError(f"cluster {self.name!r} has no nodes")
        if (cap < 0).any():
            raise ConfigError(f"cluster {self.name!r}: negative capacity")
        speed = np.asarray(self.speed, dtype=float)
        if (speed <= 0).any():
            raise ConfigError(f"cluster {self.name!r}: speed factors must be > 0")
        for arr in (cap, speed):
            arr.setflags(write=False)
        gt = np.asarray(self.gpu_type, dtype=object)
        rk = np.asarray(self.rack, dtype=int)
        gt.setflags(write=False)
        rk.setflags(write=False)
        object.__setattr__(self, "capacity", cap)
        object.__setattr__(self, "speed", speed)
        object.__setattr__(self, "gpu_type", gt)
        object.__setattr__(self, "rack", rk)
        if self.price is not None:
            price = np.asarray(self.price, dtype=float)
            if price.shape != (n,) or not np.isfinite(price).all() or (price < 0).any():
                raise ConfigError(f"cluster {self.name!r}: price must be one finite value >= 0 per node")
            price.setflags(write=False)
            object.__setattr__(self, "price", price)

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    @property
    def total(self) -> np.ndarray:
        return self.capacity.sum(axis=0)

    @property
    def total_gpus(self) -> int:
        return int(self.capacity[:, GPU].sum())

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({str(t) for t in self.gpu_type if t}))

    def type_groups(self) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
        """(GPU type names, sorted; (N,) index of each node's type in them; the first node of each
        type), memoised: placements that plan per GPU type read it at every decision."""
        got = self.memo.get("type_groups")
        if got is None:
            names, inverse = np.unique(np.asarray([str(t) for t in self.gpu_type]), return_inverse=True)
            first = np.array([int(np.flatnonzero(inverse == i)[0]) for i in range(len(names))], dtype=np.int64)
            got = self.memo["type_groups"] = (tuple(str(n) for n in names), inverse.astype(np.int64), first)
        return got

    def type_mask(self, gpu_type: str | None) -> np.ndarray:
        """Nodes a job with this GPU-type constraint may use (all nodes when unconstrained)."""
        if not gpu_type:
            return np.ones(self.num_nodes, dtype=bool)
        return self.gpu_type == gpu_type

    @classmethod
    def homogeneous(
        cls,
        name: str,
        nodes: int,
        gpus: float,
        cpus: float,
        mem: float,
        gpu_type: str = "generic",
        nodes_per_rack: int | None = None,
        network: Network | None = None,
    ) -> "Cluster":
        if nodes <= 0:
            raise ConfigError(f"cluster {name!r}: nodes must be > 0, got {nodes}")
        per_rack = nodes_per_rack or nodes
        return cls(
            name=name,
            capacity=np.tile(np.array([gpus, cpus, mem], dtype=float), (nodes, 1)),
            gpu_type=np.array([gpu_type] * nodes, dtype=object),
            rack=np.arange(nodes) // per_rack,
            speed=np.ones(nodes),
            node_names=tuple(f"{name}-n{i:04d}" for i in range(nodes)),
            network=network or Network(),
        )

    def describe(self) -> str:
        types = ", ".join(
            f"{t}: {int(self.capacity[self.gpu_type == t, GPU].sum())}" for t in self.gpu_types
        )
        return (
            f"{self.name}: {self.num_nodes} nodes, {self.total_gpus} GPUs ({types}), "
            f"{int(self.total[CPU])} CPUs, {len(set(self.rack.tolist()))} racks"
        )
