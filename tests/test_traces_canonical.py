"""dlsched's own CSV format (write/load round trip, validation) and the embedded default workload."""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest

from dlsched.core.job import JobSpec
from dlsched.core.utility import SigmoidUtility
from dlsched.paths import traces_dir
from dlsched.traces import Workload, default_workload, load_trace, trace_info, validate_trace, write_trace
from dlsched.traces import frame as frame_mod


def _fields(spec: JobSpec) -> dict:
    """A JobSpec's fields by name (JobSpec is slotted: no __dict__)."""
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}


def _jobs() -> list[JobSpec]:
    return [
        JobSpec("a", 0.0, 120.0, duration=120.0),
        JobSpec("b", 5.5, 3e6, num_workers=2, arch="ps", model="dl2:resnet-50", num_ps=2, max_workers=8,
                worker_demand=(1, 2, 4), ps_demand=(0, 2, 4), work_known=True, deadline=9000.0,
                utility=SigmoidUtility(3.0, 0.01, 4000.0), priority=-2, queue="q1", user="ann",
                gpu_type="V100", batch_size=256, extra={"epochs": 10, "tags": ["x", "y,z"]}),
        JobSpec("c", 7.0, 50.0, arch="single", model="gavel:A3C"),
    ]  # fmt: skip


def test_round_trip_is_exact(tmp_path):
    w = Workload("mine", _jobs(), "test", "itp-small", "me", dropped={"zero_gpus": 2}, notes=["n1"])
    path = tmp_path / "w.csv"
    assert write_trace(w, path) == []
    back = load_trace(path)
    assert (back.name, back.cluster, back.attribution, back.dropped, back.notes) == (
        "mine", "itp-small", "me", {"zero_gpus": 2}, ["n1"],
    )  # fmt: skip
    assert [_fields(j) for j in back.jobs] == [_fields(j) for j in w.jobs]


def test_unwritable_utility_is_reported(tmp_path):
    j = JobSpec("a", 0.0, 10.0, utility=lambda t: 1.0)
    warnings = write_trace(Workload("w", [j], "t", ""), tmp_path / "w.csv")
    assert len(warnings) == 1 and "not a SigmoidUtility" in warnings[0]


def test_minimal_user_trace_uses_jobspec_defaults(tmp_path):
    p = tmp_path / "mine.csv"
    p.write_text("job_id,submit_time,duration,num_workers\n007,10,3600,4\nx,0,60,1\n")
    w = load_trace(p)
    assert [j.job_id for j in w.jobs] == ["x", "007"]  # ids stay text; jobs in submit order
    j = w.jobs[1]
    assert (j.iterations, j.model, j.arch.value, j.num_workers, j.worker_demand) == (
        3600.0, "duration-only", "allreduce", 4, (1.0, 4.0, 16.0),
    )  # fmt: skip
    assert (w.name, w.cluster) == ("mine", "")


def test_canonical_validation(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text(
        "job_id,submit_time,iterations,duration,model,arch,num_workers,max_workers,extra,utility,work_known\n"
        "a,0,,,duration-only,allreduce,1,,,,\n"  # 2: no work at all
        "b,0,,50,gavel:A3C,allreduce,1,,,,\n"  # 3: a modelled job needs iterations
        "c,0,10,,duration-only,tree,1,,,,\n"  # 4: bad arch
        "d,0,10,,duration-only,allreduce,4,2,,,\n"  # 5: max_workers < num_workers
        "e,0,10,,duration-only,single,1,,[1],,\n"  # 6: extra not an object
        "f,0,10,,duration-only,single,1,,,\"sigmoid(1,2)\",maybe\n"  # 7: bad utility and bool
    )
    f = str(p)
    assert validate_trace(p) == [
        f"{f}:2: iterations: missing value: give iterations or duration",
        f"{f}:3: iterations: missing value: only a duration-only job may give just a duration (model is 'gavel:A3C')",
        f"{f}:4: arch: must be one of allreduce, ps, single, got 'tree'",
        f"{f}:5: num_workers: need 1 <= min_workers (4) <= num_workers (4) <= max_workers (2)",
        f"{f}:6: extra: must be a JSON object ({{...}})",
        f"{f}:7: work_known: must be true or false, got 'maybe'",
        f"{f}:7: utility: expected sigmoid(gamma1,gamma2,gamma3), got 'sigmoid(1,2)'",
    ]


def test_metadata_line_shifts_row_numbers(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text('# dlsched-trace {"cluster": "philly"}\njob_id,submit_time,iterations\na,0,-1\n')
    assert validate_trace(p) == [f"{p}:3: iterations: must be > 0, got -1"]


def test_fast_build_matches_the_constructor(tmp_path, monkeypatch):
    w = Workload("mine", _jobs(), "test", "")
    write_trace(w, tmp_path / "w.csv")
    fast = load_trace(tmp_path / "w.csv").jobs
    monkeypatch.setattr(frame_mod, "_KNOWN_FIELDS", set())  # as if JobSpec had changed
    slow = load_trace(tmp_path / "w.csv").jobs
    assert [_fields(j) for j in fast] == [_fields(j) for j in slow]
    for j in fast:  # and both equal what JobSpec itself makes of the same fields
        rebuilt = JobSpec(**{f.name: getattr(j, f.name) for f in dataclasses.fields(JobSpec)})
        assert _fields(rebuilt) == _fields(j)


def test_jobs_built_a_chunk_at_a_time_are_the_same(tmp_path, monkeypatch):
    w = Workload("mine", _jobs(), "test", "")
    write_trace(w, tmp_path / "w.csv")
    whole = load_trace(tmp_path / "w.csv").jobs
    monkeypatch.setattr(frame_mod, "CHUNK", 2)
    chunked = load_trace(tmp_path / "w.csv").jobs
    assert len(whole) > 2 and [_fields(j) for j in chunked] == [_fields(j) for j in whole]


def test_default_workload_needs_no_shared_traces(monkeypatch, tmp_path):
    monkeypatch.setenv("DLSCHED_TRACES", str(tmp_path / "absent"))
    assert traces_dir() is None
    for measured in (True, False):
        w = default_workload(measured=measured)
        assert (len(w.jobs), w.cluster) == (300, "itp-small")
        assert w.source.startswith("embedded:") and "MIT" in w.attribution
        info = trace_info(w)
        assert info["first_submit"] == 0.0 and info["gpus_histogram"] == {"1": 268, "4": 1, "8": 29, "16": 2}
        assert max(j.gpus_requested for j in w.jobs) <= 128  # fits the itp-small preset
        assert info["deadlines"] == (300 if measured else 0)
    measured, raw = default_workload(), default_workload(measured=False)
    assert {j.model for j in raw.jobs} == {"duration-only"} and not any(j.elastic for j in raw.jobs)
    assert all(j.model.startswith("elasticflow:") for j in measured.jobs) and "Apache" in measured.attribution
    assert [(j.job_id, j.submit_time, j.duration) for j in measured.jobs] == [
        (j.job_id, j.submit_time, j.duration) for j in raw.jobs]
    assert all(j.deadline >= j.submit_time for j in measured.jobs)


def test_embedded_slice_is_small_licensed_and_verbatim():
    data = Path(str(resources.files("dlsched") / "data"))
    csv = data / "itp_cluster04_deadline_slice.csv"
    assert csv.stat().st_size < 100_000
    assert "MIT License" in (data / "LICENSE-ITP").read_text()
    assert "Apache License" in (data / "elasticflow" / "LICENSE").read_text()
    assert "rows 201–500" in (data / "README.md").read_text()
    root = traces_dir()
    if root is None:
        pytest.skip("shared traces not available to compare the slice with")
    full = pd.read_csv(root / "elasticflow-itp" / "elasticflow" / "cluster04.csv")
    assert full.iloc[200:500].reset_index(drop=True).equals(pd.read_csv(csv))
    raw = pd.read_csv(root / "elasticflow-itp" / "raw" / "cluster04.csv")  # the same jobs as the raw trace
    assert raw.iloc[200:500].reset_index(drop=True).equals(pd.read_csv(csv)[list(raw.columns)])
    for f in (data / "elasticflow" / "A100").glob("*.csv"):  # the curves, verbatim
        assert f.read_bytes() == (root / "elasticflow-profiles" / "A100" / f.name).read_bytes()
