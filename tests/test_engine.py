"""The engine's contract: plans are validated loudly, time and work are accounted exactly."""

from __future__ import annotations

import math

import pytest

from dlsched.core import Allocation, Cluster, JobSpec, Plan, PlanError, Policy
from dlsched.core.errors import ConfigError
from dlsched.policies.fifo import fifo
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.duration_only import DurationOnly
from tests.conftest import rigid_job


class FixedPlan(Policy):
    """Returns whatever plan the test gives it, to provoke the validator."""

    name = "fixed"

    def __init__(self, make):
        self.make = make

    def schedule(self, snap):
        return self.make(snap)


def test_fifo_runs_jobs_for_exactly_their_duration(small_cluster):
    jobs = [rigid_job(0, 0.0, 100.0, gpus=4), rigid_job(1, 10.0, 50.0, gpus=16)]
    r = simulate(jobs, small_cluster, fifo(), DurationOnly())
    by = r.jobs.set_index("job_id")
    assert by.loc["j0", "end"] == pytest.approx(100.0)
    # j1 needs the whole cluster: strict FIFO starts it when j0 ends
    assert by.loc["j1", "start"] == pytest.approx(100.0)
    assert by.loc["j1", "jct"] == pytest.approx(140.0)
    assert r.summary["finished"] == 2
    assert by.loc["j1", "gpu_seconds"] == pytest.approx(16 * 50.0)


def test_job_larger_than_cluster_is_rejected_with_reason(small_cluster):
    jobs = [rigid_job(0, 0.0, 10.0, gpus=32), rigid_job(1, 0.0, 10.0)]
    r = simulate(jobs, small_cluster, fifo(), DurationOnly())
    row = r.jobs.set_index("job_id").loc["j0"]
    assert row.status == "rejected"
    assert "32 gpu" in row.reason and "16" in row.reason
    assert r.summary["finished"] == 1


def test_missing_gpu_type_is_rejected(small_cluster):
    job = rigid_job(0, 0.0, 10.0, gpu_type="V100")
    r = simulate([job], small_cluster, fifo(), DurationOnly())
    assert "V100" in r.jobs.reason[0]


def test_overallocation_names_node_and_jobs(small_cluster):
    jobs = [rigid_job(0, 0.0, 10.0, gpus=4), rigid_job(1, 0.0, 10.0, gpus=4)]

    def both_on_node0(snap):
        return Plan({j.job_id: Allocation.single_node(0, 4) for j in snap.pending})

    with pytest.raises(PlanError, match=r"over-allocates node small-n0000: gpu 8 > capacity 4.*j0.*j1"):
        simulate(jobs, small_cluster, FixedPlan(both_on_node0), DurationOnly())


def test_gang_violation_is_refused(small_cluster):
    jobs = [rigid_job(0, 0.0, 10.0, gpus=4)]
    with pytest.raises(PlanError, match="j0.*3 workers is outside"):
        simulate(jobs, small_cluster, FixedPlan(lambda s: Plan({"j0": Allocation.single_node(0, 3)})), DurationOnly())


def test_ps_job_needs_a_parameter_server(small_cluster):
    job = JobSpec(job_id="p", submit_time=0, iterations=10, arch="ps", num_workers=2, num_ps=1)
    with pytest.raises(PlanError, match="parameter servers"):
        simulate([job], small_cluster, FixedPlan(lambda s: Plan({"p": Allocation.single_node(0, 2, 0)})), DurationOnly())


def test_unknown_job_and_finished_job_in_plan(small_cluster):
    with pytest.raises(PlanError, match="unknown job 'ghost'"):
        simulate([rigid_job(0, 0, 5)], small_cluster,
                 FixedPlan(lambda s: Plan({"ghost": Allocation.single_node(0, 1)})), DurationOnly())


def test_duplicate_job_ids_are_an_error(small_cluster):
    with pytest.raises(ConfigError, match="duplicate job id"):
        simulate([rigid_job(0, 0, 5), rigid_job(0, 1, 5)], small_cluster, fifo(), DurationOnly())


def test_preemption_keeps_progress_and_resume_pays_overhead(small_cluster):
    """Run j0 alone until j1 arrives, preempt it for j1, then resume it: no work lost or created."""

    def plan(snap):
        ids = {j.job_id for j in snap.jobs()}
        if "j1" in ids:
            return Plan({"j1": Allocation.single_node(0, 4)})
        return Plan({"j0": Allocation.single_node(0, 4)})

    jobs = [rigid_job(0, 0.0, 100.0, gpus=4), rigid_job(1, 40.0, 30.0, gpus=4)]
    r = simulate(jobs, small_cluster, FixedPlan(plan), DurationOnly(), SimConfig(restart_overhead=5.0))
    by = r.jobs.set_index("job_id")
    assert by.loc["j1", "end"] == pytest.approx(70.0)
    # j0 did 40 s of work, waited, resumed at 70 with a 5 s pause, then did the last 60 s
    assert by.loc["j0", "end"] == pytest.approx(135.0)
    assert by.loc["j0", "preemptions"] == 1 and by.loc["j0", "restarts"] == 1
    assert by.loc["j0", "progress"] == pytest.approx(100.0)


def test_policy_that_never_schedules_ends_with_reasons(small_cluster):
    r = simulate([rigid_job(0, 0, 5)], small_cluster, FixedPlan(lambda s: Plan()), DurationOnly())
    assert r.jobs.status[0] == "unfinished"
    assert "started nothing" in r.jobs.reason[0]


def test_interval_policy_is_asked_on_slots(small_cluster):
    calls = []

    class Slotted(Policy):
        name = "slotted"
        on_events = False
        interval = 100.0

        def schedule(self, snap):
            calls.append(snap.now)
            return Plan({j.job_id: Allocation.single_node(0, 1) for j in snap.jobs()})

    r = simulate([rigid_job(0, 30.0, 250.0)], small_cluster, Slotted(), DurationOnly())
    assert calls[:3] == [30.0, 130.0, 230.0]
    assert r.jobs.end[0] == pytest.approx(280.0)


def test_a_job_waiting_for_a_slot_policy_starts_at_the_next_slot_while_others_keep_arriving(small_cluster):
    # The system empties at 5; later arrivals come further apart than a slot. Skipping idle ticks to
    # the next arrival would push j1's first slot past every later arrival (DL2 on ITP 195job: jobs
    # waited 46 h for a 20-minute slot); a waiting job must get the next tick on the grid.
    class Slotted(Policy):
        name = "slotted"
        on_events = False
        interval = 100.0

        def schedule(self, snap):
            return Plan({j.job_id: Allocation.single_node(0, 1) for j in snap.jobs()})

    jobs = [rigid_job(0, 0.0, 5.0), rigid_job(1, 120.0, 10.0), rigid_job(2, 250.0, 10.0), rigid_job(3, 380.0, 10.0)]
    r = simulate(jobs, small_cluster, Slotted(), DurationOnly())
    assert list(r.jobs.set_index("job_id").start) == [0.0, 200.0, 300.0, 400.0]


def test_wake_at_is_honoured(small_cluster):
    class Late(Policy):
        name = "late"

        def schedule(self, snap):
            if snap.now < 50:
                p = Plan()
                p.wake_at = 50.0
                return p
            return Plan({j.job_id: Allocation.single_node(1, 1) for j in snap.jobs()})

    r = simulate([rigid_job(0, 0.0, 10.0)], small_cluster, Late(), DurationOnly())
    assert r.jobs.start[0] == pytest.approx(50.0)


def test_node_speed_factor_slows_a_job():
    import numpy as np

    c = Cluster.homogeneous("s", 2, 4, 32, 256)
    c = Cluster(c.name, c.capacity, c.gpu_type, c.rack, np.array([0.5, 1.0]), c.node_names)
    r = simulate([rigid_job(0, 0.0, 10.0)], c, FixedPlan(lambda s: Plan({"j0": Allocation.single_node(0, 1)})), DurationOnly())
    assert r.jobs.end[0] == pytest.approx(20.0)


def test_summary_metrics_are_consistent(small_cluster):
    jobs = [rigid_job(i, i * 5.0, 20.0 + i, gpus=1 + i % 4) for i in range(20)]
    r = simulate(jobs, small_cluster, fifo(backfill=True), DurationOnly())
    s = r.summary
    assert s["finished"] == 20
    assert s["mean_jct"] == pytest.approx(r.jobs.jct.mean())
    assert 0 < s["gpu_utilization"] <= 1
    assert s["makespan"] == pytest.approx(r.jobs.end.max() - r.jobs.submit.min())
    assert math.isnan(s["deadline_met_ratio"])


def test_pack_looks_past_a_full_node_in_the_roomiest_rack():
    """Regression: nodes are visited rack-first, so a full node must not end the search."""
    import numpy as np

    from dlsched.policies.phases.placement import pack

    c = Cluster.homogeneous("r", 6, 4, 32, 256, nodes_per_rack=3)
    free = c.capacity.copy()
    free[:, 0] = [4, 3, 0, 4, 4, 0]  # rack 1 (8 free) is visited first and ends in a full node
    job = JobSpec(job_id="j", submit_time=0, iterations=1, num_workers=12)
    alloc = pack(c, free, job, 12, 0)
    assert alloc is not None and alloc.num_workers == 12
    assert np.all(np.asarray(alloc.workers) <= free[list(alloc.nodes), 0])
