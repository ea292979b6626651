"""Jobs ranked by their estimated remaining time: Optimus' estimates, kept across calls, for a
policy that orders jobs but has no length model of its own (the Dual-Agent-style ordering teacher).

The estimate is what Optimus ranks by (`optimus_estimates`): remaining iterations from the job's
own loss curve (`progress_predictor`: declared work, else a loss-curve fit, else finished jobs of
its type, else the median of the others) over its speed at its minimum size (`speed_model`: measured
speeds of its type). Nothing here reads a job's true total work.

Why a policy needs it: on an overloaded trace of long rigid jobs, attained service says little
(Tiresias' last queue holds most jobs and serves them first come, first served), while the loss
curve says which job is nearly done. On all 3,011 rigid jobs of ITP cluster03 Optimus' ranking was
within 3% of the SRTF oracle's mean JCT and 2.2x ahead of Tiresias (docs/ROBUSTNESS.md).
"""

from __future__ import annotations

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.policies.optimus_estimates import Estimates, rank


class LengthRank:
    """Call `ranks(snap, jobs)` once per decision, then `moved(...)` with the decision's allocations."""

    def __init__(self) -> None:
        self.estimates = Estimates()
        self._moved: list[JobState] = []  # jobs the last decision started or moved: new speed points

    def ranks(self, snap: Snapshot, jobs: list[JobState]) -> np.ndarray:
        """(J,) each job's place in the order by estimated remaining time, shortest first, as a
        share of the jobs (0 = shortest; ties by submit time, as Optimus breaks them)."""
        self.estimates.forget(snap.finished)
        self.estimates.observe(snap, self._moved)
        cands = self.estimates.candidates(snap, jobs, _no_oracle)  # not in the order of `jobs`
        position = {id(j): i for i, j in enumerate(jobs)}
        rank(cands, "remaining")
        out = np.empty(len(jobs))
        for r, c in enumerate(cands):
            out[position[id(c.js)]] = r
        return out / max(len(jobs), 1)

    def moved(self, jobs: list[JobState], allocations: dict[str, Allocation]) -> None:
        """Remember the jobs this decision started or moved: the next call measures their speed."""
        self._moved = [j for j in jobs if j.job_id in allocations and allocations[j.job_id] is not j.allocation]


def _no_oracle(*_args) -> None:
    raise AssertionError("LengthRank estimates from what a live system sees; it is never run as an oracle")
