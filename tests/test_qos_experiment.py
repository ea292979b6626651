"""The QoS evaluation's own measurements: utilization of allocated resources and prediction error."""

from __future__ import annotations

import math

import pytest

from dlsched.experiments.qos import _time_average
from dlsched.experiments.qos_metrics import (
    PlanRecorder, allocated_utilization, error_summary, fastest_alone, prediction_errors,
)
from dlsched.paths import traces_dir
from dlsched.policies.registry import make_policy
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.registry import default_throughput
from dlsched.traces.qos_synthetic import qos_cluster, qos_job, qos_workload

TP = default_throughput(traces_dir())


def test_one_job_without_restarts_uses_its_allocation_fully():
    rec = PlanRecorder(make_policy("edf"))
    cfg = SimConfig(restart_overhead=10.0)
    res = simulate([qos_job("a", 0.0, 1800.0, "gan")], qos_cluster(4), rec, TP, cfg)
    assert allocated_utilization(rec, res, cfg, resource=1) == pytest.approx(1.0)


def test_start_up_pause_is_allocated_but_not_productive():
    rec = PlanRecorder(make_policy("edf"))
    cfg = SimConfig(startup_overhead=100.0)
    res = simulate([qos_job("a", 0.0, 1800.0, "gan")], qos_cluster(4), rec, TP, cfg)
    jct = float(res.jobs.jct.iloc[0])
    assert allocated_utilization(rec, res, cfg, resource=1) == pytest.approx((jct - 100.0) / jct)


def test_known_work_predictions_are_exact_when_the_job_is_not_resized():
    w = qos_workload(8, mean_interarrival=200.0, seed=2)
    rec = PlanRecorder(make_policy("qos", autoscale=False))
    res = simulate(w.jobs, qos_cluster(8), rec, TP)
    df = prediction_errors(list(rec.inner.sizing.predictions.values()), res, rec)
    assert len(df) and df.kept.all()
    s = error_summary(df)
    assert s["predictions_kept"] == len(df)
    assert s["p90_ape"] < 1e-6 and s["coverage"] == 1.0


def test_resized_jobs_are_excluded_from_the_error():
    w = qos_workload(8, mean_interarrival=200.0, seed=2)
    rec = PlanRecorder(make_policy("kube-autoscale"))
    res = simulate(w.jobs, qos_cluster(40), rec, TP)
    df = prediction_errors(list(rec.inner.sizing.predictions.values()), res, rec)
    assert (~df.kept).any()  # the autoscaler acted on its own predictions
    assert error_summary(df)["p90_ape"] < 1e-6  # the rest finished as predicted


def test_every_synthetic_deadline_is_feasible_alone():
    big = qos_cluster(60)
    for kind in ("lstm", "gan", "autoencoder"):
        assert fastest_alone(qos_job("x", 0.0, 600.0, kind), big, TP) < 600.0


def test_time_average_of_a_step_function():
    assert _time_average([(0.0, 2.0), (5.0, -2.0)], 0.0, 10.0) == pytest.approx(1.0)
    assert math.isclose(_time_average([(0.0, 4.0), (20.0, -4.0)], 0.0, 10.0), 4.0)


def test_experiment_cells_on_ray_equal_the_cells_run_in_process(tmp_path):
    """(scenario, resource level, policy) cells of a small synthetic workload and an ITP slice: the
    same rows and prediction tables one by one here and as two Ray workers."""
    from dlsched.experiments.qos import QosCell, ScenarioSource, cluster_sizes
    from dlsched.sweep.runner import run_cells
    from dlsched.sweep.store import ResultsStore
    from tests.sweep_equal import assert_same_cells

    sources = [ScenarioSource("synthetic", synthetic_jobs=8, seed=2)]
    root = traces_dir()
    if root is not None:
        sources.append(ScenarioSource("itp-195job", path=str(root / "elasticflow-itp/elasticflow/195job.csv"), limit=12))
    cells = []
    for src in sources:
        low, high = cluster_sizes(src.build(), TP)
        cells += [QosCell(src, level, nodes, p, seed=0, restart_overhead=10.0)
                  for level, nodes in (("insufficient", low), ("sufficient", high)) for p in ("kube-default", "qos")]
    alone, on_ray = ResultsStore(tmp_path / "alone"), ResultsStore(tmp_path / "ray")
    run_cells(cells, alone)
    run_cells(cells, on_ray, workers=2)
    assert_same_cells(cells, alone, on_ray)
    assert any(alone.jobs(c) is not None for c in cells)  # the predictions of qos
