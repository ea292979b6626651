"""What a plan turns into: the changes to make, in the order to make them.

`ClusterState.diff` produces them from a validated plan; the simulator applies them at once with
its throughput model, the live controller sends them to a backend. Both drivers get the very same
list for the same state and plan, which is what the contract test checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from dlsched.core.allocation import Allocation


class Kind(str, Enum):
    STOP = "stop"  # a running job the plan leaves out: preempted, back to waiting
    HOLD = "hold"  # a waiting job's partial placement reserved (allocation) or released (None)
    START = "start"  # a waiting job starts (first start or restart)
    RESIZE = "resize"  # a running job moves to another allocation (restart-based)
    REJECT = "reject"  # a waiting job refused for good


@dataclass(frozen=True)
class Action:
    kind: Kind
    job_id: str
    allocation: Allocation | None = None
    reason: str = ""

    def __str__(self) -> str:
        where = ""
        if self.allocation is not None:
            where = f" {self.allocation.num_workers}w/{self.allocation.num_ps}ps on {list(self.allocation.nodes)}"
        return f"{self.kind.value} {self.job_id}{where}{f' ({self.reason})' if self.reason else ''}"
