"""The YAML shape of a cluster preset, validated so a typo is an error naming the key.

A preset is a list of node groups (identical nodes) plus network bandwidths:

    name: philly
    description: one line for `dlsched presets`
    source: where the numbers come from
    network: {intra_node_gbps: 50, inter_node_gbps: 10, inter_rack_gbps: 5}   # GB/s, optional
    node_groups:
      - {count: 80, gpus: 8, cpus: 48, mem: 384, nodes_per_rack: 20}

Racks are numbered across groups in order: each group starts a new rack unless it names its first
`rack` (to share a rack with an earlier group), and a group without `nodes_per_rack` is one rack.
`mem` is GiB. A group with `gpus: 0` is a CPU-only node group (its gpu_type is then empty).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: Bounds of a cluster file (docs/DECISIONS.md, "Cluster file bounds"): far above any real cluster,
#: low enough that a typo (`count: 1e9`) is an error instead of a cluster that exhausts memory,
#: and every number finite.
MAX_NODES = 1_000_000
MAX_PER_NODE = 1_000_000.0
_FINITE = dict(allow_inf_nan=False)


class NetworkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    intra_node_gbps: float = Field(50.0, gt=0, **_FINITE, description="GB/s between tasks on one node")
    inter_node_gbps: float = Field(10.0, gt=0, **_FINITE, description="GB/s between nodes of one rack")
    inter_rack_gbps: float = Field(5.0, gt=0, **_FINITE, description="GB/s between racks")


class NodeGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(gt=0, le=MAX_NODES, description="number of identical nodes")
    gpus: float = Field(ge=0, le=MAX_PER_NODE, **_FINITE)
    cpus: float = Field(ge=0, le=MAX_PER_NODE, **_FINITE)
    mem: float = Field(ge=0, le=MAX_PER_NODE, **_FINITE, description="GiB")
    gpu_type: str = "generic"
    speed: float = Field(1.0, gt=0, le=MAX_PER_NODE, **_FINITE, description="relative speed factor, 1.0 = nominal")
    nodes_per_rack: int | None = Field(None, gt=0, le=MAX_NODES, description="None: the whole group is one rack")
    rack: int | None = Field(None, ge=0, le=MAX_NODES, description="first rack of the group; None: a new rack after the previous groups")


class PresetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    source: str = ""
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    node_groups: list[NodeGroup] = Field(min_length=1)

    @model_validator(mode="after")
    def _not_too_many_nodes(self) -> "PresetSpec":
        total = sum(g.count for g in self.node_groups)
        if total > MAX_NODES:
            raise ValueError(f"{total} nodes in all; at most {MAX_NODES:,}")
        return self
