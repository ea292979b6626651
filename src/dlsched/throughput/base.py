"""One interface for every throughput model: iterations/s of a job under an allocation."""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec

#: What `served_by` says of a job no model knows (the simulator refuses such a workload up front).
NOT_SERVED = "none"


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

    def served_by(self, spec: JobSpec) -> str:
        """The name of the model that gives this job its rate ("none" if no model knows it), so a
        report can say whether a job ran on measured data or an analytic fallback."""
        return self.name if self.supports(spec) else NOT_SERVED

    def leaf_for(self, spec: JobSpec) -> ThroughputModel:
        """The model whose `rate` gives this job its rate: the model itself, or what a router
        chose for the job. A job's route never changes, so a caller that asks for many rates of
        one job (the simulator, at every start and resize) resolves it once and calls the leaf's
        `rate` directly, with the very result `self.rate` would give."""
        return self


class Router(ThroughputModel):
    """Dispatches each job to the first model that supports it (measured tables before analytic).

    The choice is cached per JobSpec object, not per `spec.model`: models also read `spec.extra`
    (a "ps:x" job with compute_s/model_size_mb is the PS model's, one without is not), so two jobs
    with one model key can route differently. A JobSpec is immutable, so its route never changes;
    the cache is weak so a long-lived router does not keep finished jobs alive. (Uncached, a lookup
    through six models costs ~2 µs, about 1% of a full-Philly run; cached ~0.3 µs.)
    """

    name = "router"

    def __init__(self, models: list[ThroughputModel]):
        if not models:
            raise ConfigError("a throughput router needs at least one model")
        self.models = models
        self._cache: weakref.WeakKeyDictionary[JobSpec, ThroughputModel] = weakref.WeakKeyDictionary()

    def _route(self, spec: JobSpec) -> ThroughputModel | None:
        """The first model that supports the job (cached), or None when none does (not cached:
        such a job is refused before a run, so it is asked about once or twice)."""
        m = self._cache.get(spec)
        if m is None:
            for cand in self.models:
                if cand.supports(spec):
                    self._cache[spec] = m = cand
                    break
        return m

    def model_for(self, spec: JobSpec) -> ThroughputModel:
        m = self._route(spec)
        if m is None:
            names = ", ".join(x.name for x in self.models)
            raise ConfigError(f"job {spec.job_id!r}: no throughput model knows model {spec.model!r} (have: {names})")
        return m

    def supports(self, spec: JobSpec) -> bool:
        """Through the route cache: the simulator asks it of every job before a run and the
        report again per job (`served_by`); each uncached ask walks every model's `supports`."""
        return self._route(spec) is not None

    def leaf_for(self, spec: JobSpec) -> ThroughputModel:
        """The leaf model serving the job, through nested routers (raises like `model_for`)."""
        return self.model_for(spec).leaf_for(spec)

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        return self.model_for(spec).rate(spec, alloc, cluster)

    def served_by(self, spec: JobSpec) -> str:
        """The leaf model that serves the job (asked in turn, so routers can nest)."""
        m = self._route(spec)
        return NOT_SERVED if m is None else m.served_by(spec)
