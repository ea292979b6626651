"""Metrics tables and the report folder, on small real simulator runs (not hand-made results), so
the report is checked against what the engine actually produces."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.metrics import comparison_table, render_table, summary_rows, write_report
from dlsched.metrics.plots import bin_average, cluster_gpus
from dlsched.policies.fifo import fifo
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.sim.results import SimResult
from dlsched.throughput.duration_only import DurationOnly

CLUSTER = Cluster.homogeneous("tiny", nodes=2, gpus=4, cpus=32, mem=256)
HUGE_REASON_WORD = "cluster has 8"  # the rejected 16-GPU job's reason names the cluster's size


def _workload(n: int = 40) -> list[JobSpec]:
    rng = np.random.default_rng(7)
    submit = np.cumsum(rng.exponential(300.0, n))
    dur = np.exp(rng.normal(7.0, 1.0, n))
    workers = rng.choice([1, 2, 4, 8], n, p=[0.5, 0.25, 0.15, 0.1])
    jobs = [JobSpec(f"j{i}", float(submit[i]), float(dur[i]), num_workers=int(workers[i])) for i in range(n)]
    jobs.append(JobSpec("huge", 10.0, 100.0, num_workers=16))  # never fits: rejected on arrival
    return jobs


def _run(name: str, backfill: bool, config: SimConfig | None = None, jobs=None) -> SimResult:
    policy = fifo(backfill=backfill)
    policy.name = name
    return simulate(jobs or _workload(), CLUSTER, policy, DurationOnly(), config)


@pytest.fixture(scope="module")
def results() -> list[SimResult]:
    full = _run("fifo", False)
    cut_at = float(full.jobs["submit"].max()) * 0.5
    return [full, _run("fifo-backfill", True), _run("fifo-cut", True, SimConfig(max_time=cut_at))]


@pytest.fixture(scope="module")
def report(results, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    (out / "mine.txt").write_text("keep me")
    return write_report(
        results, out, title="Test <report>", workload="synthetic 41 jobs",
        cluster_desc=CLUSTER.describe(), notes=["first note", "second & last"],
    )


def test_fixture_has_rejected_and_unfinished_jobs(results):
    assert results[0].summary["rejected"] == 1
    assert results[2].summary["unfinished"] > 0


def test_report_writes_every_file_and_keeps_others(report):
    out = report.parent
    assert report.name == "index.html"
    for name in ("summary.csv", "jobs.parquet", "jobs.csv", "timeline.parquet",
                 "jct_cdf.png", "utilization.png", "queue.png", "index.html"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "mine.txt").read_text() == "keep me"
    for png in ("jct_cdf.png", "utilization.png", "queue.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_data_files_hold_every_job_and_sample(report, results):
    out = report.parent
    jobs = pd.read_parquet(out / "jobs.parquet")
    assert list(jobs.columns[:2]) == ["policy", "job_id"]
    assert len(jobs) == sum(len(r.jobs) for r in results)
    assert jobs.groupby("policy").size().to_dict() == {r.policy: len(r.jobs) for r in results}
    assert len(pd.read_csv(out / "jobs.csv")) == len(jobs)
    tl = pd.read_parquet(out / "timeline.parquet")
    assert len(tl) == sum(len(r.timeline) for r in results)
    summary = pd.read_csv(out / "summary.csv")
    assert summary["policy"].tolist() == [r.policy for r in results]


def test_html_is_self_contained(report, results):
    page = report.read_text(encoding="utf-8")
    assert page.count('src="data:image/png;base64,') == 3
    for r in results:
        assert r.policy in page
    refs = re.findall(r'(?:src|href)\s*=\s*["\']([^"\']*)', page, flags=re.I)
    assert refs
    for ref in refs:
        assert ref.startswith("data:image/png;base64,") or not re.match(r"^[a-z]+:|^//", ref, re.I), ref
    assert "<script" not in page.lower()
    assert "Test &lt;report&gt;" in page and "second &amp; last" in page
    assert "synthetic 41 jobs" in page and CLUSTER.describe() in page


def test_html_shows_unfinished_and_rejected_with_reasons(report, results):
    page = report.read_text(encoding="utf-8")
    cut = results[2]
    n = cut.summary["unfinished"]
    reason = cut.jobs.loc[cut.jobs["status"] == "unfinished", "reason"].iloc[0]
    assert reason and reason in page
    assert f"{n}× " in page
    assert HUGE_REASON_WORD in page


def test_summary_rows_json_roundtrip(results):
    rows = summary_rows(results)
    text = json.dumps(rows, allow_nan=False)  # NaN would make this raise
    back = json.loads(text)
    assert [r["policy"] for r in back] == [r.policy for r in results]
    for row, r in zip(back, results):
        assert row["mean_jct_s"] == pytest.approx(r.summary["mean_jct"])
        assert row["finished"] == r.summary["finished"]
        assert row["deadline_met_ratio"] is None  # no job had a deadline: no value, not 0
        assert math.isnan(r.summary["deadline_met_ratio"])


def test_comparison_table_one_numeric_row_per_policy(results):
    df = comparison_table(results)
    assert df["policy"].tolist() == [r.policy for r in results]
    for col in df.columns.drop("policy"):
        assert pd.api.types.is_numeric_dtype(df[col]), col
    for (_, row), r in zip(df.iterrows(), results):
        assert row["mean_jct_h"] == pytest.approx(r.summary["mean_jct"] / 3600)
        assert row["unfinished"] == r.summary["unfinished"]
        assert row["gpu_utilization"] == pytest.approx(r.summary["gpu_utilization"])
    assert df["deadline_met_ratio"].isna().all()


def test_duplicate_policy_names_stay_apart(results):
    df = comparison_table([results[0], results[0]])
    assert df["policy"].tolist() == ["fifo", "fifo (2)"]


def test_render_table_shows_counts_and_best(results):
    console = Console(record=True, width=220)
    console.print(render_table(results, title="cmp"))
    text = console.export_text()
    cut = results[2]
    assert f"{cut.summary['finished']}/{cut.summary['jobs']}" in text
    assert "Best mean JCT:" in text
    assert "ddl met" not in text  # no job had a deadline: the column is left to the report
    best = min(results, key=lambda r: r.summary["mean_jct"])
    assert f"Best mean JCT: {best.policy}" in text
    if best is cut:  # it finished fewer jobs; the note must say so
        assert "finished fewer jobs" in text


def test_report_when_no_job_finishes(tmp_path):
    only_huge = [JobSpec("huge", 0.0, 100.0, num_workers=16)]
    r = _run("fifo", False, jobs=only_huge)
    assert r.summary["finished"] == 0
    index = write_report([r], tmp_path, title="t", workload="w", cluster_desc="c")
    page = index.read_text(encoding="utf-8")
    assert "No policy finished a job" in page
    assert json.dumps(summary_rows([r]), allow_nan=False)


def test_bin_average_is_exact_for_step_functions():
    t = np.array([0.0, 10.0, 30.0])
    v = np.array([2.0, 4.0, 4.0])  # 2 on [0,10), 4 on [10,30]
    edges = np.array([0.0, 10.0, 20.0, 40.0])
    out = bin_average(t, v, edges)
    assert out[0] == pytest.approx(2.0)
    assert out[1] == pytest.approx(4.0)
    assert out[2] == pytest.approx(4.0)  # averaged over the covered part only
    mixed = bin_average(t, v, np.array([5.0, 15.0, 50.0, 60.0]))
    assert mixed[0] == pytest.approx(3.0)
    assert math.isnan(mixed[2])  # after the run ended: no value


def test_cluster_size_recovered_from_summary(results):
    for r in results:
        assert cluster_gpus(r) == CLUSTER.total_gpus


# --------------------------------------------------------------------------- report folders


def test_job_table_has_every_wait_and_the_first_start_wait(report, results):
    jobs = pd.read_csv(report.parent / "jobs.csv")
    assert {"queueing_delay", "first_start_delay"} <= set(jobs.columns)
    summary = pd.read_csv(report.parent / "summary.csv")
    assert {"mean_queueing_delay_h", "mean_first_start_delay_h"} <= set(summary.columns)
    page = report.read_text(encoding="utf-8")
    assert "mean queueing (h)" in page and "all waits" in page and "to first start" in page


def _cli(*args: str):
    from typer.testing import CliRunner

    from dlsched.cli import app

    return CliRunner().invoke(app, list(args))


def _one_line_error(res, *words: str) -> None:
    assert res.exit_code == 2, res.output
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert "Traceback" not in res.output
    for word in words:
        assert word in lines[0], lines[0]


def test_a_rerun_never_replaces_the_default_report(tmp_path, monkeypatch):
    """The default folder is used while it holds no report; then dlsched-report-2, -3, ... and
    the run says where it wrote. The earlier reports are left as they were."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dlsched-report").mkdir()
    (tmp_path / "dlsched-report" / "index.html").write_text("earlier")
    (tmp_path / "dlsched-report-2").mkdir()  # empty (a run that failed): reused
    res = _cli("simulate", "--limit", "5", "-p", "fifo")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "dlsched-report" / "index.html").read_text() == "earlier"
    assert (tmp_path / "dlsched-report-2" / "summary.csv").is_file()
    assert "dlsched-report already holds a report, so this run writes to dlsched-report-2" in res.stdout
    res = _cli("simulate", "--limit", "5", "-p", "fifo", "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)[0]["policy"] == "fifo"  # stdout stays JSON; the note goes to stderr
    assert "dlsched-report-3" in res.stderr and (tmp_path / "dlsched-report-3" / "index.html").is_file()
    res = _cli("simulate", "--limit", "5", "-p", "fifo", "--overwrite")  # on purpose: the default itself
    assert res.exit_code == 0, res.output
    assert (tmp_path / "dlsched-report" / "index.html").read_text() != "earlier"
    assert not (tmp_path / "dlsched-report-4").exists()


def test_a_named_folder_holding_a_report_needs_overwrite(tmp_path):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")  # the user's own files are not a report
    assert _cli("simulate", "--limit", "5", "-p", "fifo", "--out", str(out)).exit_code == 0
    (out / "summary.csv").write_text("earlier")
    res = _cli("simulate", "--limit", "5", "-p", "fifo", "--out", str(out))
    _one_line_error(res, "already holds a report", "--overwrite")
    assert (out / "summary.csv").read_text() == "earlier"
    res = _cli("compare", "--trace", str(tmp_path / "absent.csv"), "-p", "fifo", "--out", str(out))
    _one_line_error(res, "already holds a report")  # said before the trace is even read
    res = _cli("simulate", "--limit", "5", "-p", "fifo", "--out", str(out), "--overwrite")
    assert res.exit_code == 0, res.output
    assert (out / "summary.csv").read_text() != "earlier" and (out / "mine.txt").read_text() == "keep me"


@pytest.mark.parametrize("command", [
    ["simulate", "--limit", "5", "-p", "fifo"],
    ["compare", "--trace", "absent.csv", "-p", "fifo"],
    ["experiment", "oasis", "--quick"],
    ["experiment", "dragon", "--quick"],
    ["experiment", "qos", "--quick"],
    ["experiment", "dl2", "--traces", "1"],
    ["experiment", "fidelity", "--jobs", "1"],
    ["experiment", "real-traces", "--quick"],
    ["train", "dl2"],
    ["train", "dl2", "--resume"],
], ids=lambda c: "-".join(c[:2]))
@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_out_naming_a_file_is_one_line_and_exit_2(tmp_path, command, where):
    f = tmp_path / "taken.txt"
    f.write_text("not a folder")
    out = f if where == "file" else f / "sub"
    _one_line_error(_cli(*command, "--out", str(out)), "--out", "is a file")
    assert f.read_text() == "not a folder"


def test_experiment_folders_are_numbered_or_need_overwrite(tmp_path, monkeypatch):
    """The experiments' rule is the report's, with "holds results" = holds anything."""
    from dlsched.core.errors import ConfigError
    from dlsched.output_folder import OutputFolder

    monkeypatch.chdir(tmp_path)
    assert OutputFolder(None, "x-results").claim() == (Path("x-results"), "")
    assert OutputFolder(None, "x-results").claim() == (Path("x-results"), "")  # still empty: reused
    (tmp_path / "x-results" / "runs.csv").write_text("earlier")
    path, note = OutputFolder(None, "x-results").claim()
    assert path == Path("x-results-2") and path.is_dir() and "x-results-2" in note
    (tmp_path / "x-results-3").write_text("a file, not a folder")  # skipped
    (path / "runs.csv").write_text("earlier")
    assert OutputFolder(None, "x-results").claim()[0] == Path("x-results-4")
    with pytest.raises(ConfigError, match="already holds files"):
        OutputFolder(Path("x-results"), "x-results").claim()
    assert OutputFolder(Path("x-results"), "x-results", overwrite=True).claim() == (Path("x-results"), "")
    assert OutputFolder(None, "x-results", overwrite=True).claim() == (Path("x-results"), "")


# --------------------------------------------------------------------------- the summary table's width


def test_summary_table_has_grouped_headers_in_a_wide_box(report):
    page = report.read_text(encoding="utf-8")
    box = re.search(r'<h2>Summary</h2>\s*<div class="([^"]*)">\s*<table class="([^"]*)"', page)
    assert box, "the summary table must follow its heading in its own box"
    assert {"scroll", "wide"} <= set(box.group(1).split()) and "compact" in box.group(2).split()
    head = page[box.end():page.index("</thead>", box.end())]
    assert head.count("<tr") == 2  # group headers over their columns
    assert re.search(r'<th colspan="4"[^>]*>JCT \(h\)</th>', head)


def _browser() -> str | None:
    import shutil

    return next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.mark.skipif(_browser() is None, reason="needs a headless Chromium to lay the page out")
def test_every_summary_column_is_visible_at_1400_px(results, tmp_path):
    """Laid out for real by headless Chromium in a 1400 px window: the summary table (ten
    policies, one with a long name) is no wider than its box and the box fits the window."""
    import subprocess

    many = [results[0]] * 9 + [results[2]]
    index = write_report(many, tmp_path, title="t", workload="w", cluster_desc="c")
    probe = ("<script>addEventListener('load', () => { const t = document.querySelector('table.data'); "
             "const b = t.parentElement.getBoundingClientRect(); document.body.dataset.fit = JSON.stringify("
             "{table: t.scrollWidth, box: t.parentElement.clientWidth, right: b.right, window: innerWidth}); });"
             "</script></body>")
    page = tmp_path / "probe.html"
    page.write_text(index.read_text(encoding="utf-8").replace("</body>", probe), encoding="utf-8")
    out = subprocess.run([_browser(), "--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'data-fit="([^"]*)"', out.stdout)
    assert found, out.stderr[-2000:]
    fit = json.loads(found.group(1).replace("&quot;", '"'))
    assert fit["window"] == 1400
    assert fit["table"] <= fit["box"] and fit["right"] <= fit["window"], fit
