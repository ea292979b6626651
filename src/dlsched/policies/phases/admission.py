"""Admission phase: which jobs may be considered at all."""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.core.snapshot import JobState, Snapshot


@dataclass(frozen=True)
class AdmitAll:
    """Every submitted job is a candidate (infeasible ones were already rejected by the engine)."""

    def admit(self, snap: Snapshot, jobs: list[JobState]) -> tuple[list[JobState], dict[str, str]]:
        return jobs, {}
