"""The Dual-Agent-style policy: its agents, its reward, its variants, its model files."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import Clock, JobState, JobStatus, Snapshot
from dlsched.policies.dual_agent import VARIANTS, build, dual_agent, load, save
from dlsched.models.dual_agent_net import DualAgentNet
from dlsched.models.dual_agent_trajectory import Trajectory
from dlsched.sim.engine import NodeEvent, simulate
from dlsched.throughput.base import ThroughputModel


class ByType(ThroughputModel):
    """One iteration per second per worker on "fast" GPUs, half on "slow" ones, nothing for
    "never" jobs on "slow" GPUs; a job runs at its slowest GPU's pace."""

    name = "by-type"

    def supports(self, spec: JobSpec) -> bool:
        return True

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        types = {str(cluster.gpu_type[n]) for n in alloc.nodes}
        if "slow" in types:
            return 0.0 if spec.model == "never" else 0.5 * alloc.num_workers
        return float(alloc.num_workers)


def _cluster() -> Cluster:
    n = 6
    return Cluster(name="mixed", capacity=np.tile([2.0, 16, 64], (n, 1)),
                   gpu_type=np.array(["fast"] * 3 + ["slow"] * 3, dtype=object), rack=np.array([0, 0, 1, 2, 2, 3]),
                   speed=np.ones(n), node_names=tuple(f"m{i}" for i in range(n)), price=np.array([3.0] * 3 + [1.0] * 3))


def _jobs(n: int = 14, seed: int = 0) -> list[JobSpec]:
    rng = np.random.default_rng(seed)
    return [JobSpec(job_id=f"j{i}", submit_time=float(i * 200), iterations=float(rng.integers(500, 4000)),
                    num_workers=int(rng.choice([1, 1, 2, 4])), arch="allreduce") for i in range(n)]


EVENTS = [NodeEvent(1500.0, 0, "speed", speed=0.5), NodeEvent(6000.0, 0, "speed", speed=1.0)]


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("mode", ["greedy", "sample", "teacher"])
def test_every_variant_finishes_a_workload_on_a_heterogeneous_fluctuating_cluster(variant, mode):
    torch.manual_seed(0)
    net = DualAgentNet(hidden=8, communicate=variant not in ("no-comm", "ordering-only"))
    res = simulate(_jobs(), _cluster(), build(variant, net, mode), ByType(), node_events=EVENTS)
    assert res.summary["finished"] == 14
    assert res.summary["total_fee"] > 0


@pytest.mark.parametrize("fee_weight", [0.0, 0.7])
def test_the_episode_return_is_minus_total_jct_hours_minus_the_weighted_fee(fee_weight):
    traj = Trajectory(fee_weight)
    net = DualAgentNet(hidden=8)
    res = simulate(_jobs(), _cluster(), build("full", net, "sample", traj), ByType(), node_events=EVENTS)
    traj.close(float(res.jobs["end"].max()), res.summary["total_fee"])
    want = -res.jobs["jct"].sum() / 3600.0 - fee_weight * res.summary["total_fee"]
    assert traj.total_reward == pytest.approx(want, rel=1e-9)
    assert any(s.acted for s in traj.steps) and any(s.picks for s in traj.steps)


def test_the_placement_agent_keeps_a_job_on_one_type_and_off_types_where_it_makes_no_progress():
    jobs = [dataclasses.replace(j, model="never") for j in _jobs(10, seed=1)]
    for mode in ("greedy", "sample", "teacher"):
        res = simulate(jobs, _cluster(), build("full", DualAgentNet(hidden=8), mode), ByType())
        assert res.summary["finished"] == 10  # never on a slow GPU: it would not progress there
        assert (res.jobs["fee"] > 0).all()


def test_the_placement_teacher_avoids_a_machine_the_gp_saw_slow():
    """Node 0 runs at half speed from the start; once a job measured it, the teacher's picks for
    one-GPU jobs go to the other fast machines first."""
    jobs = [JobSpec(job_id=f"j{i}", submit_time=float(i * 3000), iterations=1000.0) for i in range(4)]
    net = DualAgentNet(hidden=8)
    res = simulate(jobs, _cluster(), build("full", net, "teacher"), ByType(),
                   node_events=[NodeEvent(1.0, 0, "speed", speed=0.5)])
    out = res.jobs.set_index("job_id")
    assert out.loc["j0", "jct"] == pytest.approx(1000 / 0.5 + 0.0, rel=0.01)  # j0 took node 0 (nothing known)
    assert (out.loc[["j1", "j2", "j3"], "jct"] < 1500).all()  # the rest avoided it


def test_model_files_round_trip_and_bad_ones_are_config_errors(tmp_path):
    net = DualAgentNet(hidden=8, communicate=False)
    save(net, tmp_path / "m.pt", {"variant": "no-comm"})
    back, meta = load(tmp_path / "m.pt")
    assert meta["variant"] == "no-comm" and not back.communicate
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), back.state_dict().values()))
    with pytest.raises(ConfigError, match="trained as variant 'no-comm'"):
        dual_agent("full", model=str(tmp_path / "m.pt"))
    (tmp_path / "bad.pt").write_text("not a model")
    with pytest.raises(ConfigError, match="not a Dual-Agent-style model"):
        dual_agent("full", model=str(tmp_path / "bad.pt"))
    with pytest.raises(ConfigError, match="unknown dual-agent variant"):
        dual_agent("both")
    with pytest.raises(ConfigError, match="no Dual-Agent-style model"):
        dual_agent("full", model=str(tmp_path / "missing.pt"))


def test_an_untrained_network_acts_as_its_teachers_do():
    """Residual actors: the learned corrections start at zero, so greedy decisions are the
    teachers' (continuous Tiresias with waiting; the speed-aware placement over the GP)."""
    runs = {}
    for mode in ("teacher", "greedy"):
        res = simulate(_jobs(20, seed=3), _cluster(), build("full", DualAgentNet(hidden=8), mode), ByType(),
                       node_events=EVENTS)
        runs[mode] = res.jobs.set_index("job_id")[["start", "end", "fee"]]
    assert runs["greedy"].equals(runs["teacher"])


def test_a_call_with_no_job_waiting_only_learns_machine_speeds_and_decides_what_a_full_decision_would():
    """With nothing pending the ordering agent has nothing to order for (the realiser keeps every
    running rigid job in place), so it skips the encodings and the network but the speed estimate
    still learns: the run is the one a policy deciding on every call makes (a recording trajectory
    makes it decide every time), with far fewer machine encodings on a roomy cluster."""
    torch.manual_seed(1)
    net = DualAgentNet(hidden=8)
    for head in (net.order_out, net.pick[-1]):  # a network whose decisions are its own, not its teachers'
        torch.nn.init.normal_(head.weight, std=0.5)
    encoded = {"n": 0}
    machines = net.machines

    def counting(mfeat):
        encoded["n"] += 1
        return machines(mfeat)

    net.machines = counting
    sparse = [dataclasses.replace(j, submit_time=j.submit_time * 20) for j in _jobs(20, seed=5)]  # roomy: few waits
    runs, counts, learnt = {}, {}, {}
    for label, traj in (("skips", None), ("decides every call", Trajectory())):
        encoded["n"] = 0
        policy = build("full", net, "greedy", traj)
        res = simulate(sparse, _cluster(), policy, ByType(), node_events=EVENTS)
        runs[label], counts[label] = res.jobs.set_index("job_id")[["start", "end", "fee"]], encoded["n"]
        est = policy.placement.estimate
        learnt[label] = est.log_speeds(1e6, est._cluster)  # the cluster it learnt on (another would reset it)
    assert runs["skips"].equals(runs["decides every call"])
    assert counts["skips"] < counts["decides every call"] / 2
    for a, b in zip(learnt["skips"], learnt["decides every call"]):  # the estimate saw every call's speeds
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ elastic jobs


def _elastic(job_id: str, submit: float, iterations: float, lo: int = 1, hi: int = 8) -> JobSpec:
    return JobSpec(job_id=job_id, submit_time=submit, iterations=iterations, num_workers=hi // 2, arch="allreduce",
                   min_workers=lo, max_workers=hi)


def _one_type(nodes: int = 2, gpus: int = 4) -> Cluster:
    return Cluster.homogeneous("same", nodes=nodes, gpus=gpus, cpus=64, mem=512)


def _running(spec: JobSpec, alloc: Allocation) -> JobState:
    return JobState(spec=spec, index=0, clock=Clock(0.0), status=JobStatus.RUNNING, allocation=alloc)


def test_admit_then_share_admits_in_the_given_order_and_shares_the_rest_by_dominant_share():
    """8 GPUs, ranked A (rigid 4), B (elastic 1-4), C (rigid 4), D (elastic 1-4): A, B and D are
    admitted (C's 4 GPUs no longer fit after A and B's minimum), and the 2 GPUs left go one each to
    B and D; C is listed at its size, in its place."""
    from dlsched.policies.phases.sizing import AdmitThenShare

    specs = [JobSpec(job_id="A", submit_time=0.0, iterations=1.0, num_workers=4, arch="allreduce"),
             _elastic("B", 1.0, 1.0, hi=4),
             JobSpec(job_id="C", submit_time=2.0, iterations=1.0, num_workers=4, arch="allreduce"),
             _elastic("D", 3.0, 1.0, hi=4)]
    cluster = _one_type()
    snap = Snapshot(0.0, cluster, cluster.capacity.copy(), [], [], 0.0)

    def sizes(specs: list[JobSpec], sizing: AdmitThenShare = AdmitThenShare()) -> list[tuple[str, int]]:
        jobs = [JobState(spec=s, index=i, clock=Clock(0.0), status=JobStatus.PENDING) for i, s in enumerate(specs)]
        return [(j.job_id, w) for j, w, _ in sizing.size(snap, jobs)]

    assert sizes(specs) == [("A", 4), ("B", 2), ("C", 4), ("D", 2)]
    rigid = [dataclasses.replace(s, min_workers=s.num_workers, max_workers=s.num_workers) for s in specs]
    assert sizes(rigid) == [(s.job_id, s.num_workers) for s in rigid]  # their requested sizes, in the given order
    alone = [_elastic("E", 0.0, 1.0, hi=8)]  # asks for 4 of 1-8 workers on an empty 8-GPU cluster
    assert sizes(alone) == [("E", 8)]
    assert sizes(alone, AdmitThenShare(beyond_requested=False)) == [("E", 4)]  # billed: never past what it asked


def test_room_at_minimum_takes_back_the_loneliest_workers_beyond_the_minimum():
    from dlsched.policies.phases.scaling import room_at_minimum

    spec = _elastic("e", 0.0, 1.0, lo=1, hi=8)
    cluster = _one_type(nodes=3)
    job = _running(spec, Allocation.of({0: (1, 0), 1: (2, 0)}))
    free = cluster.capacity.copy()
    free[0, 0], free[1, 0] = 3.0, 2.0
    room = room_at_minimum([job], free)
    assert room[:, 0].tolist() == [4.0, 3.0, 4.0]  # node 0's lone worker, then one of node 1's two
    assert free[0, 0] == 3.0  # a copy


def test_a_newcomer_gets_a_share_of_a_cluster_that_elastic_jobs_have_grown_into():
    """One elastic job grows into the whole cluster; a second arriving later starts at once: the
    workers the first has beyond its minimum count as room for it (else the placement agent's word
    is "no machine has room" and the ordering teacher holds it back until the first ends). With
    `elastic=False` both run at their requested 4 GPUs."""
    jobs = [_elastic("first", 0.0, 80_000.0), _elastic("second", 600.0, 8_000.0)]
    out = {}
    for elastic in (True, False):
        res = simulate(jobs, _one_type(), build("full", DualAgentNet(hidden=8), "teacher", elastic=elastic), ByType())
        out[elastic] = res.jobs.set_index("job_id")
    assert out[True].loc["second", "start"] == pytest.approx(600.0)
    assert out[False].loc["first", "end"] == pytest.approx(20_000.0)  # 4 workers, 1 iteration/s each
    assert out[True].loc["first", "end"] < 0.8 * out[False].loc["first", "end"]  # 8 GPUs while alone, 4+ after
    priced = dataclasses.replace(_one_type(), price=np.full(2, 2.0))  # every GPU-hour billed: no growth past 4
    res = simulate(jobs, priced, build("full", DualAgentNet(hidden=8), "teacher"), ByType()).jobs.set_index("job_id")
    assert res.loc["first", "end"] == pytest.approx(20_000.0)


def test_with_length_estimates_the_ordering_teacher_lets_the_job_nearly_done_finish():
    """A long rigid job holds the whole cluster for 50,000 s; another arrives 5,000 s before its end,
    needing 10,000 s. By attained service (Tiresias' order, `lengths=False`) the newcomer is in the
    first queue and preempts the old job, which resumes only after it. By estimated remaining time
    (`phases.length_rank`, here from the declared work over the speed measured of the running job of
    the same type) the old job, nearly done, finishes first."""
    def rigid(job_id: str, submit: float, iterations: float) -> JobSpec:
        return JobSpec(job_id=job_id, submit_time=submit, iterations=iterations, num_workers=8, arch="allreduce",
                       work_known=True)

    jobs = [rigid("old", 0.0, 400_000.0), rigid("new", 45_000.0, 80_000.0)]  # 8 workers at 1 iteration/s each
    out = {}
    for lengths in (True, False):
        policy = build("full", DualAgentNet(hidden=8), "teacher", lengths=lengths)
        out[lengths] = simulate(jobs, _one_type(), policy, ByType()).jobs.set_index("job_id")
    assert out[True].loc["old", "end"] == pytest.approx(50_000.0)
    assert out[True].loc["old", "preemptions"] == 0
    assert out[False].loc["old", "preemptions"] >= 1
    assert out[False].loc["old", "end"] > out[False].loc["new", "end"] >= 55_000.0


def test_length_rank_orders_by_remaining_iterations_over_measured_speed(small_cluster):
    """Places as shares of the jobs, shortest estimated remaining time first (remaining iterations
    over the speed measured for the job type); a job of unknown length (no declared work, no
    progress, no finished job of its type) counts as the median of the others, and ties go by
    submit time; before any speed is measured every time is unknown and the order is arrival."""
    from dlsched.policies.phases.length_rank import LengthRank

    def job(i: int, iterations: float, known: bool = True) -> JobState:
        spec = JobSpec(f"j{i}", float(i), iterations, num_workers=1, work_known=known)
        return JobState(spec=spec, index=i, clock=Clock(0.0), status=JobStatus.PENDING)

    jobs = [job(0, 9_000.0), job(1, 1_000.0), job(2, 5_000.0, known=False), job(3, 3_000.0)]
    snap = Snapshot(0.0, small_cluster, small_cluster.capacity.copy(), jobs, [], 0.0)
    assert LengthRank().ranks(snap, jobs).tolist() == [0.0, 0.25, 0.5, 0.75]
    ranker = LengthRank()
    runner = job(9, 1e4)  # a job of the same type measured at 2.5 iterations/s on one worker
    runner.status, runner.observed_rates = JobStatus.RUNNING, {(1, 1, 0): 2.5}
    ranker.estimates.speeds.observe(runner)
    # times 3,600 / 400 / 1,200 (the median of 9,000, 1,000, 3,000 over 2.5) / 1,200 s
    assert ranker.ranks(snap, jobs).tolist() == [0.75, 0.0, 0.25, 0.5]


def test_length_estimates_are_on_by_default_only_on_a_cluster_of_one_gpu_type():
    """The estimate divides by a job type's speed pooled over GPU types: on a cluster of several
    types the default teacher keeps attained service; `lengths=True` forces the estimates on."""
    def ranked(policy, cluster) -> bool:
        policy.reset(cluster, 0)
        return policy._lengths is not None

    assert ranked(build("full", DualAgentNet(hidden=8), "teacher"), _one_type())
    assert not ranked(build("full", DualAgentNet(hidden=8), "teacher"), _cluster())
    assert ranked(build("full", DualAgentNet(hidden=8), "teacher", lengths=True), _cluster())
    assert not ranked(build("full", DualAgentNet(hidden=8), "teacher", lengths=False), _one_type())
