"""Virtual nodes: how the local backend presents one machine to the scheduler as a small cluster.

The local backend runs every task as a process on this machine, but policies reason about nodes,
GPU slots and racks. A `LocalNodes` config names a few virtual nodes so that placement decisions
(packing, spreading, PS co-location) are exercised end to end. On a CPU-only machine the GPU
slots are a scheduling fiction: a slot is permission to run one worker, and every process shares
the same physical cores whatever node it is "on" (so two jobs on two virtual nodes still compete
for CPU). Memory and CPU figures are the machine's, split evenly, so the scheduler's accounting
roughly matches what the processes can actually use.

YAML form (`load_nodes`)::

    name: laptop            # optional
    nodes:
      - {name: n0, gpus: 2, cpus: 4, mem_gb: 8}
      - {name: n1, gpus: 2, cpus: 4, mem_gb: 8, rack: 1}

A bare list of nodes is accepted too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import psutil
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlsched.config import read_yaml, validation_problems
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError

#: The GPU type every virtual slot carries, so a job constrained to a real GPU type never lands here.
SLOT_TYPE = "cpu-slot"


class VirtualNode(BaseModel):
    """One virtual node. Unknown keys are errors (a typo must not silently become a default)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                      description="node name, shown in placements and passed as DLSCHED_NODE")
    gpus: int = Field(ge=0, le=1024, description="GPU slots (workers it may host)")
    cpus: float = Field(gt=0, le=100_000)
    mem_gb: float = Field(gt=0, le=1_000_000)
    rack: int = Field(0, ge=0, le=100_000)


class LocalNodes(BaseModel):
    """The virtual cluster of the local backend."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("local", min_length=1, max_length=100)
    nodes: list[VirtualNode] = Field(min_length=1)

    @field_validator("nodes")
    @classmethod
    def _unique(cls, nodes: list[VirtualNode]) -> list[VirtualNode]:
        seen: set[str] = set()
        for n in nodes:
            if n.name in seen:
                raise ValueError(f"duplicate node name {n.name!r}")
            seen.add(n.name)
        return nodes

    def to_cluster(self) -> Cluster:
        """The scheduler's view; node index i is `nodes[i]`."""
        return Cluster(
            name=self.name,
            capacity=np.array([[n.gpus, n.cpus, n.mem_gb] for n in self.nodes], dtype=float),
            gpu_type=np.array([SLOT_TYPE] * len(self.nodes), dtype=object),
            rack=np.array([n.rack for n in self.nodes], dtype=int),
            speed=np.ones(len(self.nodes)),
            node_names=tuple(n.name for n in self.nodes),
        )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)


def default_local_nodes(nodes: int = 2, gpus_per_node: int = 2) -> LocalNodes:
    """This machine as `nodes` virtual nodes of `gpus_per_node` slots, CPUs and memory split evenly.

    Two nodes by default so that multi-node placements (and their policies) are exercised even on
    a laptop; the slots are a fiction (see the module docstring)."""
    if nodes < 1 or gpus_per_node < 0:
        raise ConfigError(f"need nodes >= 1 and gpus_per_node >= 0, got {nodes} and {gpus_per_node}")
    cpus = (psutil.cpu_count(logical=True) or 1) / nodes
    mem_gb = psutil.virtual_memory().total / 2**30 / nodes
    return LocalNodes(
        name="local",
        nodes=[VirtualNode(name=f"local-n{i}", gpus=gpus_per_node, cpus=round(cpus, 3),
                           mem_gb=round(mem_gb, 3)) for i in range(nodes)],
    )


def parse_nodes(data: object, source: str = "nodes config") -> LocalNodes:
    """Validate already-loaded YAML/JSON data; errors name `source` and the offending key."""
    if isinstance(data, list):
        data = {"nodes": data}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with 'nodes' (or a list of nodes), "
                          f"got {type(data).__name__}")
    try:
        return LocalNodes.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{source}: " + "; ".join(validation_problems(e))) from None


def load_nodes(path: str | Path) -> LocalNodes:
    """Read a virtual-node YAML file (format in the module docstring)."""
    p = Path(path)
    return parse_nodes(read_yaml(p, "nodes file"), str(p))
