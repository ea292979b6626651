"""OASiS on trace loads (issue: OASiS behind DRF on its own objective): prices on the scale of value
per resource-slot, constant-size plans committed late but run early in idle room, and plans
trimmed as a job gets ahead."""

import numpy as np
import pytest

from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.policy import Oracle
from dlsched.core.utility import from_duration, with_default_utilities
from dlsched.policies.oasis import OASiS
from dlsched.policies.oasis_jobs import best_rigid_schedule
from dlsched.policies.oasis_prices import JobTerms, density_constants
from dlsched.policies.oasis_schedule import Market
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.duration_only import DurationOnly


def _terms(f, work, wd):
    return JobTerms(fastest_utility=f, horizon_utility=0.0, work=work, worker_demand=np.array(wd, float),
                    ps_demand=np.zeros(3), peak_utility=f)


def test_density_constants_by_hand():
    """U^r = max f / (work w^r); L = min f / (work sum d) / 4."""
    c = density_constants([_terms(1.0, 4, [1, 4, 16]), _terms(0.5, 100, [2, 8, 32])])
    assert c.U1 == pytest.approx([1.0 / 4, 1.0 / 16, 1.0 / 64])
    assert c.L1 == pytest.approx(min(1.0 / (4 * 21), 0.5 / (100 * 42)) / 4)
    assert c.alpha == pytest.approx(np.log(0.25 / c.L1))


def _idle_market(slots, gpus=4):
    return Market(np.full((slots, 1), 1e-6), np.full((slots, 1), gpus), np.zeros((slots, 0)), np.zeros((slots, 0)))


def test_deferred_schedule_takes_the_latest_slots_that_keep_the_share_of_utility():
    f = from_duration(1000.0)  # value 1, target 2000 s
    slot = 100.0
    utilities = f.many((np.arange(40) + 1) * slot)
    m = _idle_market(40)
    early = best_rigid_schedule(m, utilities, 4, 0, 10)
    late = best_rigid_schedule(m, utilities, 4, 0, 10, defer=0.7)
    assert early.last_slot == 9 and np.flatnonzero(early.units).tolist() == list(range(10))
    # latest completion with utility >= 0.7 x the best, and the 10 slots right before it
    want = int(np.flatnonzero(utilities >= 0.7 * utilities[9])[-1])
    assert late.last_slot == want > 9
    assert np.flatnonzero(late.units).tolist() == list(range(want - 9, want + 1))
    assert late.utility >= 0.7 * early.utility and late.payoff > 0


def test_a_short_job_gets_in_beside_a_long_one_committed_late():
    """One 4-GPU node. A long job (1000 s) arrives first, a short one (200 s) at 150 s. Committed at
    once, the long job holds the node for its whole run and the short one, worth ~0 by then, is
    rejected; committed late it runs at once in idle room, gives way to the short job's
    commitment, and both finish with most of their value. Without revision (`revise=False`): with
    it the long job's commitment would move for the short one either way
    (`test_oasis_trace.py::test_revision_moves_a_long_commitment_for_a_short_arrival`)."""
    cluster = Cluster.homogeneous("c", nodes=1, gpus=4, cpus=32, mem=128)
    jobs, _ = with_default_utilities([JobSpec("long", 0.0, iterations=1000.0, duration=1000.0, num_workers=4),
                                      JobSpec("short", 150.0, iterations=200.0, duration=200.0, num_workers=4)])
    totals = {}
    for wc in (False, True):
        pol = OASiS(slot_seconds=100.0, horizon=60, work_conserving=wc, revise=False)
        res = simulate(jobs, cluster, Oracle(pol), DurationOnly(), SimConfig(restart_overhead=0)).jobs.set_index("job_id")
        totals[wc] = res.utility.sum()
        if wc:
            assert (res.status == "done").all()
            assert res.loc["long", "start"] == 0.0  # early, in room nothing committed
            assert res.loc["short", "end"] <= 400.0 + 1e-6
            assert (pol.table.used <= cluster.capacity[None] + 1e-6).all()
    assert totals[False] < 1.0 and totals[True] > 1.8


def test_a_job_ahead_of_its_plan_hands_back_its_last_slots():
    """Run early in idle room, a job's plan is trimmed to what its remaining work needs, and every
    admitted job still ends by its planned completion slot."""
    cluster = Cluster.homogeneous("c", nodes=2, gpus=4, cpus=32, mem=128)
    jobs, _ = with_default_utilities([JobSpec(f"j{i}", 40.0 * i, iterations=d, duration=d, num_workers=w)
                                      for i, (d, w) in enumerate([(900.0, 4), (700.0, 2), (1500.0, 4), (400.0, 2)])])
    pol = OASiS(slot_seconds=100.0, horizon=60)
    res = simulate(jobs, cluster, Oracle(pol), DurationOnly(), SimConfig(restart_overhead=0)).jobs.set_index("job_id")
    for d in pol.decisions:
        if d["admitted"]:
            jid = d["job_id"]
            assert res.loc[jid, "end"] <= (d["completion_slot"] + 1) * 100.0 + 1e-6
            need = int(np.ceil(jobs[int(jid[1:])].duration / 100.0))
            assert len(pol.plans[jid]) <= need + 1  # trimmed: no reserved slots beyond the work (+1 partial)
    assert (pol.table.used >= -1e-9).all()
