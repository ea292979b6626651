"""Node events in the simulator: a node's speed changing, failing and joining, with completion
times computed by hand."""

from __future__ import annotations

import pytest

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError, PlanError
from dlsched.core.job import JobSpec
from dlsched.core.plan import Plan
from dlsched.core.policy import Policy
from dlsched.policies.registry import make_policy
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import NodeEvent, simulate
from dlsched.throughput.base import ThroughputModel


class PerWorker(ThroughputModel):
    """One iteration per second per worker."""

    name = "per-worker"

    def supports(self, spec: JobSpec) -> bool:
        return True

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        return float(alloc.num_workers)


def _run(jobs, events, nodes=2, gpus=1, policy="fifo", overhead=0.0):
    cluster = Cluster.homogeneous("ev", nodes=nodes, gpus=gpus, cpus=8, mem=32)
    cfg = SimConfig(restart_overhead=overhead)
    res = simulate(jobs, cluster, make_policy(policy), PerWorker(), cfg, node_events=events)
    return res.jobs.set_index("job_id")


def test_a_node_slowing_down_mid_run_delays_completion_exactly():
    jobs = [JobSpec(job_id="a", submit_time=0.0, iterations=100.0)]
    out = _run(jobs, [NodeEvent(40.0, 0, "speed", speed=0.5)])
    # 40 iterations by t=40, then 60 more at 0.5/s: 120 s
    assert out.loc["a", "end"] == pytest.approx(160.0)


def test_a_distributed_job_runs_at_its_slowest_node():
    jobs = [JobSpec(job_id="a", submit_time=0.0, iterations=200.0, num_workers=2)]
    out = _run(jobs, [NodeEvent(50.0, 1, "speed", speed=0.25), NodeEvent(90.0, 1, "speed", speed=1.0)])
    # 2/s until 50 (100 done), 0.5/s until 90 (20 more), then 2/s for the last 80: t = 130
    assert out.loc["a", "end"] == pytest.approx(130.0)


def test_a_failed_node_stops_its_job_which_restarts_elsewhere_and_the_node_rejoins():
    jobs = [JobSpec(job_id="a", submit_time=0.0, iterations=100.0),
            JobSpec(job_id="b", submit_time=0.0, iterations=100.0)]
    # fifo packs a on node 0 and b on node 1; node 0 fails at 30 and joins at 60
    out = _run(jobs, [NodeEvent(30.0, 0, "fail"), NodeEvent(60.0, 0, "join")], overhead=10.0)
    # a kept its 30 iterations, waits for node 0 to join at 60, restarts paying 10 s: 60 + 10 + 70
    assert out.loc["a", "end"] == pytest.approx(140.0)
    assert out.loc["a", "restarts"] == 1 and out.loc["a", "preemptions"] == 0
    assert out.loc["b", "end"] == pytest.approx(100.0)


class OnNodeZero(Policy):
    name = "node-zero"

    def schedule(self, snap):
        plan = Plan()
        for js in snap.pending:
            plan.assign(js.job_id, Allocation.single_node(0, 1))
        return plan


def test_a_plan_on_a_down_node_is_refused_naming_it():
    jobs = [JobSpec(job_id="a", submit_time=10.0, iterations=10.0)]
    cluster = Cluster.homogeneous("ev", nodes=2, gpus=1, cpus=8, mem=32)
    with pytest.raises(PlanError, match="node is down"):
        simulate(jobs, cluster, OnNodeZero(), PerWorker(), node_events=[NodeEvent(5.0, 0, "fail")])


def test_bad_node_events_are_config_errors():
    jobs = [JobSpec(job_id="a", submit_time=0.0, iterations=10.0)]
    with pytest.raises(ConfigError, match="bad node event"):
        _run(jobs, [NodeEvent(1.0, 7, "fail")])
    with pytest.raises(ConfigError, match="bad node event"):
        _run(jobs, [NodeEvent(1.0, 0, "speed", speed=0.0)])


def _priced(nodes=2):
    base = Cluster.homogeneous("ev", nodes=nodes, gpus=1, cpus=8, mem=32)
    import dataclasses
    return dataclasses.replace(base, price=[2.0, 4.0][:nodes])


def test_fees_are_gpu_hours_times_the_prices_of_the_nodes_held():
    jobs = [JobSpec(job_id="a", submit_time=0.0, iterations=200.0, num_workers=2)]
    res = simulate(jobs, _priced(), make_policy("fifo"), PerWorker(),
                   node_events=[NodeEvent(50.0, 1, "speed", speed=0.25), NodeEvent(90.0, 1, "speed", speed=1.0)])
    # 130 s on one GPU of each node: 130/3600 h × (2 + 4) USD
    assert res.jobs.set_index("job_id").loc["a", "fee"] == pytest.approx(130.0 / 3600.0 * 6.0)
    assert res.summary["total_fee"] == pytest.approx(130.0 / 3600.0 * 6.0)
    plain = simulate(jobs, Cluster.homogeneous("ev", nodes=2, gpus=1, cpus=8, mem=32), make_policy("fifo"), PerWorker())
    assert plain.summary["total_fee"] != plain.summary["total_fee"]  # NaN: no prices, no figure


def test_bad_prices_are_config_errors():
    import dataclasses
    with pytest.raises(ConfigError, match="price"):
        dataclasses.replace(Cluster.homogeneous("ev", nodes=2, gpus=1, cpus=8, mem=32), price=[1.0])
    with pytest.raises(ConfigError, match="price"):
        dataclasses.replace(Cluster.homogeneous("ev", nodes=2, gpus=1, cpus=8, mem=32), price=[1.0, -1.0])


class Recorder(Policy):
    """fifo on two one-GPU nodes, recording what each call saw of the running job's workers."""

    name = "recorder"
    interval = 10.0

    def __init__(self):
        self.seen = []
        self.inner = make_policy("fifo")

    def reset(self, cluster, seed):
        self.inner.reset(cluster, seed)

    def schedule(self, snap):
        self.seen += [(snap.now, dict(j.node_speeds or {}), snap.profile) for j in snap.running]
        return self.inner.schedule(snap)


def test_policies_see_the_speed_their_jobs_workers_measure_and_the_type_level_profile():
    jobs = [JobSpec(job_id="a", submit_time=0.0, iterations=200.0, num_workers=2)]
    rec = Recorder()
    model = PerWorker()
    simulate(jobs, Cluster.homogeneous("ev", nodes=2, gpus=1, cpus=8, mem=32), rec, model,
             node_events=[NodeEvent(50.0, 1, "speed", speed=0.25)])
    before = [s for t, s, _ in rec.seen if t < 50.0]
    after = [s for t, s, _ in rec.seen if t >= 50.0]
    assert before and all(s == {0: 1.0, 1: 1.0} for s in before)
    assert after and all(s == {0: 1.0, 1: 0.25} for s in after)
    assert all(p is model for _, _, p in rec.seen)
