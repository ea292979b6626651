"""Tiresias with random placement: the floor of the heterogeneity baselines.

Why: on a cluster whose machines differ, a placement that ignores speed entirely lands jobs on
slow types and straggling machines at their base rate; every speed-aware placement must beat it.
Ordering is Tiresias' 2D-LAS (as for every baseline of the set), so only placement differs.
Workers (then PSs) go one at a time to a uniformly random node with room for them, from a stream
seeded per run (`reset(seed=...)`): the same seed gives the same run.
"""

from __future__ import annotations

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.policy import Named, Policy
from dlsched.framework.packing import _EPS, eligible
from dlsched.policies.tiresias import THRESHOLDS, Tiresias


class RandomPlacement:
    """Each task on a uniformly random node where it fits (its GPU type respected); all or None."""

    name = "random"
    takes_seed = True  # Tiresias passes the run's seed to `reset`

    def __init__(self, seed: int = 0):
        self.reset(seed)

    def reset(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        room = free.copy()
        mask = eligible(cluster, spec)
        have: dict[int, tuple[int, int]] = {}
        for role, want, demand in ((0, workers, spec.worker_demand), (1, ps, spec.ps_demand)):
            d = np.asarray(demand, dtype=float)
            for _ in range(want):
                ok = (room + _EPS >= d).all(axis=1)
                if mask is not None:
                    ok &= mask
                fits = np.flatnonzero(ok)
                if not len(fits):
                    return None
                n = int(fits[self.rng.integers(len(fits))])
                room[n] -= d
                w, p = have.get(n, (0, 0))
                have[n] = (w + (role == 0), p + (role == 1))
        return Allocation.of(have) if have else None


def random_place(thresholds: tuple[float, ...] = THRESHOLDS, promote_knob: float = 8.0) -> Policy:
    """Tiresias 2D-LAS ordering with random placement (`tiresias-random`)."""
    return Named(Tiresias(tuple(thresholds), promote_knob, RandomPlacement()), "tiresias-random")
