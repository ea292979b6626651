"""Sizing phase: how many workers and parameter servers each job gets."""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.core.snapshot import JobState, Snapshot


@dataclass(frozen=True)
class Requested:
    """Exactly what the job asked for (non-elastic schedulers)."""

    def size(self, snap: Snapshot, jobs: list[JobState]) -> list[tuple[JobState, int, int]]:
        return [(j, j.spec.num_workers, j.spec.num_ps) for j in jobs]
