"""A change of a node: its speed, a failure, a join. One type for both drivers: the simulator
reads them from a scenario's list (`hetero/`, `--variability`), the live controller from its
backend (`Backend.node_events`, e.g. a Kubernetes node going NotReady)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class NodeEvent:
    """At `time`, node `node` changes speed (`speed` = its new factor), fails, or joins.
    `time` is the simulator's clock in a simulation, unix time when a live backend reports it."""

    time: float
    node: int
    kind: Literal["speed", "fail", "join"]
    speed: float | None = None
