"""Utilities, OASiS' speed model and the paper-setup workload generator."""

import math

import numpy as np
import pytest

from dlsched.paths import traces_dir

from dlsched.core.allocation import Allocation
from dlsched.core.errors import ConfigError
from dlsched.core.utility import (
    SigmoidUtility, UtilityClass, classify, from_duration, sample_utility, sigmoid_in_slots,
    time_critical, time_insensitive, time_sensitive,
)
from dlsched.throughput.oasis_model import OASiSModel, minibatch_seconds
from dlsched.traces.oasis_workload import oasis_workload, paper_cluster


def test_sigmoid_in_slots_is_the_papers_f_of_slots():
    u = sigmoid_in_slots(40.0, 2.0, 5.0, slot_seconds=600.0)
    for slots in (0.0, 3.0, 5.0, 7.5):
        assert u(slots * 600.0) == pytest.approx(40.0 / (1.0 + math.exp(2.0 * (slots - 5.0))))
    assert u(5 * 600.0) == pytest.approx(20.0)  # half the priority at the target
    assert u.many(np.array([0.0, 3000.0])) == pytest.approx([u(0.0), u(3000.0)])


def test_classes_and_their_ranges():
    assert time_insensitive(10.0)(1e9) == pytest.approx(5.0)
    assert classify(time_sensitive(10.0, 4.0, 0.5, 60.0), 60.0) is UtilityClass.SENSITIVE
    assert classify(time_critical(10.0, 4.0, 5.0, 60.0), 60.0) is UtilityClass.CRITICAL
    assert classify(time_insensitive(10.0, 60.0), 60.0) is UtilityClass.INSENSITIVE
    assert classify(lambda t: 1.0, 60.0) is None
    with pytest.raises(ConfigError):
        time_critical(10.0, 4.0, decay_per_slot=1.0)
    with pytest.raises(ConfigError):
        SigmoidUtility(1.0, -1.0, 0.0)  # would increase with time
    rng = np.random.default_rng(0)
    for cls in UtilityClass:
        u = sample_utility(rng, cls, 3600.0)
        assert classify(u, 3600.0) is cls
        assert 1.0 <= u.gamma1 <= 100.0 and 1.0 <= u.gamma3 / 3600.0 <= 15.0


def test_duration_default_utility():
    u = from_duration(1000.0)
    assert u(2000.0) == pytest.approx(0.5)
    assert u(0.0) > 0.99 and u(3000.0) < 0.02
    with pytest.raises(ConfigError):
        from_duration(0.0)


@pytest.mark.skipif(traces_dir() is None, reason="the paper workload needs the Google arrival pattern from ../shared/traces/dl2")
def test_async_ps_speed_is_linear_in_workers_and_capped_by_ps_bandwidth():
    jobs = oasis_workload(3, seed=1)
    j = jobs[0]
    t = minibatch_seconds(j.extra)
    assert t == pytest.approx(j.extra["tau_s"] + 2 * j.extra["grad_mb"] * 8 / 1000 / j.extra["worker_gbps"])
    m = OASiSModel()
    c = paper_cluster()
    many_ps = Allocation.of({0: (4, 0), 60: (0, 4)})
    assert m.rate(j, many_ps, c) == pytest.approx(4 / t)
    # one PS of bandwidth B carries only B/b workers' traffic
    one_ps = Allocation.of({0: (40, 0), 60: (0, 1)})
    expect = min(40, j.extra["ps_gbps"] / j.extra["worker_gbps"]) / t
    assert m.rate(j, one_ps, c) == pytest.approx(expect)
    assert m.supports(j) and not m.supports(oasis_workload(1)[0].__class__(job_id="x", submit_time=0, iterations=1))


@pytest.mark.skipif(traces_dir() is None, reason="the paper workload needs the Google arrival pattern from ../shared/traces/dl2")
def test_workload_matches_the_papers_ranges_and_mix():
    jobs = oasis_workload(600, seed=3)
    ex = [j.extra for j in jobs]
    assert all(50 <= e["epochs"] <= 200 and 5 <= e["chunks"] <= 100 and 10 <= e["minibatches"] <= 100 for e in ex)
    assert all(30 <= e["grad_mb"] <= 575 and 0.1 <= e["worker_gbps"] <= 5 and 5 <= e["ps_gbps"] <= 20 for e in ex)
    assert all(j.iterations == e["epochs"] * e["chunks"] * e["minibatches"] for j, e in zip(jobs, ex))
    assert all(1 <= j.num_workers <= 30 and j.num_ps <= j.num_workers and j.work_known for j in jobs)
    share = {c: sum(e["utility_class"] == c.value for e in ex) / len(ex) for c in UtilityClass}
    assert share[UtilityClass.INSENSITIVE] == pytest.approx(0.10, abs=0.04)
    assert share[UtilityClass.SENSITIVE] == pytest.approx(0.55, abs=0.05)
    assert share[UtilityClass.CRITICAL] == pytest.approx(0.35, abs=0.05)
    arrivals = np.array([j.submit_time for j in jobs]) / 3600.0
    assert arrivals.min() >= 0 and arrivals.max() < 200 and (arrivals == np.round(arrivals)).all()
    # the Google pattern's burst: its second of 75 slots holds far more than 1/75 of the jobs
    burst = ((arrivals >= 200 / 75) & (arrivals < 2 * 200 / 75 + 1)).mean()
    assert burst > 5 / 75
    assert oasis_workload(5, seed=3)[0].extra == oasis_workload(5, seed=3)[0].extra


def test_cluster_pools_and_bad_input():
    c = paper_cluster()
    assert c.num_nodes == 100 and (c.capacity[:50, 0] > 0).all() and (c.capacity[50:, 0] == 0).all()
    assert (paper_cluster(shared=True).capacity[:, 0] > 0).all()
    with pytest.raises(ConfigError):
        oasis_workload(0)
    with pytest.raises(ConfigError):
        oasis_workload(10, mix=(1.0, -1.0, 0.0))


@pytest.mark.skipif(traces_dir() is None, reason="the paper workload needs the Google arrival pattern from ../shared/traces/dl2")
def test_oasis_experiment_cells_on_ray_equal_the_cells_run_in_process(tmp_path):
    """Fig. 3 (with OASiS' decisions), Fig. 4 (every job), a variant and a real-trace run: the same
    rows and tables one by one here and as two Ray workers (wall times aside)."""
    from dlsched.experiments.oasis import OasisCell, OasisTraceCell, fig3_cells, fig4_cells
    from dlsched.sweep.runner import run_cells
    from dlsched.sweep.store import ResultsStore
    from tests.sweep_equal import assert_same_cells

    cells = [*fig3_cells([16], [1], horizon=40, policies=("oasis", "dorm")),
             *fig4_cells([0], policies=("oasis",)),
             OasisCell(16, 1, 40, "oasis", options={"scale": 5.0}, restart_overhead=600.0, label="oasis scale=5"),
             OasisTraceCell(str(traces_dir() / "elasticflow-itp/elasticflow/195job.csv"), 20, 0, "oasis")]
    alone, on_ray = ResultsStore(tmp_path / "alone"), ResultsStore(tmp_path / "ray")
    run_cells(cells, alone)
    run_cells(cells, on_ray, workers=2)
    assert_same_cells(cells, alone, on_ray, wall=("wall_seconds", "decision_seconds"))
    assert alone.jobs(cells[0]) is not None and len(alone.jobs(cells[2])) == 200  # decisions; Fig. 4's jobs
