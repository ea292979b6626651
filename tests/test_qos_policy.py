"""The QoS deadline policy: impossible deadlines rejected with a reason, EDF order, deadline-only
jobs sized by the framework, and it being observable-only (not an oracle)."""

from __future__ import annotations

import dataclasses

import pytest

from dlsched.core.errors import ConfigError
from dlsched.core.snapshot import Clock, JobState, JobStatus, Snapshot
from dlsched.paths import traces_dir
from dlsched.policies.phases.deadline import EarliestDeadline
from dlsched.policies.phases.sizing import ps_for
from dlsched.policies.qos import qos
from dlsched.policies.registry import make_policy
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.registry import default_throughput
from dlsched.traces.qos_synthetic import JOB_TYPES, qos_cluster, qos_job, qos_workload

TP = default_throughput(traces_dir())


def test_impossible_deadline_is_rejected_with_its_reason():
    # the first LSTM job measures the type's speed; the second one asks for 30 s, but 10,000 steps
    # take >= 120 s even at the cap of 32 workers on an empty cluster. (The admission's bound is
    # linear from the type's best measured speed per worker; packed, the first job's points are
    # fast enough that a 60-s deadline, as here before placement became `pack`, passes it.)
    jobs = [qos_job("first", 0.0, 1800.0, "lstm"), qos_job("hopeless", 500.0, 30.0, "lstm")]
    res = simulate(jobs, qos_cluster(40), qos(), TP)
    row = res.jobs.set_index("job_id").loc["hopeless"]
    assert row.status == "rejected"
    assert "deadline infeasible" in row.reason and "32 workers" in row.reason
    assert res.jobs.set_index("job_id").loc["first"].deadline_met


def test_deprioritise_mode_keeps_the_job_and_says_why():
    jobs = [qos_job("first", 0.0, 1800.0, "lstm"), qos_job("hopeless", 500.0, 60.0, "lstm")]
    pol = qos(infeasible="deprioritise")
    seen = {}
    orig = pol.admission.admit

    def spy(snap, js):
        out = orig(snap, js)
        for jid, why in pol.admission.late.items():
            seen.setdefault(jid, []).append(why)
        return out

    pol.admission.admit = spy
    res = simulate(jobs, qos_cluster(40), pol, TP)
    row = res.jobs.set_index("job_id").loc["hopeless"]
    assert row.status == "done" and not row.deadline_met
    assert "deadline infeasible" in seen["hopeless"][0]  # first judged infeasible, later past due


def test_no_evidence_no_rejection():
    """A type never measured cannot be judged: the job is admitted, not rejected on a guess."""
    res = simulate([qos_job("alone", 0.0, 60.0, "gan")], qos_cluster(40), qos(), TP)
    assert res.jobs.status.iloc[0] == "done"


def test_edf_order_puts_late_jobs_last():
    clock = Clock(0.0)
    specs = [qos_job(f"j{i}", 0.0, d) for i, d in enumerate([1500.0, 700.0, 1000.0])]
    states = [JobState(spec=s, index=i, clock=clock, rank=i, status=JobStatus.PENDING) for i, s in enumerate(specs)]
    snap = Snapshot(now=0.0, cluster=qos_cluster(2), free=qos_cluster(2).capacity, pending=states, running=[],
                    restart_overhead=10.0)
    assert [j.job_id for j in EarliestDeadline().order(snap, states)] == ["j1", "j2", "j0"]
    late = EarliestDeadline(late=lambda: {"j1": "too late"})
    assert [j.job_id for j in late.order(snap, states)] == ["j2", "j0", "j1"]


class _Left:
    """A stand-in for `EarliestFinish`: each job's predicted seconds left (None: unknown)."""

    def __init__(self, left):
        self.left = left

    def times(self, snap, job, optimistic=False, measured=True):
        t = self.left[job.job_id]
        return lambda workers: None if t is None else snap.now + t


def test_late_jobs_go_shortest_predicted_first_unknown_as_the_median():
    clock = Clock(0.0)
    specs = [qos_job(f"j{i}", 0.0, d) for i, d in enumerate([1500.0, 700.0, 1000.0, 2000.0])]
    states = [JobState(spec=s, index=i, clock=clock, rank=i, status=JobStatus.PENDING) for i, s in enumerate(specs)]
    snap = Snapshot(now=0.0, cluster=qos_cluster(2), free=qos_cluster(2).capacity, pending=states, running=[],
                    restart_overhead=10.0)
    late = {"j0": "late", "j1": "late", "j2": "late"}
    left = _Left({"j0": 500.0, "j1": 900.0, "j2": None, "j3": 50.0})
    # j3 can still make its deadline: first; late ones by time left, j2 unknown = median (700)
    ordered = EarliestDeadline(late=lambda: late, finish=left).order(snap, states)
    assert [j.job_id for j in ordered] == ["j3", "j0", "j2", "j1"]
    # without a prediction for any late job, or without `finish`: deadline order among them
    unknown = _Left({"j0": None, "j1": None, "j2": None, "j3": 50.0})
    assert [j.job_id for j in EarliestDeadline(late=lambda: late, finish=unknown).order(snap, states)] == ["j3", "j1", "j2", "j0"]
    assert [j.job_id for j in EarliestDeadline(late=lambda: late).order(snap, states)] == ["j3", "j1", "j2", "j0"]


@pytest.mark.parametrize("late_order", ["shortest", "deadline"])
def test_two_late_jobs_on_room_for_one_run_shortest_predicted_first(late_order: str):
    """Two jobs that cannot make their deadlines (kept, `deprioritise`) arrive together where only
    one fits: by predicted remaining time the one with a tenth of the work runs first (the type's
    speed measured on an earlier job); by deadline the long one, whose deadline is earlier."""
    first = qos_job("first", 0.0, 1800.0, "lstm")
    long_ = qos_job("long", 20000.0, 1.0, "lstm")
    short = dataclasses.replace(qos_job("short", 20000.0, 2.0, "lstm"), iterations=long_.iterations / 10)
    res = simulate([first, long_, short], qos_cluster(1, cpus=4.0), qos(infeasible="deprioritise", late_order=late_order), TP)
    rows = res.jobs.set_index("job_id")
    assert (rows.status == "done").all() and not rows.loc[["long", "short"], "deadline_met"].any()
    ahead, behind = ("short", "long") if late_order == "shortest" else ("long", "short")
    assert rows.loc[ahead, "start"] == 20000.0 and rows.loc[behind, "start"] >= rows.loc[ahead, "end"]


def test_qos_orders_late_jobs_by_predicted_time_unless_told_deadline():
    assert qos().ordering.finish is not None
    assert qos(late_order="deadline").ordering.finish is None
    with pytest.raises(ConfigError, match="late_order"):
        make_policy("qos", late_order="random")


def test_deadline_only_jobs_get_sized_and_meet_deadlines_when_resources_suffice():
    w = qos_workload(12, mean_interarrival=150.0, seed=3)
    res = simulate(w.jobs, qos_cluster(60), qos(), TP, SimConfig(restart_overhead=10.0))
    assert res.summary["deadline_met_ratio"] == 1.0
    # the same jobs at their default size (1 PS + 1 worker) need ~2,000 s: none makes it
    base = simulate(w.jobs, qos_cluster(60), make_policy("edf"), TP)
    assert base.summary["deadline_met_ratio"] == 0.0


def test_vertical_ps_scaling_table():
    gan = qos_job("g", 0.0, 900.0, "gan")
    assert [ps_for(gan, w) for w in (1, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]
    ae = qos_job("a", 0.0, 900.0, "autoencoder")
    assert [ps_for(ae, w) for w in (7, 8, 12)] == [1, 2, 2]
    assert ps_for(qos_job("l", 0.0, 900.0, "lstm"), 32) == 1


def test_policy_is_not_an_oracle_and_registry_options_are_checked():
    pol = make_policy("qos", infeasible="deprioritise")
    assert pol.oracle is False and pol.name == "qos"
    assert make_policy("qos", autoscale=False).name == "qos-noscale"
    assert make_policy("edf").name == "edf"
    with pytest.raises(ConfigError, match="infeasible"):
        make_policy("qos", infeasible="drop")
    with pytest.raises(ConfigError, match="no option"):
        make_policy("qos", size=4)


def test_synthetic_workload_is_like_the_papers():
    w = qos_workload(40, seed=1)
    rel = [j.deadline - j.submit_time for j in w.jobs]
    assert min(rel) >= 600 and max(rel) <= 1800
    assert all(j.work_known and j.num_workers == 1 and j.num_ps == 1 for j in w.jobs)
    assert {j.extra["qos_type"] for j in w.jobs} == set(JOB_TYPES)
    with pytest.raises(ConfigError):
        qos_workload(0)
    with pytest.raises(ConfigError):
        qos_job("x", 0.0, 600.0, "resnet")
