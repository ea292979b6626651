"""The fidelity check's pieces: the live-measured speed table, the workload, the simulator replay,
and one small real run end to end."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.experiments.fidelity import fidelity_workload, run_fidelity, simulate_like
from dlsched.live.spec import TrainJob
from dlsched.live.workload_run import Arrival, LiveJobResult, LiveRun
from dlsched.throughput.measured_live import MeasuredThroughput, read_rates


def _log(job_dir: Path, records: list[dict]) -> Path:
    job_dir.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in records] + ['{"event": "progress", "steps_p']  # a torn last line
    (job_dir / "progress.jsonl").write_text("\n".join(lines))
    return job_dir


def _progress(rate: float, workers: int, ps: int = 0) -> dict:
    return {"event": "progress", "step": 10, "steps_per_s": rate, "workers": workers, "ps": ps}


def test_measured_table_is_the_median_per_size_and_ignores_other_records(tmp_path):
    a = _log(tmp_path / "a", [{"event": "start", "step": 1, "steps_per_s": 999, "workers": 1},
                              _progress(10, 1), _progress(12, 1), _progress(0, 1), _progress(30, 2)])
    b = _log(tmp_path / "b", [_progress(14, 1), _progress(-3, 2), {"event": "stop", "workers": 2}])
    assert read_rates(a, "mlp") == {("mlp", 1, 0): [10.0, 12.0], ("mlp", 2, 0): [30.0]}
    t = MeasuredThroughput.from_job_dirs({a: "mlp", b: "mlp", tmp_path / "absent": "cnn"})
    assert t.table == {("mlp", 1, 0): 12.0, ("mlp", 2, 0): 30.0}


def test_unmeasured_sizes_never_assume_an_unmeasured_speed_up_and_are_reported():
    t = MeasuredThroughput({("mlp", 1, 0): [10.0], ("mlp", 2, 0): [16.0]})
    cluster = Cluster.homogeneous("c", nodes=1, gpus=8, cpus=32, mem=64)
    spec = TrainJob(model="mlp", steps=100, workers=1, max_workers=8).job_spec("j", 0.0)
    assert t.supports(spec)
    assert t.rate(spec, Allocation.of({0: (2, 0)}), cluster) == 16.0
    assert t.missing == set()
    assert t.rate(spec, Allocation.of({0: (4, 0)}), cluster) == 16.0  # capped at the largest measured
    assert t.missing == {("mlp", 4, 0)}
    other = TrainJob(model="cnn", steps=100).job_spec("k", 0.0)
    wide = TrainJob(model="mlp", width=512, steps=100).job_spec("w", 0.0)
    assert not t.supports(other) and not t.supports(wide)  # another model size is another speed


def test_workload_is_seeded_spans_the_window_and_cycles_the_models():
    a = fidelity_workload(jobs=9, span_s=90.0, seed=3)
    assert a == fidelity_workload(jobs=9, span_s=90.0, seed=3)
    assert a != fidelity_workload(jobs=9, span_s=90.0, seed=4)
    assert a[0].at == 0.0 and a[-1].at == pytest.approx(90.0, abs=0.1)
    assert [x.at for x in a] == sorted(x.at for x in a)
    assert [x.job.model for x in a[:3]] == ["mlp", "cnn", "transformer"]
    assert all(x.job.min_workers == 1 and x.job.max_workers == 2 for x in a)
    small = fidelity_workload(jobs=3, seed=3, scale=0.01)
    assert all(10 <= x.job.steps < 500 for x in small)
    with pytest.raises(ValueError):
        fidelity_workload(jobs=0)


def test_replay_with_the_measured_speed_gives_the_expected_completion_times():
    """Two 100-step jobs at 10 steps/s on one slot, FIFO: 10 s and 20 s after the first arrival."""
    arrivals = [Arrival(0.0, TrainJob(model="mlp", steps=100)), Arrival(0.0, TrainJob(model="mlp", steps=100))]
    cluster = Cluster.homogeneous("c", nodes=1, gpus=1, cpus=2, mem=8)
    run = LiveRun("fifo", [LiveJobResult("job-000001", "mlp", 0.0, "done", 100, 100, 10.0, 0, Path("."))],
                  startups=[1.0])
    sim = simulate_like(run, arrivals, "fifo", cluster, MeasuredThroughput({("mlp", 1, 0): [10.0]}))
    jct = sorted(sim.jobs["jct"])
    assert jct == pytest.approx([11.0, 22.0])  # each pays the measured 1 s start-up


def test_a_small_live_run_is_replayed_and_reported(tmp_path):
    """Three real jobs (a few hundred steps) under FIFO: all finish live, the report has a finite gap."""
    rows = run_fidelity(["fifo"], tmp_path, jobs=3, span_s=4.0, seed=1, scale=0.02)
    (row,) = rows
    assert row.live_done == row.jobs == 3
    assert row.live_mean_jct > 0 and row.sim_mean_jct > 0 and math.isfinite(row.gap)
    assert row.median_startup is not None and row.median_decision_ms is not None
    with (tmp_path / "fidelity.csv").open() as f:
        (rec,) = list(csv.DictReader(f))
    assert rec["policy"] == "fifo" and float(rec["gap"]) == pytest.approx(row.gap)
    # FIFO runs every job at its requested single worker: every size the replay asks for was measured
    assert (tmp_path / "missing_rates.txt").read_text().strip() == ""


def test_a_run_too_short_for_a_progress_record_counts_at_its_mean_speed(tmp_path):
    d = _log(tmp_path / "short", [
        {"event": "start", "step": 1, "time": 100.0, "workers": 2, "ps": 0, "run": "a"},
        {"event": "checkpoint", "step": 201, "time": 100.5, "workers": 2, "ps": 0, "run": "a"},
        {"event": "done", "step": 201, "time": 100.5, "workers": 2, "ps": 0, "run": "a"},
        {"event": "start", "step": 1, "time": 200.0, "workers": 1, "ps": 0, "run": "b"},  # no later record
        {"event": "progress", "step": 50, "steps_per_s": 7.0, "workers": 1, "ps": 0, "run": "c"},
    ])
    assert read_rates(d, "mlp") == {("mlp", 2, 0): [400.0], ("mlp", 1, 0): [7.0]}
