"""The policy comparison: one row per policy, as a DataFrame, a rich console table, or JSON rows.

All three read `SimResult.summary` and nothing else, so the console, the JSON output, summary.csv
and the HTML report can never disagree. A missing value (no job finished, no job had a deadline)
stays NaN in the DataFrame and is shown as "–", never as 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
from rich.table import Table
from rich.text import Text

from dlsched.sim.results import SimResult

NA = "–"
HOUR = 3600.0


@dataclass(frozen=True)
class Column:
    """One metric of the comparison: where it comes from, its unit and how a human reads it."""

    key: str  # column name in comparison_table / summary.csv (unit in the name)
    label: str  # header shown to people (under `group` when it has one)
    source: str  # key in SimResult.summary
    scale: float = 1.0  # divide the summary value by this (seconds → hours)
    fmt: str = "{:,.2f}"
    short: str = ""  # narrower header for the console; "" = not a console column of its own
    group: str = ""  # a header spanning related columns in the HTML report (keeps the table narrow)

    @property
    def heading(self) -> str:
        """The full header on one line: "JCT (h): mean"."""
        return f"{self.group}: {self.label}" if self.group else self.label


COLUMNS: tuple[Column, ...] = (
    Column("jobs", "all", "jobs", fmt="{:,}", group="jobs"),
    Column("finished", "finished", "finished", fmt="{:,}", group="jobs"),
    Column("rejected", "rejected", "rejected", fmt="{:,}", short="rej.", group="jobs"),
    Column("unfinished", "unfinished", "unfinished", fmt="{:,}", short="unfin.", group="jobs"),
    Column("mean_jct_h", "mean", "mean_jct", HOUR, short="JCT mean h", group="JCT (h)"),
    Column("median_jct_h", "median", "median_jct", HOUR, short="p50 h", group="JCT (h)"),
    Column("p95_jct_h", "p95", "p95_jct", HOUR, short="p95 h", group="JCT (h)"),
    Column("p99_jct_h", "p99", "p99_jct", HOUR, short="p99 h", group="JCT (h)"),
    # every wait (first start and after each preemption) vs the wait before the first start only
    Column("mean_queueing_delay_h", "all waits", "mean_queueing_delay", HOUR, short="queue h",
           group="mean queueing (h)"),
    Column("mean_first_start_delay_h", "to first start", "mean_first_start_delay", HOUR, group="mean queueing (h)"),
    Column("makespan_h", "makespan (h)", "makespan", HOUR, short="makesp. h"),
    Column("gpu_utilization", "GPU util.", "gpu_utilization", fmt="{:.1%}", short="util"),
    Column("deadline_met_ratio", "deadlines met", "deadline_met_ratio", fmt="{:.1%}", short="ddl met"),
    Column("total_utility", "total utility", "total_utility", fmt="{:,.1f}", short="utility"),
    Column("total_fee_usd", "total fee (USD)", "total_fee", fmt="{:,.0f}", short="fee $"),
    Column("held_gpu_hours", "held GPU·h (partial gangs)", "held_gpu_hours", fmt="{:,.1f}", short="held GPU·h"),
    Column("mean_nodes_spanned", "nodes spanned per job", "mean_nodes_spanned", fmt="{:.2f}", short="nodes"),
    Column("restarts", "restarts", "restarts", fmt="{:,}", short="restarts"),
    Column("preemptions", "preemptions", "preemptions", fmt="{:,}", short="preempt."),
)
_HEADING = {c.key: c.heading for c in COLUMNS}
_INT_KEYS = {"jobs", "finished", "rejected", "unfinished", "restarts", "preemptions"}


def policy_labels(results: Sequence[SimResult]) -> list[str]:
    """Policy names made unique ("fifo", "fifo (2)"), so two runs of one policy stay two rows; a
    policy that saw ground truth is marked "(oracle)" wherever its name is shown."""
    seen: dict[str, int] = {}
    out = []
    for r in results:
        n = seen.get(r.policy, 0) + 1
        seen[r.policy] = n
        label = r.policy if n == 1 else f"{r.policy} ({n})"
        out.append(f"{label} (oracle)" if r.summary.get("oracle") else label)
    return out


def _number(value: Any) -> float:
    """A summary value as a float, with None (no data) as NaN."""
    return float("nan") if value is None else float(value)


def comparison_table(results: Sequence[SimResult]) -> pd.DataFrame:
    """One row per policy: counts, JCT percentiles (hours), utilization, deadlines, waste, churn."""
    rows = [{"policy": label, **{c.key: _number(r.summary.get(c.source)) / c.scale for c in COLUMNS}}
            for label, r in zip(policy_labels(results), results)]
    df = pd.DataFrame(rows, columns=["policy", *(c.key for c in COLUMNS)])
    for k in _INT_KEYS:  # counts are always present in a summary; keep them integers
        if df[k].notna().all():
            df[k] = df[k].astype("int64")
    return df


def format_value(value: Any, fmt: str) -> str:
    """A number for people: NaN/None → "–"."""
    if value is None or (isinstance(value, (float, np.floating)) and math.isnan(value)):
        return NA
    return fmt.format(value)


def display_table(df: pd.DataFrame, grouped: bool = False) -> pd.DataFrame:
    """comparison_table with every value formatted and human headers (for HTML and the console).

    `grouped`: two header rows, related columns under one spanning header ("JCT (h)" over mean,
    median, p95, p99), for the HTML report: one-line headers made its table wider than a 1400 px
    window. Otherwise one header per column (`Column.heading`)."""
    out = pd.DataFrame({"policy": df["policy"]})
    for c in COLUMNS:
        out[c.heading] = [format_value(v, c.fmt) for v in df[c.key]]
    if grouped:
        out.columns = pd.MultiIndex.from_tuples(
            [("policy", "")] + [(c.group, c.label) if c.group else (c.label, "") for c in COLUMNS])
    return out


def best_mean_jct_note(df: pd.DataFrame) -> str:
    """Which policy has the lowest mean JCT, and a warning when it got there by finishing fewer jobs.

    Mean JCT counts finished jobs only, so a policy that rejects or strands the long jobs looks
    fast; the note puts its finished count next to the best finished count.
    """
    ok = df[df["mean_jct_h"].notna()]
    if ok.empty:
        return "No policy finished a job, so there is no mean JCT to compare."
    best = ok.loc[ok["mean_jct_h"].idxmin()]
    note = (
        f"Best mean JCT: {best['policy']} with {format_value(best['mean_jct_h'], '{:,.2f}')} h "
        f"({best['finished']:,} of {best['jobs']:,} jobs finished)."
    )
    most = df.loc[df["finished"].idxmax()]
    if best["finished"] < most["finished"]:
        note += (
            f" But it finished fewer jobs than {most['policy']} ({most['finished']:,}); "
            "mean JCT counts finished jobs only."
        )
    return note


def render_table(results: Sequence[SimResult], title: str = "") -> Table:
    """The comparison for the console, with short headers so it fits ~120 columns.

    Finished is shown as "done/jobs" and rejected/unfinished in red when non-zero, so a policy
    that "wins" by finishing fewer jobs is obvious at a glance; the caption names the best mean JCT.
    """
    df = comparison_table(results)
    shown = display_table(df)
    table = Table(title=title or None, caption=best_mean_jct_note(df), caption_justify="left")
    table.add_column("policy", style="bold")
    table.add_column("done/jobs", justify="right")
    # a metric no policy has (no deadlines, no utilities) is noise on the console: leave it to the report
    cols = [c for c in COLUMNS if c.short and df[c.key].notna().any()]
    for c in cols:
        table.add_column(c.short, justify="right")
    bad = {"rejected", "unfinished"}
    for i in range(len(df)):
        done = f"{shown.at[i, _HEADING['finished']]}/{shown.at[i, _HEADING['jobs']]}"
        cells: list[Text | str] = [str(df.at[i, "policy"]), Text(done, style="bold red" if
                                   df.at[i, "finished"] < df.at[i, "jobs"] else "")]
        for c in cols:
            style = "bold red" if c.key in bad and df.at[i, c.key] > 0 else ""
            cells.append(Text(shown.at[i, c.heading], style=style))
        table.add_row(*cells)
    return table


def _json_value(v: Any) -> Any:
    """A summary value JSON can hold: NumPy scalars as Python, NaN/inf as None."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def summary_rows(results: Sequence[SimResult]) -> list[dict]:
    """Each policy's full summary dict (the raw units: seconds, fractions), JSON-serialisable."""
    return [{**{k: _json_value(v) for k, v in r.summary.items()}, "policy": label}
            for label, r in zip(policy_labels(results), results)]


def markdown_table(df: pd.DataFrame, cell: Callable[[Any], str] = str) -> str:
    """`df` as a markdown table, every value through `cell` (the experiments' RESULTS files)."""
    rows = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    return "\n".join(rows + ["| " + " | ".join(map(cell, r)) + " |" for r in df.itertuples(index=False)])
