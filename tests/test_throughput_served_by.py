"""Which throughput model served each job: `served_by` on models and routers, the router's routing
per job (not per model key), and the `throughput_model` column of the per-job table."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dlsched.core import JobSpec
from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.snapshot import Clock, JobState, JobStatus
from dlsched.presets import load_cluster
from dlsched.sim.config import SimConfig
from dlsched.sim.results import JOB_COLUMNS, SimResult
from dlsched.throughput.base import NOT_SERVED, Router, ThroughputModel
from dlsched.throughput.duration_only import DurationOnly
from dlsched.throughput.parameter_server import ParameterServerModel
from dlsched.throughput.registry import default_throughput

PS_EXTRA = {"compute_s": 0.5, "model_size_mb": 100.0}


def spec(job_id: str, model: str, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, submit_time=0, iterations=100, model=model, **kw)


class Anything(ThroughputModel):
    """A fallback that knows every job, at one iteration per second."""

    name = "anything"

    def supports(self, spec: JobSpec) -> bool:
        return True

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        return 1.0


def test_router_routes_each_job_not_each_model_key() -> None:
    # the PS model takes a "ps:x" job only when spec.extra describes it; a cache keyed by the model
    # key alone sent the second job to the PS model too, which then failed on its missing extra
    router = Router([ParameterServerModel(), Anything()])
    with_extra = spec("a", "ps:x", arch="ps", num_ps=1, extra=dict(PS_EXTRA))
    without = spec("b", "ps:x", arch="ps", num_ps=1)
    assert router.served_by(with_extra) == "parameter-server"
    assert router.served_by(without) == "anything"
    c = load_cluster("dl2")
    assert router.rate(without, Allocation.single_node(0, 1, 1), c) == 1.0
    assert router.rate(with_extra, Allocation.single_node(0, 1, 1), c) > 0


def test_served_by_names_the_leaf_model_and_nests() -> None:
    router = default_throughput(None)  # no traces: analytic fallbacks only
    assert router.served_by(spec("g", "gavel:ResNet-50 (batch size 64)")) == "ring-allreduce"
    assert router.served_by(spec("d", "duration-only", duration=10.0)) == "duration-only"
    assert router.served_by(spec("u", "nobody-knows-me")) == NOT_SERVED
    outer = Router([Router([DurationOnly()]), Anything()])
    assert outer.served_by(spec("d", "duration-only", duration=10.0)) == "duration-only"
    assert outer.served_by(spec("x", "other")) == "anything"
    assert DurationOnly().served_by(spec("x", "other")) == NOT_SERVED


def test_leaf_for_is_the_model_whose_rate_the_router_gives() -> None:
    """The simulator resolves a job's leaf model once and calls its `rate` directly: that must be
    the router's own answer, through nested routers, and a job no model knows is still refused."""
    anything, duration = Anything(), DurationOnly()
    outer = Router([Router([duration]), anything])
    d, x = spec("d", "duration-only", duration=10.0, num_workers=2), spec("x", "other")
    assert outer.leaf_for(d) is duration and outer.leaf_for(x) is anything
    assert duration.leaf_for(d) is duration
    c, alloc = load_cluster("dl2"), Allocation.single_node(0, 3)
    assert outer.leaf_for(d).rate(d, alloc, c) == outer.rate(d, alloc, c) == duration.rate(d, alloc, c)
    only = Router([duration])
    unknown = spec("u", "nobody-knows-me")
    assert not only.supports(unknown) and not only.supports(unknown)  # asked twice: still refused
    with pytest.raises(ConfigError):
        only.leaf_for(unknown)


def _build(states: list[JobState], **kw) -> SimResult:
    timeline = SimpleNamespace(t=[0.0], used_gpus=[0.0], busy_gpus=[0.0], held_gpus=[0.0], queue=[0], running=[0])
    return SimResult.build(policy="p", cluster=load_cluster("itp-small"), states=states, timeline=timeline,
                           end_time=1.0, policy_calls=0, config=SimConfig(), **kw)


def test_job_table_records_the_model_and_the_throughput_model() -> None:
    jobs = [spec("g", "gavel:ResNet-50 (batch size 64)"), spec("d", "duration-only", duration=10.0)]
    states = [JobState(spec=j, index=i, clock=Clock(0.0), status=JobStatus.UNFINISHED) for i, j in enumerate(jobs)]
    table = _build(states, throughput=default_throughput(None)).jobs
    assert list(table.columns) == JOB_COLUMNS
    assert table["model"].tolist() == [j.model for j in jobs]
    assert table["throughput_model"].tolist() == ["ring-allreduce", "duration-only"]
    assert _build(states).jobs["throughput_model"].isna().all()  # not given: no value made up
