"""For traces that give only a duration and a GPU count (Philly, ITP, Alibaba).

Such a job's adapter sets iterations = duration, so at its requested size it runs at exactly one
iteration per second and finishes in exactly its trace duration, wherever it is placed. At other
sizes the rate follows a stated sub-linear scaling curve, speedup(w) = w ** alpha (alpha = 0.85 by
default: 8 workers give 5.85x, not 8x), relative to the requested size.
"""

from __future__ import annotations

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.throughput.base import ThroughputModel


class DurationOnly(ThroughputModel):
    name = "duration-only"

    def __init__(self, alpha: float = 0.85, models: tuple[str, ...] = ("duration-only",)):
        if not 0 < alpha <= 1:
            raise ConfigError(f"duration-only scaling exponent alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self.models = models

    def supports(self, spec: JobSpec) -> bool:
        return spec.model in self.models

    def speedup(self, workers: int) -> float:
        return float(workers) ** self.alpha

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        w = alloc.num_workers
        if w == spec.num_workers:
            return 1.0
        return self.speedup(w) / self.speedup(spec.num_workers)
