"""`dlsched experiment real-traces` on a tiny real slice: files, claims, confidence intervals, resume."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dlsched.experiments import real_traces as exp
from dlsched.traces.embedded import data_path


@pytest.fixture()
def root(tmp_path):
    """A traces root holding the first 80 jobs of the embedded ITP slice (deadline format)."""
    lines = data_path().read_text().splitlines()[:81]
    (tmp_path / "itp").mkdir()
    (tmp_path / "itp" / "slice.csv").write_text("\n".join(lines) + "\n")
    return tmp_path


CASES = {"slice": exp.TraceCase("itp/slice.csv", "itp-deadline", None, "auto", "itp")}
POLICIES = ("fifo", "drf", "kube-default", "dragon", "kube-autoscale", "qos")


def test_writes_tables_plots_and_claims_and_resumes(root, tmp_path):
    out = tmp_path / "out"
    runs = exp.run(out, root, cases=CASES, policies=POLICIES)
    assert set(runs["policy"]) == set(POLICIES) and (runs["offered_load"] - exp.LOAD).abs().max() < 0.2
    for f in ("runs.csv", "summary.csv", "claims.csv", "RESULTS.md", *(f"{m}.png" for m in exp.METRICS)):
        assert (out / f).exists(), f
    summary = pd.read_csv(out / "summary.csv")
    assert ((summary["low"] <= summary["value"] + 1e-9) & (summary["value"] <= summary["high"] + 1e-9)).all()
    claims = pd.read_csv(out / "claims.csv")
    # dl2 and oasis were not run: only the claims whose policies ran are checked
    assert set(claims["claim"].str.split(" ").str[0]) == {"qos", "dragon"}
    text = (out / "RESULTS.md").read_text()
    assert "## mean JCT (h)" in text and "dragon vs kube-default" in text
    stamp = {f: f.stat().st_mtime_ns for f in (out / "cells").iterdir()}
    again = exp.run(out, root, cases=CASES, policies=POLICIES)  # resumes: nothing re-run
    assert {f: f.stat().st_mtime_ns for f in (out / "cells").iterdir()} == stamp
    pd.testing.assert_frame_equal(runs.drop(columns="wall_s"), again.drop(columns="wall_s"))


def test_paired_ci_of_a_policy_against_itself_is_exact():
    t = pd.DataFrame({"run": 0, "job_id": list("abcd"), "done": True, "jct_h": [1.0, 2.0, 3.0, 4.0],
                      "has_deadline": True, "met": [True, False, True, True], "utility": 1.0, "gpu_h": 2.0})
    assert exp.paired_ci(t, t, "mean_jct_h", "ratio") == (1.0, 1.0, 1.0)
    assert exp.paired_ci(t, t, "deadline_met", "diff") == (0.0, 0.0, 0.0)
    slower = t.assign(jct_h=t["jct_h"] * 2)
    v, lo, hi = exp.paired_ci(slower, t, "mean_jct_h", "ratio")
    assert v == pytest.approx(2.0) and lo == pytest.approx(2.0) and hi == pytest.approx(2.0)


def test_bootstrap_ci_brackets_the_mean():
    x = np.random.default_rng(0).exponential(1.0, 400)
    lo, hi = exp.bootstrap_ci(x, np.mean)
    assert lo < x.mean() < hi and hi - lo < 0.5


def test_report_only_runs_nothing_and_says_what_was_not_run(root, tmp_path):
    out = tmp_path / "out"
    exp.run(out, root, cases=CASES, policies=("fifo", "kube-default", "dragon"))
    for f in (out / "cells").glob("slice__s0__dragon.*"):
        f.unlink()
    runs = exp.run(out, root, cases=CASES, policies=("fifo", "kube-default", "dragon"), report_only=True)
    assert set(runs["policy"]) == {"fifo", "kube-default"}
    assert not list((out / "cells").glob("slice__s0__dragon.*"))  # nothing was run
    text = (out / "RESULTS.md").read_text()
    assert "| dragon | not run |" in text and "dragon vs kube-default" not in text
