"""OASiS on real-trace jobs (issue 14): the slot/horizon rule, L when no utility lasts to T, the
constant-size schedules from a job's true speed, gangs kept on one server, and a waiting plan
that starts on time on an idle cluster."""

import math

import numpy as np
import pytest

from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.policy import Oracle
from dlsched.core.utility import with_default_utilities
from dlsched.policies.oasis import OASiS
from dlsched.policies.oasis_jobs import (
    best_rigid_schedule, candidate_sizes, rigid_costs, workload_slots,
)
from dlsched.policies.oasis_prices import L_FLOOR, JobTerms, constants_from
from dlsched.policies.oasis_schedule import Market, slot_costs
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.duration_only import DurationOnly


def _dur_jobs(durations):
    return [JobSpec(f"j{i}", float(i), iterations=d, duration=d) for i, d in enumerate(durations)]


def test_workload_slots_rule():
    # 10th percentile of 20 jobs of 1000..20000 s is 2900 s; /8 = 362.5 s -> 6 whole minutes
    jobs = _dur_jobs([1000.0 * k for k in range(1, 21)])
    slot, horizon = workload_slots(jobs)
    assert slot == 360.0
    assert horizon == math.ceil(3 * 20000.0 / 360.0)
    # clamped to [1 min, 1 h]
    assert workload_slots(_dur_jobs([30.0, 40.0]))[0] == 60.0
    assert workload_slots(_dur_jobs([1e6, 2e6]))[0] == 3600.0
    # every job fits its horizon, whatever the spread of durations
    s, h = workload_slots(_dur_jobs([100.0, 5e5]))
    assert s * h >= 5e5
    # only trace durations are read, never a job's work: without any, OASiS keeps its defaults
    assert workload_slots([JobSpec("w", 0.0, iterations=1e6)]) is None


def test_lower_bound_does_not_collapse_when_no_utility_lasts_to_the_horizon():
    """A rolling horizon set by the longest job: every short job's f(T) is ~0. L then counts each
    job as worth min_fraction of its peak at T instead of falling to the float floor."""
    wd, pd_ = np.array([1.0, 4.0, 16.0]), np.zeros(3)
    terms = [JobTerms(fastest_utility=1.0, horizon_utility=1e-40, work=w, worker_demand=wd, ps_demand=pd_, peak_utility=1.0)
             for w in (4.0, 10.0)]
    c = constants_from(terms, horizon=100, worker_capacity=1000.0, ps_capacity=1000.0, min_fraction=1e-3)
    eta = 1.0 / (4.0 * 21.0 / (100 * 1000.0))
    assert c.L1 == pytest.approx(1e-3 / (10.0 * 21.0) / (4 * eta))
    assert c.L1 > 1e-20 and c.alpha < 50
    literal = constants_from(terms, horizon=100, worker_capacity=1000.0, ps_capacity=1000.0, min_fraction=0.0)
    assert literal.L1 == pytest.approx(max(L_FLOOR, 1e-40 / (10.0 * 21.0) / (4 * eta)))


def _market(wprice, wcap):
    wprice, wcap = np.asarray(wprice, float), np.asarray(wcap)
    return Market(wprice, wcap, np.zeros((wprice.shape[0], 1)), np.full((wprice.shape[0], 1), 10**9))


def test_vectorised_rigid_costs_match_slot_costs():
    rng = np.random.default_rng(3)
    m = _market(rng.uniform(0.1, 2.0, (12, 5)), rng.integers(0, 4, (12, 5)))
    for w in (1, 3, 7, 30):
        loop = np.array([slot_costs(m, t, np.array([w]), np.array([0]))[0] for t in range(m.slots)])
        assert np.allclose(rigid_costs(m, w, 0), loop, equal_nan=True)
        assert (np.isinf(rigid_costs(m, w, 0)) == np.isinf(loop)).all()


def test_a_gang_that_fits_one_server_is_not_split():
    """Two cheap servers with 2 free each and a dearer one with 4: the greedy of Theorem 1 splits a
    4-worker gang over the cheap two; on measured curves that runs slower than planned."""
    m = _market([[0.1, 0.1, 0.5]], [[2, 2, 4]])
    s = best_rigid_schedule(m, np.array([1.0]), workers=4, ps=0, slots_needed=1)
    assert s.feasible and np.count_nonzero(s.workers[0]) == 1 and s.workers[0][2] == 4
    assert s.cost == pytest.approx(4 * 0.5)


def test_elastic_sizes_never_exceed_the_request():
    spec = JobSpec("e", 0.0, iterations=100.0, duration=100.0, num_workers=8, min_workers=1, max_workers=64)
    assert candidate_sizes(spec) == [1, 2, 4, 8]
    spec = JobSpec("e", 0.0, iterations=100.0, duration=100.0, num_workers=6, min_workers=3, max_workers=16)
    assert candidate_sizes(spec) == [3, 4, 6]


def test_oracle_plans_an_elastic_job_at_a_smaller_size_when_its_true_speed_allows():
    """One 8-GPU node, 4 GPUs committed to a first job for 3 slots. A second job asks for 8 GPUs but
    runs at 4 at 90% of its speed (a flat curve): planning it at 4 now finishes before waiting
    for all 8; the rigid plan could not start until slot 3."""

    class Flat(DurationOnly):
        def rate(self, spec, alloc, cluster):
            w = alloc.num_workers
            return 0.0 if w == 0 else (1.0 if spec.job_id == "a" else min(1.0, 0.9 * w / 4 if w < 4 else 0.9 + 0.1 * (w - 4) / 4))

    cluster = Cluster.homogeneous("c", nodes=1, gpus=8, cpus=64, mem=512)
    a = JobSpec("a", 0.0, iterations=300.0, duration=300.0, num_workers=4)
    b = JobSpec("b", 10.0, iterations=300.0, duration=300.0, num_workers=8, min_workers=1, max_workers=8)
    jobs, _ = with_default_utilities([a, b])
    pol = OASiS(slot_seconds=100.0, horizon=50, work_conserving=False)  # the plan alone, as committed
    res = simulate(jobs, cluster, Oracle(pol), Flat(), SimConfig(restart_overhead=0))
    assert {a.num_workers for a in pol.plans["b"].values()} == {4}
    assert min(pol.plans["b"]) == 1  # starts in the next slot, beside job a
    assert res.jobs.set_index("job_id").loc["b", "status"] == "done"


def test_a_plan_for_a_later_slot_starts_on_time_on_an_idle_cluster():
    """The simulator skips idle time to the next arrival when nothing runs; OASiS asks to be woken
    at the next committed start so a waiting plan is not delayed to someone else's arrival."""
    cluster = Cluster.homogeneous("c", nodes=1, gpus=4, cpus=32, mem=128)
    jobs = [JobSpec("a", 0.0, iterations=250.0, duration=250.0, num_workers=4, work_known=True),
            JobSpec("b", 50.0, iterations=100.0, duration=100.0, num_workers=4, work_known=True),
            JobSpec("c", 10000.0, iterations=100.0, duration=100.0, num_workers=1, work_known=True)]
    jobs, _ = with_default_utilities(jobs)
    # the plan alone, as committed, at the paper's near-free prices (b is worth 0.25% by then)
    pol = OASiS(slot_seconds=100.0, horizon=50, work_conserving=False, prices="paper")
    res = simulate(jobs, cluster, pol, DurationOnly(), SimConfig(restart_overhead=0))
    assert min(pol.plans["b"]) == 3  # after a's three slots
    assert res.jobs.set_index("job_id").loc["b", "start"] == pytest.approx(300.0)


def _late(pol: OASiS, rows, admitted: list[dict], slot: float) -> list[str]:
    """Admitted jobs that ended after the end of their planned completion slot."""
    return [d["job_id"] for d in admitted if rows.loc[d["job_id"], "end"] > pol.origin + (d["completion_slot"] + 1) * slot + 1e-6]


def test_admitted_trace_jobs_on_measured_curves_finish_as_planned():
    """The embedded ITP slice on measured curves (first 80 jobs, 10 s restarts): every admitted job
    ends by the end of its planned completion slot, so its realised utility is at least the planned."""
    from dlsched.presets import load_cluster
    from dlsched.throughput.registry import default_throughput
    from dlsched.traces import default_workload

    jobs, _ = with_default_utilities(default_workload(measured=True).jobs[:80])
    slot, horizon = workload_slots(jobs)
    pol = OASiS(slot_seconds=slot, horizon=horizon)
    res = simulate(jobs, load_cluster("itp-small"), Oracle(pol), default_throughput(None), SimConfig(restart_overhead=10))
    rows = res.jobs.set_index("job_id")
    admitted = [d for d in pol.decisions if d["admitted"]]
    assert len(admitted) >= 70
    assert not _late(pol, rows, admitted, slot)


def test_long_windows_planned_in_blocks_still_finish_as_planned(monkeypatch):
    """With MAX_PLAN_SLOTS lowered so that most windows of the embedded slice are planned in
    blocks of slots (`OASiS._step`): every admitted job still ends by the end of its planned
    completion slot, and admission stays near the per-slot plans' (a block is priced at its fullest
    slot: never cheaper than its slots)."""
    import dlsched.policies.oasis as oasis_module
    from dlsched.presets import load_cluster
    from dlsched.throughput.registry import default_throughput
    from dlsched.traces import default_workload

    jobs, _ = with_default_utilities(default_workload(measured=True).jobs[:80])
    slot, horizon = workload_slots(jobs)

    def run(max_slots: int):
        monkeypatch.setattr(oasis_module, "MAX_PLAN_SLOTS", max_slots)
        pol = OASiS(slot_seconds=slot, horizon=horizon)
        steps: dict[str, int] = {}
        original = pol._step
        pol._step = lambda n, spec: steps.setdefault(spec.job_id, original(n, spec))
        res = simulate(jobs, load_cluster("itp-small"), Oracle(pol), default_throughput(None), SimConfig(restart_overhead=10))
        return pol, steps, res.jobs.set_index("job_id")

    per_slot, steps_1, _ = run(10**9)
    pol, steps, rows = run(40)
    assert set(steps_1.values()) == {1}
    blocked = {j: k for j, k in steps.items() if k > 1}
    assert len(blocked) >= 20
    admitted = [d for d in pol.decisions if d["admitted"]]
    assert not _late(pol, rows, admitted, slot)
    assert len(admitted) >= len([d for d in per_slot.decisions if d["admitted"]]) - 3


@pytest.mark.parametrize("revise", [False, True])
def test_revision_moves_a_long_commitment_for_a_short_arrival(revise: bool):
    """A 10 h job holds the node's next slots (committed at once: defer=1); a 0.5 h job arrives
    an hour later. As in the paper, OASiS turns it away (no room until its utility is gone). With
    `revise`, the long job's commitments move 3 slots later (it loses 0.4% of its utility), the
    short job runs at once, and both end by the end of their (updated) planned completion slots."""
    cluster = Cluster.homogeneous("c", nodes=1, gpus=8, cpus=64, mem=256)
    jobs = [JobSpec("long", 0.0, iterations=36000.0, duration=36000.0, num_workers=8, work_known=True),
            JobSpec("short", 3600.0, iterations=1800.0, duration=1800.0, num_workers=2, work_known=True)]
    jobs, _ = with_default_utilities(jobs)
    pol = OASiS(slot_seconds=600.0, horizon=200, defer=1.0, revise=revise)
    res = simulate(jobs, cluster, pol, DurationOnly(), SimConfig(restart_overhead=0))
    rows = res.jobs.set_index("job_id")
    admitted = {d["job_id"]: d for d in pol.decisions if d["admitted"]}
    if not revise:
        assert set(admitted) == {"long"} and rows.loc["short", "status"] == "rejected"
        return
    assert set(admitted) == {"long", "short"} and admitted["long"]["moved"] == 1
    assert admitted["short"]["displaced"] == ["long"]
    assert rows.loc["short", "end"] - 3600.0 == pytest.approx(1800.0)  # from the next slot, at once
    assert rows.loc["long", "end"] == pytest.approx(36000.0 + 1800.0)  # three slots later
    assert not _late(pol, rows, list(admitted.values()), 600.0)


@pytest.mark.parametrize("horizon", [62, 63])
def test_revision_never_moves_a_commitment_past_a_fixed_horizon(horizon: int):
    """With `rolling=False` every plan ends by slot T, a moved one too: the long job of the test
    above, moved 3 slots later, would end at slot 63, so with T = 62 it is not moved and the short
    job is turned away; with T = 63 the move fits."""
    cluster = Cluster.homogeneous("c", nodes=1, gpus=8, cpus=64, mem=256)
    jobs = [JobSpec("long", 0.0, iterations=36000.0, duration=36000.0, num_workers=8, work_known=True),
            JobSpec("short", 3600.0, iterations=1800.0, duration=1800.0, num_workers=2, work_known=True)]
    jobs, _ = with_default_utilities(jobs)
    pol = OASiS(slot_seconds=600.0, horizon=horizon, rolling=False, defer=1.0)
    rows = simulate(jobs, cluster, pol, DurationOnly(), SimConfig(restart_overhead=0)).jobs.set_index("job_id")
    admitted = {d["job_id"]: d for d in pol.decisions if d["admitted"]}
    if horizon == 62:
        assert set(admitted) == {"long"} and "moved" not in admitted["long"]
        assert rows.loc["short", "status"] == "rejected" and rows.loc["long", "end"] == pytest.approx(36000.0)
    else:
        assert set(admitted) == {"long", "short"} and admitted["long"]["moved"] == 1
        assert rows.loc["long", "end"] == pytest.approx(horizon * 600.0)
    assert all(d["completion_slot"] < horizon for d in admitted.values())


def test_a_job_after_a_fixed_horizon_is_turned_away_with_the_reason():
    """With `rolling=False` a job arriving after slot T has no window at all: turned away with
    that reason (revision has nothing to plan in)."""
    cluster = Cluster.homogeneous("c", nodes=1, gpus=4, cpus=32, mem=128)
    jobs, _ = with_default_utilities([JobSpec("early", 0.0, iterations=100.0, duration=100.0, work_known=True),
                                      JobSpec("late", 1000.0, iterations=100.0, duration=100.0, work_known=True)])
    pol = OASiS(slot_seconds=100.0, horizon=3, rolling=False)
    rows = simulate(jobs, cluster, pol, DurationOnly(), SimConfig(restart_overhead=0)).jobs.set_index("job_id")
    assert rows.loc["early", "status"] == "done" and rows.loc["late", "status"] == "rejected"
    assert "after the horizon" in rows.loc["late", "reason"]
