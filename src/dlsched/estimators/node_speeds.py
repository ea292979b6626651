"""Per-machine speed factors as running means of what jobs measured there (PAL-style scores).

Why: PAL (SC'22) places jobs by each GPU's *measured* performance-variability score, an average
of profiled runs, not by its nominal type. Here the measurements are what running jobs' workers
report of each node (`JobState.node_speeds`: per-worker step time against the type-level
profile, as PAI's per-worker mini-batch times give). Each `observe` folds in one sample per node
per job that ran since the previous call, weighted by how long it ran there in between. With
`halflife_s` finite, older weight decays (a straggler that recovers is forgiven); the default
(inf) is a plain time-weighted mean, as PAL's scores are.

The uncertainty is deliberately simple: a prior sd (0.1: same-model GPUs differ by ~8%) shrinking
as 1/sqrt(1 + samples); a node never measured is at mean 1 with the prior sd. The Gaussian-process
estimate of the learned placement replaces this with correlations across machines and time.
"""

from __future__ import annotations

import math

import numpy as np

from dlsched.core.cluster import Cluster
from dlsched.core.snapshot import JobStatus, Snapshot


class RunningMeanSpeeds:
    """A `SpeedEstimate`: per node, the time-weighted mean of the factors jobs measured there."""

    def __init__(self, halflife_s: float = math.inf, prior_sd: float = 0.1):
        if not halflife_s > 0:
            raise ValueError(f"halflife_s must be > 0 (inf = plain mean), got {halflife_s}")
        if not prior_sd >= 0:
            raise ValueError(f"prior_sd must be >= 0, got {prior_sd}")
        self.halflife_s, self.prior_sd = float(halflife_s), float(prior_sd)
        self.reset()

    def reset(self) -> None:
        self.mean: np.ndarray | None = None  # (N,) estimated factor
        self.weight: np.ndarray | None = None  # (N,) seconds of measurement behind it (decayed)
        self.count: np.ndarray | None = None  # (N,) samples behind it (decayed alike)
        self.last: float | None = None  # time of the previous observe

    def _size(self, n: int) -> None:
        if self.mean is None or len(self.mean) != n:
            self.mean, self.weight, self.count = np.ones(n), np.zeros(n), np.zeros(n)

    def observe(self, snap: Snapshot) -> None:
        """One sample per (job, node) for every job that ran since the previous call (running
        now, or finished / stopped since), weighted by the seconds it ran in between."""
        now = snap.now
        self._size(snap.cluster.num_nodes)
        prev, self.last = self.last, now
        if prev is None or not now > prev:
            return
        if math.isfinite(self.halflife_s):
            decay = 0.5 ** ((now - prev) / self.halflife_s)
            self.weight *= decay
            self.count *= decay
        for js in (*snap.running, *snap.finished, *snap.stopped):
            speeds = js.node_speeds
            if not speeds or js.last_start is None:
                continue
            if js.status is JobStatus.RUNNING:
                end = now
            else:
                end = js.end_time if js.end_time is not None else js.last_stop if js.last_stop is not None else now
            w = min(end, now) - max(prev, js.last_start)
            if not w > 0:
                continue
            for n, x in speeds.items():
                self.weight[n] += w
                self.count[n] += 1.0
                self.mean[n] += (float(x) - self.mean[n]) * (w / self.weight[n])

    def speeds(self, now: float, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
        n = cluster.num_nodes
        if self.mean is None or len(self.mean) != n:
            return np.ones(n), np.full(n, self.prior_sd)
        return self.mean.copy(), self.prior_sd / np.sqrt(1.0 + self.count)
