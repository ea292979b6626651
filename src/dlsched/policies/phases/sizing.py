"""Sizing phase: how many workers and parameter servers each job gets."""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.core.snapshot import JobState, Snapshot
from dlsched.sim.feasibility import largest_gang


@dataclass(frozen=True)
class Requested:
    """What the job asked for (non-elastic schedulers), but never more than the empty cluster
    could ever hold: a job that declares a smaller minimum then runs at the largest size that
    exists instead of waiting forever."""

    def size(self, snap: Snapshot, jobs: list[JobState]) -> list[tuple[JobState, int, int]]:
        out = []
        for j in jobs:
            w = j.spec.num_workers
            if j.spec.min_workers < w:
                w = largest_gang(j.spec, snap.cluster)
            out.append((j, w, j.spec.num_ps))
        return out
