"""One interface for every throughput model: iterations/s of a job under an allocation."""

from __future__ import annotations

from abc import ABC, abstractmethod

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec


class ThroughputModel(ABC):
    """Maps (job, allocation, cluster) to iterations per second.

    Models are pure functions of their inputs (no clock, no randomness), so the simulator can
    cache rates and stay deterministic. Node speed factors are applied by the engine, not here.
    """

    name: str = "model"

    @abstractmethod
    def supports(self, spec: JobSpec) -> bool:
        """Whether this model knows the job's `model` key."""

    @abstractmethod
    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        """Iterations per second; 0 means the allocation cannot make progress."""


class Router(ThroughputModel):
    """Dispatches each job to the first model that supports it (measured tables before analytic)."""

    name = "router"

    def __init__(self, models: list[ThroughputModel]):
        if not models:
            raise ConfigError("a throughput router needs at least one model")
        self.models = models
        self._cache: dict[str, ThroughputModel] = {}

    def model_for(self, spec: JobSpec) -> ThroughputModel:
        m = self._cache.get(spec.model)
        if m is None:
            for cand in self.models:
                if cand.supports(spec):
                    m = cand
                    break
            else:
                names = ", ".join(x.name for x in self.models)
                raise ConfigError(f"job {spec.job_id!r}: no throughput model knows model {spec.model!r} (have: {names})")
            self._cache[spec.model] = m
        return m

    def supports(self, spec: JobSpec) -> bool:
        return any(m.supports(spec) for m in self.models)

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        return self.model_for(spec).rate(spec, alloc, cluster)
