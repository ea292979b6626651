"""Ordering phase: who gets resources first."""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.core.snapshot import JobState, Snapshot


@dataclass(frozen=True)
class ByArrival:
    """First come, first served (ties by job index, so the order is deterministic)."""

    def order(self, snap: Snapshot, jobs: list[JobState]) -> list[JobState]:
        return sorted(jobs, key=lambda j: (j.spec.submit_time, j.index))
