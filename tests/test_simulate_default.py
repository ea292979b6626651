"""`dlsched simulate` with no argument: the published systems next to the baselines, on a workload
where they differ (the embedded ITP slice on measured curves), and the --profiles/--rigid switches."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from dlsched.cli import app
from dlsched.policies.registry import BASELINES, DEFAULT_POLICIES, PUBLISHED


def _json(args, tmp_path):
    r = CliRunner().invoke(app, ["simulate", "--format", "json", "--out", str(tmp_path / "rep"), "--overwrite", *args])
    assert r.exit_code == 0, r.output
    return {row["policy"].split(" ")[0]: row for row in json.loads(r.stdout[r.stdout.index("["):])}


def test_default_policies_are_the_baselines_and_the_published_systems():
    assert DEFAULT_POLICIES == BASELINES + PUBLISHED
    assert {"dragon", "qos", "oasis", "dl2"} <= set(PUBLISHED)


def test_simulate_default_shows_published_systems_and_they_differ(tmp_path):
    rows = _json(["--limit", "120", "-p", "fifo,drf,kube-default,dragon,qos,dl2"], tmp_path)
    assert set(rows) == {"fifo", "drf", "kube-default", "dragon", "qos", "dl2"}
    jct = {p: r["mean_jct_s"] for p, r in rows.items()}
    assert len({round(v, 3) for v in jct.values()}) >= 5, jct  # decisions matter on this workload
    met = {p: r["deadline_met_ratio"] for p, r in rows.items()}
    assert len({round(v, 3) for v in met.values()}) >= 4, met
    text = (tmp_path / "rep" / "jobs.csv").read_text()  # the per-job table says which curve served each job
    assert '"elasticflow:bert","bert@64 A100, from the trace","elasticflow-curves"' in text


def test_profiles_off_and_rigid_change_the_workload(tmp_path):
    args = ["--limit", "120", "-p", "drf"]
    measured = _json(args, tmp_path)["drf"]["mean_jct_s"]
    off = _json([*args, "--profiles", "off"], tmp_path)["drf"]["mean_jct_s"]
    rigid = _json([*args, "--rigid"], tmp_path)["drf"]["mean_jct_s"]
    assert len({round(measured, 3), round(off, 3), round(rigid, 3)}) == 3


def test_bad_profiles_value_is_one_line():
    r = CliRunner().invoke(app, ["simulate", "--profiles", "measured", "-p", "fifo"])
    assert r.exit_code == 2 and "--profiles must be one of auto, draw, off" in r.output


def test_json_stdout_stays_json_with_a_policy_that_runs_highs(tmp_path):
    """Dorm's MILP solver printed its banner on stdout, before any JSON."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "dlsched.cli", "simulate", "-p", "dorm", "--limit", "20",
                          "--format", "json", "--out", str(tmp_path / "r")], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["policy"].startswith("dorm")
