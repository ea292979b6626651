"""Run several policies over one workload on one cluster: what `simulate` and `compare` do."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.policies.registry import make_policy
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.sim.results import SimResult
from dlsched.throughput.base import ThroughputModel


@dataclass
class PolicyRun:
    name: str
    result: SimResult
    wall_seconds: float
    notes: list[str] = field(default_factory=list)  # what the policy said about its run (e.g. DL2's model)


@dataclass
class Comparison:
    runs: list[PolicyRun] = field(default_factory=list)

    @property
    def results(self) -> list[SimResult]:
        return [r.result for r in self.runs]


def run_policies(
    jobs: list[JobSpec],
    cluster: Cluster,
    policies: list[str],
    throughput: ThroughputModel,
    config: SimConfig,
    policy_options: dict[str, dict[str, Any]] | None = None,
    on_progress: Callable[[str, float, int], None] | None = None,
) -> Comparison:
    """Each policy gets a fresh policy object and the same jobs, cluster, throughput and seed."""
    options = policy_options or {}
    out = Comparison()
    for name in policies:
        policy = make_policy(name, **options.get(name, {}))
        cb = None
        if on_progress is not None:
            cb = lambda t, ended, _n=name: on_progress(_n, t, ended)  # noqa: E731
        start = time.perf_counter()
        result = simulate(jobs, cluster, policy, throughput, config, on_progress=cb)
        out.runs.append(PolicyRun(name, result, time.perf_counter() - start, list(getattr(policy, "notes", []))))
    return out
