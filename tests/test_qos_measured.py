"""The QoS framework on measured scaling curves (issue 14): small hand-made scenarios where the
framework as first built missed deadlines that it meets now, and the estimator fix behind them."""

from __future__ import annotations

from dataclasses import replace

from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec, iterations_are_seconds
from dlsched.core.snapshot import Clock, JobState, JobStatus, Snapshot
from dlsched.estimators.completion_predictor import CompletionPredictor
from dlsched.estimators.speed_model import profile_key
from dlsched.policies.phases.deadline import DeadlineFeasibility, EarliestFinish
from dlsched.policies.qos import qos
from dlsched.sim.engine import simulate
from dlsched.throughput.elasticflow import PREFIX, MeasuredCurves, shipped_curves
from dlsched.traces.profiles import on_curve

TP = MeasuredCurves()


def _bert(job_id: str, submit: float, gpus: int, seconds: float, deadline: float, known: bool = True) -> JobSpec:
    """A bert job at global batch 64 on its measured A100 curve, elastic from 1 GPU to 8 (where the
    curve stops improving); `seconds` of work at its requested size, packed."""
    spec = JobSpec(job_id, submit, seconds, num_workers=gpus, worker_demand=(1.0, 4.0, 16.0),
                   deadline=deadline, work_known=known, duration=seconds)
    return on_curve(spec, shipped_curves()[("bert", 64)], elastic=True, how="test")


def _met(res) -> dict[str, bool]:
    return dict(zip(res.jobs.job_id, res.jobs.deadline_met.astype(bool)))


def test_curve_jobs_of_different_requested_sizes_are_not_pooled():
    # both run at 1 iteration/s at their requested size: pooled, a 1-GPU point would say that
    # 8 GPUs buy nothing, and the 8-GPU job's rate that 1 GPU is as fast as 8
    one, eight = _bert("a", 0.0, 1, 100.0, 1000.0), _bert("b", 0.0, 8, 100.0, 1000.0)
    assert iterations_are_seconds(one) and one.model.startswith(PREFIX)
    assert profile_key(one, sized=True) != profile_key(eight, sized=True)
    assert profile_key(one, sized=True) == profile_key(replace(one, job_id="c"), sized=True)
    assert profile_key(one) == profile_key(eight)  # Optimus' pooling, unchanged
    assert EarliestFinish().speeds.sized and CompletionPredictor().work.sized
    assert not iterations_are_seconds(replace(one, model="resnet50"))


def test_a_multi_gpu_job_is_packed_not_spread_over_nodes():
    # 2 GPUs of bert on two empty nodes: on one node 1,000 s; spread over both (the least-loaded
    # placement of the first build) each step pays a cross-node all-reduce of 440 MB: ~1,300 s
    cluster = Cluster.homogeneous("two", 2, 8, 48, 384, nodes_per_rack=2)
    job = _bert("j", 0.0, 2, 1000.0, 1100.0)
    res = simulate([job], cluster, qos(), TP)
    assert _met(res) == {"j": True}
    assert float(res.jobs.mean_nodes.iloc[0]) == 1.0
    old = simulate([job], cluster, qos(placement="least-loaded", autoscale=False), TP)
    assert _met(old) == {"j": False}  # the scenario does tell the placements apart


def test_a_job_that_misses_even_at_its_largest_size_does_not_take_the_gpus_of_one_that_can_make_it():
    # one 8-GPU node. `late` needs 10,000 s at 1 GPU and has 3,000: bert gains only 1.8x at 8 GPUs,
    # so it misses at any size. Grown to 8 GPUs at its prediction point (the first build), it holds
    # the node, and `ok`, arriving at 600 s with 2,000 s of work on 4 GPUs and 2,500 s to spare,
    # waits behind it (not preemptive) and misses too.
    cluster = Cluster.homogeneous("one", 1, 8, 48, 384)
    late = _bert("late", 0.0, 1, 10_000.0, 3_000.0)
    ok = _bert("ok", 600.0, 4, 2_000.0, 3_100.0)
    res = simulate([late, ok], cluster, qos(), TP)
    assert _met(res) == {"late": False, "ok": True}


def test_a_job_that_cannot_make_it_yields_to_one_that_can():
    # one 8-GPU node, fully used by `long` (deadline far away). `urgent` arrives at 100 s needing
    # 4 GPUs for 1,000 s with 1,500 s to spare: the prototype's scheduler (never preempting) keeps
    # it waiting until `long` ends and it misses; preempting `long` (ranked lower by deadline), it
    # makes it, and `long` still makes its own.
    cluster = Cluster.homogeneous("one", 1, 8, 48, 384)
    long = _bert("long", 0.0, 8, 5_000.0, 20_000.0)
    urgent = _bert("urgent", 100.0, 4, 1_000.0, 1_600.0)
    assert _met(simulate([long, urgent], cluster, qos(), TP)) == {"long": True, "urgent": True}
    assert _met(simulate([long, urgent], cluster, qos(preempt="none"), TP)) == {"long": True, "urgent": False}


def test_only_a_job_that_never_ran_is_rejected():
    cluster = Cluster.homogeneous("one", 1, 8, 48, 384)
    spec = _bert("j", 0.0, 1, 1_000.0, 500.0)
    judged = {}
    for first_start in (None, 10.0):  # never ran / ran, then preempted
        js = JobState(spec=spec, index=0, clock=Clock(600.0), status=JobStatus.PENDING, first_start=first_start)
        snap = Snapshot(now=600.0, cluster=cluster, free=cluster.capacity, pending=[js], running=[],
                        restart_overhead=10.0)
        finish = EarliestFinish(CompletionPredictor())
        finish.observe(snap)
        adm = DeadlineFeasibility(finish)
        admitted, rejected = adm.admit(snap, [js])
        judged[first_start] = (len(admitted), list(rejected), list(adm.late))
    assert judged[None] == (0, ["j"], [])  # its deadline passed before it could start
    assert judged[10.0] == (1, [], ["j"])  # kept, behind every job that can still make it
