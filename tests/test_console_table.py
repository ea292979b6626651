"""The console comparison fits a normal terminal: no number or policy name cut at 80 or 120
columns, a legend for every short header shown, baselines and published systems apart; the other
output formats carry the same numbers (CSV in summary.csv's units, JSON with units in its keys)."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

from dlsched.cli import app
from dlsched.core.errors import DlschedError
from dlsched.metrics.table import (COLUMNS, column_keys, comparison_table, display_table, format_rows,
                                   frame_renderables, render_table, summary_rows)
from dlsched.policies.registry import DEFAULT_POLICIES, PUBLISHED

HOUR = 3600.0


def _fake(policy: str, i: int) -> SimpleNamespace:
    """A result with wide numbers (thousands of hours, every metric present), as a big trace gives."""
    summary = {"jobs": 12_345, "finished": 12_345 - i, "rejected": i % 2, "unfinished": i // 2,
               "mean_jct": (1234.56 + i) * HOUR, "median_jct": 800.0 * HOUR, "p95_jct": (9876.54 + i) * HOUR,
               "p99_jct": 12_000.0 * HOUR, "mean_queueing_delay": (2345.67 + i) * HOUR,
               "mean_first_start_delay": 1000.0 * HOUR, "makespan": 54_321.0 * HOUR, "gpu_utilization": 0.5 + i / 100,
               "deadline_met_ratio": 0.25 + i / 100, "total_utility": 123_456.7 + i, "total_fee": 1_234_567.0,
               "held_gpu_hours": 4321.5 * (policy == "kube-default"), "mean_nodes_spanned": 1.5, "restarts": 10_000 + i,
               "preemptions": 999, "oracle": False, "policy": policy}
    return SimpleNamespace(policy=policy, summary=summary)


RESULTS = [_fake(p, i) for i, p in enumerate(DEFAULT_POLICIES)]


def _text(width: int, **kw) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(render_table(RESULTS, title="a long workload name on a cluster", **kw))
    return console.export_text()


@pytest.mark.parametrize("width", [80, 120])
def test_the_default_table_fits_with_nothing_cut(width):
    text = _text(width)
    assert "…" not in text
    assert max(map(len, text.splitlines())) <= width
    table = display_table(comparison_table(RESULTS))
    rows = {line.split()[0]: line for line in text.splitlines() if line.split() and line.split()[0] in DEFAULT_POLICIES}
    assert set(rows) == set(DEFAULT_POLICIES)  # every full name, each on its row
    for i, policy in enumerate(DEFAULT_POLICIES):
        assert table.at[i, "JCT (h): mean"] in rows[policy]  # the deciding number, whole
        assert f"{12_345 - i:,}/12,345" in rows[policy]


def test_a_wider_terminal_shows_more_columns_and_each_one_has_a_legend():
    narrow, wide = _text(80), _text(120)
    shown = {w: [c for c in COLUMNS if c.short and f"{c.short}:" in t] for w, t in ((80, narrow), (120, wide))}
    assert len(shown[120]) > len(shown[80]) >= 3
    for c in shown[120]:
        assert c.means in wide.replace("\n", " ") or c.means.split(",")[0] in wide
    assert "more columns in the report's summary.csv" in narrow


def test_published_systems_are_below_the_baselines_whatever_the_order():
    mixed = [RESULTS[-1], RESULTS[0], RESULTS[-2], RESULTS[1]]  # dual-agent, fifo, dl2, srtf
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(render_table(mixed))
    text = console.export_text()
    names = [line.split()[0] for line in text.splitlines() if line.split() and line.split()[0] in DEFAULT_POLICIES]
    assert names == ["fifo", "srtf", "dual-agent", "dl2"]
    assert "rows: baselines, then published systems" in text
    assert [r["kind"] for r in summary_rows(mixed)] == ["published system", "baseline", "published system", "baseline"]


def test_columns_are_chosen_by_name_and_a_wrong_name_is_one_clear_error():
    assert column_keys("mean_jct_h, p99 h,preemptions") == ["mean_jct_h", "p99_jct_h", "preemptions"]
    assert column_keys(None) is None
    with pytest.raises(DlschedError, match="unknown column.*'p98'.*choose from .*mean_jct_h"):
        column_keys("p98,mean_jct_h")
    text = _text(120, columns=["p99_jct_h", "preemptions"])
    header = next(line for line in text.splitlines() if line.lstrip().startswith("policy"))
    assert header.split()[-3:] == ["p99", "h", "preempt."] and "JCT h" not in header


def test_csv_markdown_and_json_carry_the_same_numbers_with_their_units():
    csv = pd.read_csv(io.StringIO(format_rows(RESULTS, "csv")))
    pd.testing.assert_frame_equal(csv, comparison_table(RESULTS), check_dtype=False)
    narrow = pd.read_csv(io.StringIO(format_rows(RESULTS, "csv", ["p95_jct_h"])))
    assert list(narrow.columns) == ["policy", "p95_jct_h"]
    md = format_rows(RESULTS, "markdown").splitlines()
    assert md[0].startswith("| policy | jobs: all |") and len(md) == 2 + len(RESULTS)
    rows = json.loads(format_rows(RESULTS, "json"))
    assert rows[0]["mean_jct_s"] == RESULTS[0].summary["mean_jct"] and "mean_jct" not in rows[0]
    assert rows[0]["total_fee_usd"] == 1_234_567.0 and rows[0]["held_gpu_hours"] == 0.0
    assert {r["kind"] for r in rows if r["policy"] in PUBLISHED} == {"published system"}


def test_a_wide_frame_is_split_into_blocks_that_fit_and_repeat_its_labels():
    df = pd.DataFrame({"workload": ["itp-cluster10", "synthetic"], "policy": ["kube-autoscale", "qos"],
                       **{f"metric_number_{k}": [123_456.789 * k, 0.5] for k in range(12)}})
    tables = frame_renderables(df, width=80, title="summary")
    assert len(tables) > 1
    console = Console(width=80, record=True, file=io.StringIO())
    for t in tables:
        console.print(t)
    text = console.export_text()
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    assert text.count("kube-autoscale") == len(tables)  # labels in every block
    assert "1,358,024.679" in text  # metric 11, whole


def test_simulate_prints_csv_and_markdown_for_scripts(tmp_path):
    run = CliRunner().invoke
    res = run(app, ["simulate", "--limit", "20", "-p", "fifo,dragon", "--format", "csv",
                    "--columns", "mean_jct_h,gpu_utilization", "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(io.StringIO(res.stdout))
    assert list(df.columns) == ["policy", "mean_jct_h", "gpu_utilization"] and list(df.policy) == ["fifo", "dragon"]
    saved = pd.read_csv(tmp_path / "a" / "summary.csv")
    assert df.mean_jct_h.tolist() == pytest.approx(saved.mean_jct_h.tolist())
    res = run(app, ["simulate", "--limit", "20", "-p", "fifo", "--format", "yaml", "--out", str(tmp_path / "b")])
    assert res.exit_code == 2 and "--format must be one of table, csv, markdown, json" in res.output


def test_seeds_give_means_whose_intervals_hold_every_seed(tmp_path):
    """Machine speeds drawn by the seed make the seeds differ; the table's figures are the means
    of seeds.csv, and each seed's value lies inside its policy's 95% interval (intervals.csv)."""
    out = tmp_path / "r"
    res = CliRunner().invoke(app, ["simulate", "--limit", "40", "-p", "fifo,dragon", "--variability", "static",
                                   "--seeds", "3", "--seed", "4", "--out", str(out)])
    assert res.exit_code == 0, res.output
    long, iv = pd.read_csv(out / "seeds.csv"), pd.read_csv(out / "intervals.csv")
    assert sorted(set(long.seed)) == [4, 5, 6] and len(long) == 6
    assert long.groupby("policy").mean_jct_h.nunique().max() > 1  # the seeds differ
    for _, row in iv.iterrows():
        mine = long[long.policy == row.policy]
        assert row.mean_jct_h == pytest.approx(mine.mean_jct_h.mean())
        assert (row.mean_jct_h_low <= mine.mean_jct_h).all() and (mine.mean_jct_h <= row.mean_jct_h_high).all()
        assert row.mean_jct_h_low < row.mean_jct_h < row.mean_jct_h_high
    assert "±: half-width of the 95% Student-t interval of the mean over 3 seeds (4, 5, 6)" in res.stdout
    assert " ±" in res.stdout.split("done/jobs")[1]
    assert "seeds: 3" in (out / "run.yaml").read_text()
    first = pd.read_csv(out / "jobs.csv")  # the report's run is the first seed's
    again = CliRunner().invoke(app, ["simulate", "--limit", "40", "-p", "fifo,dragon", "--variability", "static",
                                     "--seed", "4", "--out", str(tmp_path / "one")])
    assert again.exit_code == 0, again.output
    pd.testing.assert_frame_equal(first, pd.read_csv(tmp_path / "one" / "jobs.csv"))
