"""The report folder: the comparison as CSV, every job and timeline sample as Parquet/CSV, three
plots, and one self-contained index.html tying them together.

Files are overwritten by name and nothing else in the folder is touched, so a report can be
written into a directory that also holds the user's own files. Whether a folder already holds a
report (`holds_report`) is what `dlsched.output_folder` asks before a run writes there, so an
earlier run's report is never replaced silently.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from dlsched.metrics import html, plots
from dlsched.metrics.style import kind_order, policy_styles
from dlsched.metrics.table import NA, best_mean_jct_note, comparison_table, display_table, policy_labels
from dlsched.provenance import version
from dlsched.run_config import RUN_FILE, RUN_FILE_ALT, written_run_config
from dlsched.sim.results import SimResult

if TYPE_CHECKING:
    from dlsched.run_config import RunRecord

TOP_REASONS = 3
FILES = (
    ("summary.csv", "the summary table, one row per policy (JCT and times in hours)"),
    ("jobs.parquet", "every job of every policy (times in seconds), with a policy column"),
    ("jobs.csv", "the same per-job table as CSV"),
    ("timeline.parquet", "the raw step-function timelines (t, used/busy/held GPUs, queue, running) per policy"),
)

PLOTS = ("jct_cdf.png", "utilization.png", "queue.png")
INDEX = "index.html"


def holds_report(folder: Path) -> bool:
    """Whether `folder` holds any file a report writes (so writing one there would replace it); a
    run.yaml counts only if a report wrote it (the user's own config beside it is not a report)."""
    names = [name for name, _ in FILES] + [*PLOTS, INDEX]
    return any((Path(folder) / name).exists() for name in names) or any(
        written_run_config(Path(folder) / name) for name in (RUN_FILE, RUN_FILE_ALT))


def _with_policy(frames: Sequence[pd.DataFrame], labels: Sequence[str]) -> pa.Table:
    """Stack the per-policy frames with a leading `policy` column, as one Arrow table."""
    parts = [f.assign(policy=label) for f, label in zip(frames, labels)]
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({"policy": []})
    df = df[["policy", *[c for c in df.columns if c != "policy"]]]
    return pa.Table.from_pandas(df, preserve_index=False)


def _reasons(reasons: pd.Series) -> str:
    """'N× reason; …' for the most common reasons, and how many other reasons there were.

    The count goes first because reasons often end in a number ("the cluster has 32").
    """
    counts = reasons.fillna("").replace("", "(no reason given)").value_counts()
    shown = "; ".join(f"{n:,}× {reason}" for reason, n in counts.head(TOP_REASONS).items())
    if len(counts) > TOP_REASONS:
        shown += f"; {counts.iloc[TOP_REASONS:].sum():,}× one of {len(counts) - TOP_REASONS} other reasons"
    return shown


def not_finished_table(results: Sequence[SimResult], labels: Sequence[str]) -> pd.DataFrame:
    """Per policy: how many jobs were rejected / left unfinished, and the most common reasons why."""
    rows = []
    for label, r in zip(labels, results):
        row = {"policy": label}
        for status in ("rejected", "unfinished"):
            sel = r.jobs.loc[r.jobs["status"] == status, "reason"]
            row[status] = f"{len(sel):,}"
            row[f"most common reasons ({status})"] = _reasons(sel) if len(sel) else NA
        rows.append(row)
    return pd.DataFrame(rows)


def write_report(
    results: list[SimResult],
    out_dir: Path,
    *,
    title: str,
    workload: str,
    cluster_desc: str,
    notes: list[str] | None = None,
    run: "RunRecord | None" = None,
) -> Path:
    """Write summary.csv, jobs.parquet/.csv, timeline.parquet, three PNGs and index.html; return index.html.

    `run`: the run config already written beside the report (`run_config.dump_run_config`); the
    page lists it and shows what it records (command, version, commit, trace checksum, seed, every
    simulation option), so the page alone says how its numbers were made."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    labels = policy_labels(results)

    table = comparison_table(results)
    table.to_csv(out / "summary.csv", index=False)
    jobs = _with_policy([r.jobs for r in results], labels)
    pq.write_table(jobs, out / "jobs.parquet")
    pa_csv.write_csv(jobs, out / "jobs.csv")
    pq.write_table(_with_policy([r.timeline for r in results], labels), out / "timeline.parquet")

    axis = plots.TimeAxis.for_results(results)
    cdf_png, util_png, queue_png = PLOTS
    figures = [
        (cdf_png, "JCT CDF per policy", plots.jct_cdf(results, labels),
         "Share of all submitted jobs finished within a given JCT (log x). A curve that plateaus "
         "below 100% belongs to a policy that did not finish every job."),
        (util_png, "GPU utilization over time per policy", plots.utilization(results, labels, axis),
         "GPUs making progress, time-averaged per bin; a line ends where that policy's run ended."),
        (queue_png, "Queue length over time per policy", plots.queue(results, labels, axis),
         "Jobs waiting to run (including preempted ones), time-averaged per bin."),
    ]
    rendered = []
    for name, alt, fig, caption in figures:
        png = plots.to_png(fig)
        (out / name).write_bytes(png)
        rendered.append((alt, png, caption))

    looks, order = policy_styles(labels), kind_order(labels)
    missing = not_finished_table(results, labels)
    any_missing = any(int(r.summary.get("rejected", 0)) + int(r.summary.get("unfinished", 0)) for r in results)
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    page = html.page(
        title=title,
        workload=workload,
        cluster_desc=cluster_desc,
        notes=notes or [],
        # grouped baselines / published systems / others, as on the console (summary.csv keeps the run's order)
        summary=display_table(table, grouped=True).iloc[order].reset_index(drop=True),
        summary_looks=[looks[i] for i in order],
        summary_note=best_mean_jct_note(table),
        figures=rendered,
        unfinished=missing if any_missing else None,
        files=[*FILES, *([(run.path.name, f"the run config that re-runs this report: {run.rerun}")] if run else [])],
        footer=f"dlsched {version()} · generated {now}",
        run=run.rows() if run else (),
    )
    index = out / INDEX
    index.write_text(page, encoding="utf-8")
    return index
