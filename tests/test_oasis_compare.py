"""OASiS through the shared `dlsched compare` path on a real trace: every policy of the comparison
is scored on the same duration-derived utilities, so total utility is a number for all of them."""

import json
import math

import pytest
from typer.testing import CliRunner

from dlsched.cli import app
from dlsched.core.job import JobSpec
from dlsched.core.utility import SigmoidUtility, default_utility, from_duration, with_default_utilities
from dlsched.paths import traces_dir
from dlsched.policies.oasis import job_utility
from dlsched.policies.registry import POLICIES, UTILITY_DRIVEN

TRACE = "elasticflow-itp/elasticflow/cluster04.csv"


def test_with_default_utilities_fills_only_missing():
    own = SigmoidUtility(5.0, 0.0, 0.0)
    jobs = [
        JobSpec("a", 0.0, iterations=100.0, duration=100.0),
        JobSpec("b", 0.0, iterations=50.0, utility=own),
        JobSpec("c", 0.0, iterations=30.0),  # duration-only: iterations are seconds
    ]
    out, filled = with_default_utilities(jobs)
    assert filled == 2 and len(out) == 3
    assert out[0].utility == from_duration(100.0) and out[2].utility == from_duration(30.0)
    assert out[1] is jobs[1]
    assert jobs[0].utility is None  # inputs are not mutated (JobSpec is frozen; these are copies)
    assert out[0].job_id == "a" and out[0].num_workers == jobs[0].num_workers
    # OASiS sees the same default when it runs on jobs that were not filled beforehand
    assert job_utility(jobs[0]) == default_utility(jobs[0]) == out[0].utility


def test_utility_driven_names_are_policies():
    assert UTILITY_DRIVEN <= set(POLICIES) and "oasis" in UTILITY_DRIVEN


def test_compare_cli_scores_every_policy_on_default_utility(tmp_path):
    root = traces_dir()
    if root is None or not (root / TRACE).is_file():
        pytest.skip("real traces not available")
    res = CliRunner().invoke(app, [
        "compare", "--trace", str(root / TRACE), "--policies", "oasis,fifo", "--limit", "60",
        "--format", "json", "--out", str(tmp_path / "rep"),
    ])
    assert res.exit_code == 0, res.output
    rows = {r["policy"]: r for r in json.loads(res.stdout)}
    assert set(rows) == {"oasis (oracle)", "fifo"}  # ITP jobs declare no work: OASiS plans from the truth
    for name, r in rows.items():
        assert r["jobs"] == 60
        assert math.isfinite(r["total_utility"]) and r["total_utility"] > 0, name
        assert 0 <= r["rejected"] <= r["jobs"]
    assert rows["fifo"]["rejected"] == 0  # FIFO admits everything
    # the report says which utilities were used
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "Utility: 60 of 60 jobs" in page and "Oracles: 60 of 60 jobs declare no work" in page
