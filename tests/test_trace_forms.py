"""The default form of a duration-only trace, and the note a run gives when a policy that works by
resizing jobs meets jobs it cannot resize (issue 29; docs/DECISIONS.md)."""

from __future__ import annotations

from pathlib import Path

from dlsched.experiment import prepare_run, rigid_note
from dlsched.run_config import RunConfig
from tests.conftest import rigid_job

PHILLY_ROWS = "timestamp,duration,num_gpus\n" + "".join(
    f"2017-10-09 07:{m:02d}:00,{600 + 60 * m},{g}\n" for m, g in enumerate([1, 2, 4, 8, 1, 2, 4, 8, 128, 1]))


def test_a_duration_only_trace_runs_on_drawn_measured_curves_by_default(tmp_path: Path):
    trace = tmp_path / "philly.csv"
    trace.write_text(PHILLY_ROWS)
    cfg = RunConfig(trace=str(trace), trace_format="philly", cluster="philly")
    assert cfg.profiles == "draw"
    run = prepare_run(cfg, ["dragon", "fifo"], None)
    drawn = [j for j in run.workload.jobs if "drawn" in j.extra.get("profile", "")]
    assert len(drawn) >= 8 and any(j.max_workers > j.min_workers for j in drawn)  # elastic: dragon can scale them
    # the 128-GPU job is larger than every curve: it stays duration-only, and the run says so
    assert run.rigid_note is not None and run.rigid_note.startswith("1 of 10 jobs are rigid (larger than every")


def test_auto_keeps_the_trace_as_recorded_and_the_run_says_what_that_costs_a_resizing_policy(tmp_path: Path):
    trace = tmp_path / "philly.csv"
    trace.write_text(PHILLY_ROWS)
    run = prepare_run(RunConfig(trace=str(trace), trace_format="philly", cluster="philly", profiles="auto"),
                      ["fifo", "dragon", "qos"], None)
    assert all(j.min_workers == j.max_workers for j in run.workload.jobs)
    assert run.rigid_note == ("10 of 10 jobs are rigid (duration-only with --profiles auto): dragon, qos cannot resize "
                              "them; --profiles draw (the default) or --elastic lets them scale (docs/TRACES.md)")


def test_no_note_without_a_resizing_policy_or_without_rigid_jobs():
    jobs = [rigid_job(i, 0.0, 600.0, gpus=2) for i in range(3)]
    assert rigid_note(jobs, ["fifo", "tiresias"], "auto", None) is None
    assert "--rigid" in rigid_note(jobs, ["optimus"], "draw", False)
    elastic = [rigid_job(0, 0.0, 600.0, gpus=2, min_workers=1, max_workers=4)]
    assert rigid_note(elastic, ["dragon"], "auto", None) is None
