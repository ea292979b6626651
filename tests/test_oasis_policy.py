"""The OASiS policy in the simulator: admission by payoff, committed plans within capacity and
executed as committed, shared pools, trace jobs; plus the RRH and Dorm baselines."""

import numpy as np
import pytest

from dlsched.paths import traces_dir

from dlsched.core.errors import ConfigError
from dlsched.core.policy import Oracle
from dlsched.core.job import JobSpec
from dlsched.core.utility import SigmoidUtility, sigmoid_in_slots
from dlsched.policies.oasis import OASiS, profile
from dlsched.policies.oasis_prices import PriceConstants
from dlsched.policies.registry import make_policy
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.oasis_model import MODEL_KEY, OASiSModel, minibatch_seconds
from dlsched.traces.oasis_workload import oasis_workload, paper_cluster

SLOT = 3600.0
CFG = SimConfig(restart_overhead=0, max_time=60 * SLOT)


def _job(jid, submit_slot=0, utility=None, epochs=4, chunks=6, minibatches=20):
    extra = dict(epochs=epochs, chunks=chunks, minibatches=minibatches, tau_s=0.05, grad_mb=100.0,
                 worker_gbps=1.0, ps_gbps=10.0)
    return JobSpec(
        job_id=jid, submit_time=submit_slot * SLOT, iterations=float(epochs * chunks * minibatches),
        num_workers=2, min_workers=1, max_workers=chunks, arch="ps", num_ps=1, min_ps=1, max_ps=chunks,
        model=MODEL_KEY, worker_demand=(1.0, 4.0, 8.0), ps_demand=(0.0, 2.0, 4.0), work_known=True,
        utility=utility or sigmoid_in_slots(50.0, 0.5, 3.0, SLOT), extra=extra,
    )


def _small_cluster():
    return paper_cluster(worker_servers=2, ps_servers=1, seed=1)


def _oasis(**kw):
    return OASiS(slot_seconds=SLOT, horizon=40, rolling=False, **kw)


def test_profile_follows_the_paper_work_model():
    j = _job("a", epochs=10, chunks=5, minibatches=100)
    t = minibatch_seconds(j.extra) / SLOT
    p = profile(j, SLOT, max_units=1000)
    assert len(p.workers_for) == 10 * 5 + 1  # one unit per chunk when E N <= max_units
    assert p.workers_for[3] == int(np.ceil(3 * 100 * t - 1e-9))
    assert p.fastest_slots == int(np.ceil(10 * 100 * t - 1e-9))
    # bandwidth coupling: ceil(w b / B) PSs, at least one
    w = p.workers_for[p.workers_for > 0]
    assert (p.ps_for[p.workers_for > 0] == np.maximum(1, np.ceil(w * 0.1 - 1e-9))).all()


def test_payoff_not_positive_means_rejected_with_the_payoff():
    # prices so high at zero load that no schedule can pay: every job is rejected, reason names the payoff
    dear = PriceConstants(U1=np.array([1e6, 1e6, 1e6]), L1=1e5, U2=np.array([0.0, 1e6, 1e6]), L2=1e5)
    pol = _oasis(constants=dear)
    res = simulate([_job("a"), _job("b", 1)], _small_cluster(), pol, OASiSModel(), CFG)
    assert (res.jobs.status == "rejected").all()
    assert res.jobs.reason.str.contains("payoff").all()
    assert all(d["payoff"] <= 0 and not d["admitted"] for d in pol.decisions)
    assert res.summary["total_utility"] == 0.0


def test_zero_utility_job_is_rejected_and_valuable_one_admitted():
    pol = _oasis()
    worthless = _job("zero", utility=SigmoidUtility(0.0, 0.0, 0.0))
    res = simulate([_job("good"), worthless], _small_cluster(), pol, OASiSModel(), CFG)
    st = dict(zip(res.jobs.job_id, res.jobs.status))
    assert st["good"] == "done" and st["zero"] == "rejected"
    d = {x["job_id"]: x for x in pol.decisions}
    assert d["good"]["payoff"] > 0 and d["zero"]["payoff"] <= 0


@pytest.mark.skipif(traces_dir() is None, reason="the paper workload needs the Google arrival pattern from ../shared/traces/dl2")
@pytest.mark.parametrize("shared", [False, True])
def test_committed_schedules_never_exceed_capacity_and_run_as_committed(shared):
    cluster = paper_cluster(worker_servers=4, ps_servers=2, seed=3, shared=shared)
    jobs = oasis_workload(25, seed=5, arrival_slots=10)
    pol = OASiS(slot_seconds=SLOT, horizon=60, rolling=False, pools="shared" if shared else "auto", release=False)
    res = simulate(jobs, cluster, pol, OASiSModel(), SimConfig(restart_overhead=0, max_time=60 * SLOT))
    assert pol.shared is shared
    # the price/usage table never exceeds capacity, on any node, resource or slot
    assert (pol.table.used <= cluster.capacity[None] + 1e-6).all()
    # and it is exactly what the committed allocations add up to
    recount = np.zeros_like(pol.table.used)
    specs = {j.job_id: j for j in jobs}
    for jid, slots in pol.plans.items():
        s = specs[jid]
        for t, a in slots.items():
            recount[t, list(a.nodes)] += np.outer(a.workers, s.worker_demand) + np.outer(a.ps, s.ps_demand)
    assert np.allclose(recount, pol.table.used)
    if not shared:  # split pools: workers only on GPU servers, PSs only on the others
        gpu = cluster.capacity[:, 0] > 0
        for slots in pol.plans.values():
            for a in slots.values():
                for n, w, p in zip(a.nodes, a.workers, a.ps):
                    assert (w == 0 or gpu[n]) and (p == 0 or not gpu[n])
    # executed as committed: every admitted job finishes by the end of its planned completion slot
    admitted = [d for d in pol.decisions if d["admitted"]]
    assert admitted and len(admitted) < len(jobs) + 1
    ends = dict(zip(res.jobs.job_id, res.jobs.end))
    for d in admitted:
        assert ends[d["job_id"]] <= (d["completion_slot"] + 1) * SLOT + 1e-6
        assert res.jobs.set_index("job_id").loc[d["job_id"], "utility"] >= d["utility"] - 1e-9


def _trace_jobs(declared: bool) -> list[JobSpec]:
    return [
        JobSpec(job_id=f"t{i}", submit_time=i * 100.0, iterations=d, duration=d, num_workers=w, work_known=declared)
        # durations of a slot or more: a 100 s job cannot be worth anything by the end of a 1 h slot
        # (target 2x its duration), and OASiS rejects a job worth < l_min_fraction of its peak
        for i, (d, w) in enumerate([(5000.0, 2), (7000.0, 4), (4000.0, 8), (9000.0, 1)])
    ]


@pytest.mark.parametrize("declared", [True, False])
def test_trace_jobs_get_a_duration_utility_and_rigid_plans(declared):
    """Declared work is planned as is; undeclared work only by OASiS run as an oracle."""
    from dlsched.core.cluster import Cluster
    from dlsched.throughput.duration_only import DurationOnly

    cluster = Cluster.homogeneous("c", nodes=2, gpus=4, cpus=32, mem=128)
    kw = dict(slot_seconds=600.0, horizon=50, work_conserving=False)  # plans as committed, not run early
    pol = OASiS(**kw) if declared else Oracle(OASiS(**kw))
    res = simulate(_trace_jobs(declared), cluster, pol, DurationOnly(), SimConfig(restart_overhead=0))
    assert set(res.jobs.status) <= {"done", "rejected"}
    assert (res.jobs.status == "done").sum() >= 3
    # the 7000 s job needs 12 slots of its 4-GPU gang
    assert len(pol.plans["t1"]) == 12 and all(a.num_workers == 4 for a in pol.plans["t1"].values())


@pytest.mark.parametrize("name", ["oasis", "rrh"])
def test_undeclared_work_is_rejected_unless_run_as_an_oracle(name):
    """OASiS and RRH need the work up front; a job that declares none is not planned from the
    simulator's truth unless the policy is an oracle."""
    from dlsched.core.cluster import Cluster
    from dlsched.throughput.duration_only import DurationOnly

    cluster = Cluster.homogeneous("c", nodes=2, gpus=4, cpus=32, mem=128)
    honest = simulate(_trace_jobs(False), cluster, make_policy(name), DurationOnly(), SimConfig(restart_overhead=0))
    assert (honest.jobs.status == "rejected").all()
    assert honest.jobs.reason.str.contains("declares no work").all()
    oracle = make_policy(name, oracle=True)
    assert oracle.oracle and oracle.name == name
    ran = simulate(_trace_jobs(False), cluster, oracle, DurationOnly(), SimConfig(restart_overhead=0))
    assert (ran.jobs.status == "done").sum() >= 3


def test_bad_options_are_config_errors():
    with pytest.raises(ConfigError):
        make_policy("oasis", pools="everywhere")
    with pytest.raises(ConfigError):
        make_policy("oasis", scale=0)
    with pytest.raises(ConfigError):
        make_policy("dorm", kappa=0)
    with pytest.raises(ConfigError):
        make_policy("rrh", placement="nowhere")


@pytest.mark.skipif(traces_dir() is None, reason="the paper workload needs the Google arrival pattern from ../shared/traces/dl2")
@pytest.mark.parametrize("name", ["rrh", "dorm", "fifo", "drf"])
def test_baselines_run_the_paper_workload_within_capacity(name):
    jobs = oasis_workload(20, seed=2, arrival_slots=8)
    cluster = paper_cluster(worker_servers=4, ps_servers=2, seed=3)
    res = simulate(jobs, cluster, make_policy(name), OASiSModel(), SimConfig(restart_overhead=0, max_time=60 * SLOT))
    assert res.summary["finished"] > 0  # the engine validated every plan against capacity
    assert res.summary["total_utility"] > 0
    if name in ("fifo", "dorm", "drf"):
        assert res.summary["rejected"] == 0  # these admit every job


def test_rrh_rejects_a_job_worth_nothing():
    jobs = [_job("good"), _job("zero", utility=SigmoidUtility(0.0, 0.0, 0.0))]
    res = simulate(jobs, _small_cluster(), make_policy("rrh"), OASiSModel(), CFG)
    st = dict(zip(res.jobs.job_id, res.jobs.status))
    assert st == {"good": "done", "zero": "rejected"}


def test_dorm_milp_respects_fairness_cap():
    # 3 identical jobs on 2 servers of 8 GPUs: an equal share is 16/3 GPUs; theta=0 caps each at 5 workers
    jobs = [_job(f"j{i}", epochs=50, chunks=40) for i in range(3)]
    cluster = paper_cluster(worker_servers=2, ps_servers=2, seed=0)
    pol = make_policy("dorm", theta=0.0)
    pol.reset(cluster, 0)
    from dlsched.core.snapshot import Clock, JobState, JobStatus

    states = [JobState(spec=j, index=i, clock=Clock(), rank=i, status=JobStatus.PENDING) for i, j in enumerate(jobs)]
    counts = pol._counts(states)
    gpus = cluster.capacity[:, 0].sum()
    for w, p in counts.values():
        assert 1 <= w <= np.floor(gpus / 3 + 1e-9)
        assert p >= np.ceil(w * 0.1 - 1e-9) and p <= w
    assert sum(w for w, _ in counts.values()) <= gpus


def test_a_job_finishing_early_gives_back_its_later_slots():
    pol = _oasis()
    simulate([_job("a", epochs=200, chunks=6, minibatches=100)], _small_cluster(), pol, OASiSModel(), CFG)
    slots = sorted(pol.plans["a"])
    assert len(slots) >= 2
    before = pol.table.used.copy()
    pol._release_finished(slots[0], live={})  # as if it had finished during its first slot
    assert "a" not in pol.demands
    assert np.array_equal(pol.table.used[slots[0]], before[slots[0]])
    assert pol.table.used[slots[0] + 1:].sum() == 0.0 and before[slots[0] + 1:].sum() > 0


def test_value_order_decides_the_densest_of_simultaneous_arrivals_first():
    pol = _oasis(order="value")
    cheap = _job("dense", utility=sigmoid_in_slots(90.0, 0.5, 3.0, SLOT))
    poor = _job("sparse", utility=sigmoid_in_slots(5.0, 0.5, 3.0, SLOT))
    simulate([poor, cheap], _small_cluster(), pol, OASiSModel(), CFG)
    assert [d["job_id"] for d in pol.decisions] == ["dense", "sparse"]
