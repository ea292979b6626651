"""The live runtime's promises under repeated, compounded faults (small, for CI; the large run is
`benchmarks/chaos_run.py`, its figures in docs/LIVE.md)."""

from __future__ import annotations

import json

import pytest

from tests.chaos import KINDS, ChaosConfig, run_chaos


@pytest.mark.long
@pytest.mark.chaos
def test_every_job_ends_once_with_all_its_steps_under_faults(tmp_path):
    report = run_chaos(tmp_path, ChaosConfig(jobs=5, faults=8, seed=17, steps=(300, 900), timeout_s=420))
    summary = report.summary()
    assert report.problems() == [], json.dumps(summary, indent=1)
    assert set(report.faults_by_kind) == set(KINDS), summary  # every kind of fault was really injected
    assert len(report.finished) + len(report.failed) == len(report.expected_steps)
    assert report.run_twice == []
    # the faults cost something to recover from: trainers were killed and resumed from checkpoints
    assert any(b.kind in ("crash", "corrupt") for b in report.boundaries), summary
