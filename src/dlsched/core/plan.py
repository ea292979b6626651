"""What a policy wants now. The engine diffs it against the current state and applies it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from dlsched.core.allocation import Allocation


@dataclass
class Plan:
    """Every job that should run, with where; jobs absent from `allocations` wait (or are preempted).

    - `held`: partial placements of jobs that are *not* running yet (a non-gang scheduler's pods
      that were bound while their peers wait). They occupy resources and make no progress; only
      policies that model this (the default Kubernetes scheduler) use it.
    - `rejected`: pending jobs refused for good, each with a reason a user can read.
    - `wake_at`: ask me again at this time even if nothing happens (e.g. a Tiresias job crossing
      a queue threshold, a DRAGON timer).
    - `keep_running`: running jobs absent from `allocations` keep running as they are, except
      those in `preempt` (a policy lists only what changes, so a decision costs what changed, not
      the number of running jobs); without it, a running job absent from the plan is preempted.
    """

    allocations: dict[str, Allocation] = field(default_factory=dict)
    held: dict[str, Allocation] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    wake_at: float | None = None
    keep_running: bool = False
    preempt: set[str] = field(default_factory=set)  # with keep_running: running jobs to stop

    def running_after(self, running: Iterable) -> dict[str, Allocation]:
        """Every job that runs once the plan is carried out, given the jobs running now (their
        `job_id` and `allocation`): with `keep_running`, those the plan does not name too."""
        if not self.keep_running:
            return dict(self.allocations)
        return {j.job_id: j.allocation for j in running if j.job_id not in self.preempt} | self.allocations

    def assign(self, job_id: str, allocation: Allocation) -> None:
        self.allocations[job_id] = allocation

    def reject(self, job_id: str, reason: str) -> None:
        self.rejected[job_id] = reason
