"""The policy comparison: one row per policy, as a DataFrame, a console table, CSV, markdown or JSON.

All of them read `SimResult.summary` and nothing else, so the console, the JSON output, summary.csv
and the HTML report can never disagree. A missing value (no job finished, no job had a deadline)
stays NaN in the DataFrame and is shown as "–", never as 0.

The console table shows the columns that decide a comparison, as many as fit the terminal (most
important first), with full policy names and a legend; `--columns` picks others and the report has
them all. Frames the experiments print go through `frame_renderables`, which splits a wide frame
into blocks that fit instead of letting the terminal wrap it into fragments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
from rich import box
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from dlsched.metrics.intervals import t_interval
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
    means: str = ""  # the legend line under the console table

    @property
    def heading(self) -> str:
        """The full header on one line: "JCT (h): mean"."""
        return f"{self.group}: {self.label}" if self.group else self.label


COLUMNS: tuple[Column, ...] = (
    Column("jobs", "all", "jobs", fmt="{:,}", group="jobs"),
    Column("finished", "finished", "finished", fmt="{:,}", group="jobs"),
    Column("rejected", "rejected", "rejected", fmt="{:,}", short="rej.", group="jobs",
           means="jobs the policy rejected"),
    Column("unfinished", "unfinished", "unfinished", fmt="{:,}", short="unfin.", group="jobs",
           means="jobs still queued or running when the run ended"),
    Column("mean_jct_h", "mean", "mean_jct", HOUR, short="JCT h", group="JCT (h)",
           means="mean job completion time (submit to end) of the finished jobs, hours"),
    Column("median_jct_h", "median", "median_jct", HOUR, short="p50 h", group="JCT (h)",
           means="median job completion time, hours"),
    Column("p95_jct_h", "p95", "p95_jct", HOUR, short="p95 h", group="JCT (h)",
           means="95th-percentile job completion time, hours"),
    Column("p99_jct_h", "p99", "p99_jct", HOUR, short="p99 h", group="JCT (h)",
           means="99th-percentile job completion time, hours"),
    # every wait (first start and after each preemption) vs the wait before the first start only
    Column("mean_queueing_delay_h", "all waits", "mean_queueing_delay", HOUR, short="queue h",
           group="mean queueing (h)", means="mean time a finished job waited without GPUs (every wait), hours"),
    Column("mean_first_start_delay_h", "to first start", "mean_first_start_delay", HOUR, group="mean queueing (h)",
           short="wait1 h", means="mean wait before a finished job first started, hours"),
    Column("makespan_h", "makespan (h)", "makespan", HOUR, short="makesp. h",
           means="first arrival to last job end, hours"),
    Column("gpu_utilization", "GPU util.", "gpu_utilization", fmt="{:.1%}", short="util",
           means="GPU-time computing / GPU-time the cluster had, over the run"),
    Column("deadline_met_ratio", "deadlines met", "deadline_met_ratio", fmt="{:.1%}", short="ddl met",
           means="share of the jobs with a deadline that finished by it"),
    Column("total_utility", "total utility", "total_utility", fmt="{:,.1f}", short="utility",
           means="sum of the jobs' utilities (OASiS' objective)"),
    Column("total_fee_usd", "total fee (USD)", "total_fee", fmt="{:,.0f}", short="fee $",
           means="GPU-hours times the nodes' prices, USD"),
    Column("held_gpu_hours", "held GPU·h (partial gangs)", "held_gpu_hours", fmt="{:,.1f}", short="held GPU·h",
           means="GPU-hours bound to jobs whose gang was only partly placed (wasted)"),
    Column("mean_nodes_spanned", "nodes spanned per job", "mean_nodes_spanned", fmt="{:.2f}", short="nodes",
           means="time-weighted nodes a running job spans (1 = one node)"),
    Column("restarts", "restarts", "restarts", fmt="{:,}", short="restarts",
           means="job restarts (resizes, preemptions, failures)"),
    Column("preemptions", "preemptions", "preemptions", fmt="{:,}", short="preempt.",
           means="jobs stopped to free GPUs for others"),
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
    if fmt == "{:,}" and isinstance(value, (float, np.floating)):  # a count, or a mean of counts over seeds
        return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
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
        f"({format_value(best['finished'], '{:,}')} of {format_value(best['jobs'], '{:,}')} jobs finished)."
    )
    most = df.loc[df["finished"].idxmax()]
    if best["finished"] < most["finished"]:
        note += (
            f" But it finished fewer jobs than {most['policy']} ({format_value(most['finished'], '{:,}')}); "
            "mean JCT counts finished jobs only."
        )
    return note


# The console's columns, most deciding first: as many as fit the terminal are shown, in this order.
CONSOLE_ORDER: tuple[str, ...] = (
    "mean_jct_h", "deadline_met_ratio", "total_utility", "gpu_utilization", "mean_queueing_delay_h", "p95_jct_h",
    "held_gpu_hours", "restarts", "makespan_h", "total_fee_usd", "mean_nodes_spanned", "median_jct_h", "p99_jct_h",
    "preemptions", "mean_first_start_delay_h",
)
_BY_KEY = {c.key: c for c in COLUMNS}
_DONE_MEANS = "done/jobs: jobs finished of all (red: some were rejected or never finished)"
KINDS = ("baseline", "published system", "other")


def column_keys(spec: str | None) -> list[str] | None:
    """`--columns`: comma-separated column keys (as in summary.csv: mean_jct_h, p95_jct_h, ...) or
    console headers ("p95 h"); None or "" = the default choice. Unknown names: one error naming them all."""
    if not spec:
        return None
    from dlsched.core.errors import DlschedError

    by_name = {c.key: c.key for c in COLUMNS} | {c.short: c.key for c in COLUMNS if c.short}
    keys, unknown = [], []
    for name in (n.strip() for n in spec.split(",")):
        if name in ("policy", ""):
            continue
        (keys.append(by_name[name]) if name in by_name else unknown.append(name))
    if unknown:
        raise DlschedError(f"--columns: unknown column(s) {', '.join(map(repr, unknown))}; "
                           f"choose from {', '.join(c.key for c in COLUMNS)}")
    return list(dict.fromkeys(keys))


def policy_kind(label: str) -> str:
    """"baseline", "published system" or "other" for a row label ("dragon", "fifo (2)", "qos (oracle)")."""
    from dlsched.policies.registry import BASELINES, HETERO_BASELINES, PUBLISHED

    name = label.split(" (")[0]
    return "baseline" if name in BASELINES + HETERO_BASELINES else "published system" if name in PUBLISHED else "other"


def _width(console: Console, renderable: RenderableType) -> int:
    """The width `renderable` needs to show every cell whole."""
    return Measurement.get(console, console.options.update(max_width=100_000), renderable).maximum


def render_table(results: Sequence[SimResult], title: str = "", width: int | None = None,
                 columns: Sequence[str] | None = None) -> "ComparisonTable":
    """The comparison for the console: full policy names, the deciding columns that fit the width
    it is printed at (or `width`), rows grouped baselines / published systems / others, a legend.

    Finished is shown as "done/jobs" and rejected/unfinished in red when non-zero, so a policy that
    "wins" by finishing fewer jobs is obvious at a glance; the last line names the best mean JCT.
    `columns` (keys of COLUMNS) replaces the automatic choice: shown whatever the width.
    """
    return ComparisonTable(comparison_table(results), title, width, None if columns is None else list(columns))


def render_intervals(mean: pd.DataFrame, half: pd.DataFrame, seeds: Sequence[int], title: str = "",
                     columns: Sequence[str] | None = None) -> "ComparisonTable":
    """`--seeds`: the comparison of the means over seeds, each figure with its 95% interval (±)."""
    return ComparisonTable(mean, title, None, None if columns is None else list(columns), half, list(seeds))


@dataclass
class ComparisonTable:
    """A rich renderable that chooses its columns when printed, for the console's own width."""

    df: pd.DataFrame
    title: str = ""
    width: int | None = None
    columns: list[str] | None = None
    half: pd.DataFrame | None = None  # `--seeds`: df holds means, this the 95% intervals' half-widths
    seeds: Sequence[int] = ()

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        df, width = self.df, self.width or options.max_width
        shown = display_table(df)
        kinds = [policy_kind(p) for p in df["policy"]]
        order = sorted(range(len(df)), key=lambda i: KINDS.index(kinds[i]))  # stable: the user's order within a kind

        def build(cols: Sequence[Column]) -> Table:
            table = Table(title=self.title or None, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                          show_edge=False)
            table.add_column("policy", style="bold", no_wrap=True)
            table.add_column("done/jobs", justify="right", no_wrap=True)
            for c in cols:
                table.add_column(c.short or c.key, justify="right", no_wrap=True)
            for n, i in enumerate(order):
                finished = df.at[i, "finished"]
                done = (f"{shown.at[i, _HEADING['finished']]}" if float(finished).is_integer() else
                        f"{finished:,.1f}") + f"/{shown.at[i, _HEADING['jobs']]}"
                cells: list[Text | str] = [str(df.at[i, "policy"]), Text(done, style="bold red" if
                                           df.at[i, "finished"] < df.at[i, "jobs"] else "")]
                for c in cols:
                    style = "bold red" if c.key in ("rejected", "unfinished") and df.at[i, c.key] > 0 else ""
                    cells.append(Text(shown.at[i, c.heading] + self._plus_minus(i, c), style=style))
                last_of_kind = n + 1 < len(order) and kinds[order[n + 1]] != kinds[i]
                table.add_row(*cells, end_section=last_of_kind)
            return table

        if self.columns is not None:
            cols = [_BY_KEY[k] for k in self.columns]
        else:
            # a metric no policy has (no deadlines, no utilities, nothing held) is noise on the console
            wanted = [_BY_KEY[k] for k in CONSOLE_ORDER if df[k].notna().any() and
                      not (k in ("held_gpu_hours", "total_fee_usd") and not (df[k].fillna(0) > 0).any())]
            cols = []
            for c in wanted:
                if _width(console, build([*cols, c])) <= width:
                    cols.append(c)
            cols = [c for c in COLUMNS if c in cols]  # in the report's order, related columns side by side
        present = sorted({kinds[i] for i in order}, key=KINDS.index)
        legend = [_DONE_MEANS] + [f"{c.short or c.key}: {c.means}" for c in cols if c.means]
        if self.half is not None:
            spread = any(self._plus_minus(i, c) for i in range(len(df)) for c in cols)
            legend.append(f"±: half-width of the 95% Student-t interval of the mean over {len(self.seeds)} seeds "
                          f"({', '.join(map(str, self.seeds))}); every figure is that mean"
                          + ("" if spread else "; no ± shown: every seed gave the same figures"))
        if len(present) > 1:
            legend.append("rows: " + ", then ".join(f"{k}s" for k in present) + " (a gap between the groups)")
        hidden = len(COLUMNS) - 2 - len(cols)  # jobs and finished are the done/jobs column
        if hidden > 0:
            legend.append(f"{hidden} more columns in the report's summary.csv; pick them with --columns "
                          "(names: summary.csv's headers)")
        yield build(cols)
        yield Text("\n".join(legend), style="dim")
        yield Text(best_mean_jct_note(df))

    def _plus_minus(self, i: int, c: Column) -> str:
        """" ±x" after a mean over seeds (in the column's own format), "" without seeds or spread."""
        if self.half is None:
            return ""
        h = self.half.at[i, c.key]
        return "" if h is None or not np.isfinite(h) or h == 0 else " ±" + format_value(h, c.fmt)


def seed_intervals(per_seed: Sequence[Sequence[SimResult]], seeds: Sequence[int]) -> tuple[pd.DataFrame, ...]:
    """`--seeds`: each seed's comparison stacked (a `seed` column first), the mean per policy and
    column over the seeds, and the half-width of its 95% Student-t interval (NaN for one seed), the
    same interval the sweep runner reports (`metrics.intervals.t_interval`). Rows keep the first seed's
    policy order."""

    frames = [comparison_table(r).assign(seed=s) for r, s in zip(per_seed, seeds)]
    long = pd.concat(frames, ignore_index=True)[["seed", "policy", *(c.key for c in COLUMNS)]]
    order = list(frames[0]["policy"])
    mean_rows, half_rows = [], []
    for policy in order:
        sub = long[long.policy == policy]
        stats = {c.key: t_interval(sub[c.key].to_numpy(dtype=float)) for c in COLUMNS}
        mean_rows.append({"policy": policy, **{k: m for k, (m, _, _) in stats.items()}})
        half_rows.append({"policy": policy, **{k: (hi - lo) / 2 for k, (_, lo, hi) in stats.items()}})
    return long, pd.DataFrame(mean_rows), pd.DataFrame(half_rows)


def interval_rows(mean: pd.DataFrame, half: pd.DataFrame, output_format: str,
                  columns: Sequence[str] | None = None) -> str:
    """`--seeds` rows for scripts: per policy and column the mean and its 95% interval
    (`<key>`, `<key>_low`, `<key>_high`) as CSV or markdown, or JSON with units in the keys."""
    keys = list(columns) if columns is not None else [c.key for c in COLUMNS]
    out = pd.DataFrame({"policy": mean["policy"]})
    for k in keys:
        out[k], out[f"{k}_low"], out[f"{k}_high"] = mean[k], mean[k] - half[k], mean[k] + half[k]
    if output_format == "csv":
        return out.to_csv(index=False)
    if output_format == "markdown":
        return markdown_table(out, lambda v: format_value(v, "{:,.4g}") if isinstance(v, float) else str(v)) + "\n"
    if output_format == "json":
        import json

        rows = [{"kind": policy_kind(r["policy"]), **{k: _json_value(v) for k, v in r.items()}}
                for r in out.to_dict(orient="records")]
        return json.dumps(rows, indent=2) + "\n"
    raise ValueError(output_format)


def frame_renderables(df: pd.DataFrame, width: int | None = None, title: str = "", digits: int = 3) -> list[Table]:
    """A DataFrame the experiments print, as console tables that fit `width`: when it is wider,
    its columns are split into blocks, each repeating the label columns (the non-numeric ones,
    moved to the front), so no number is cut or wrapped into fragments."""
    console = Console(width=width) if width else Console()
    labels = [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])] or list(df.columns[:1])
    df = df[labels + [c for c in df.columns if c not in labels]]

    def cell(v: Any) -> str:
        if isinstance(v, (float, np.floating)):
            return format_value(v, f"{{:,.{digits}f}}" if abs(v) < 1e15 else "{:.3g}")
        return NA if v is None else str(v)

    def build(cols: Sequence[Any], head: str) -> Table:
        table = Table(title=head or None, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, show_edge=False)
        for c in cols:
            numeric = pd.api.types.is_numeric_dtype(df[c])
            table.add_column(str(c), justify="right" if numeric else "left", no_wrap=True)
        for row in df[list(cols)].itertuples(index=False):
            table.add_row(*map(cell, row))
        return table

    lead, rest = labels, list(df.columns[len(labels):])
    blocks: list[list[Any]] = []
    for c in rest:
        if blocks and _width(console, build(lead + blocks[-1] + [c], "")) <= console.width:
            blocks[-1].append(c)
        else:
            blocks.append([c])
    if not blocks:
        return [build(lead, title)]
    return [build(lead + b, title if n == 0 else "") for n, b in enumerate(blocks)]


# JSON rows carry their unit in the key: seconds, USD; fractions (utilization, ratios) are 0..1.
JSON_KEYS = {"mean_jct": "mean_jct_s", "median_jct": "median_jct_s", "p95_jct": "p95_jct_s", "p99_jct": "p99_jct_s",
             "mean_queueing_delay": "mean_queueing_delay_s", "mean_first_start_delay": "mean_first_start_delay_s",
             "makespan": "makespan_s", "total_fee": "total_fee_usd"}


def _json_value(v: Any) -> Any:
    """A summary value JSON can hold: NumPy scalars as Python, NaN/inf as None."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def summary_rows(results: Sequence[SimResult]) -> list[dict]:
    """Each policy's full summary dict, JSON-serialisable, every key naming its unit where it has one
    (`mean_jct_s`, `held_gpu_hours`, `total_fee_usd`; utilization and ratios are fractions 0..1),
    plus its kind (baseline, published system, other)."""
    return [{"policy": label, "kind": policy_kind(label),
             **{JSON_KEYS.get(k, k): _json_value(v) for k, v in r.summary.items() if k != "policy"}}
            for label, r in zip(policy_labels(results), results)]


FORMATS = ("table", "csv", "markdown", "json")


def format_rows(results: Sequence[SimResult], output_format: str, columns: Sequence[str] | None = None) -> str:
    """The comparison as text for stdout: 'csv' (summary.csv's columns and units), 'markdown' (the
    report's headers), 'json' (every summary value, units in the keys). `columns` narrows csv/markdown."""
    df = comparison_table(results)
    if output_format == "csv":
        return (df if columns is None else df[["policy", *columns]]).to_csv(index=False)
    if output_format == "markdown":
        shown = display_table(df)
        if columns is not None:
            shown = shown[["policy", *(_BY_KEY[k].heading for k in columns)]]
        return markdown_table(shown) + "\n"
    if output_format == "json":
        import json

        return json.dumps(summary_rows(results), indent=2) + "\n"
    raise ValueError(output_format)


def markdown_table(df: pd.DataFrame, cell: Callable[[Any], str] = str) -> str:
    """`df` as a markdown table, every value through `cell` (the experiments' RESULTS files)."""
    rows = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    return "\n".join(rows + ["| " + " | ".join(map(cell, r)) + " |" for r in df.itertuples(index=False)])
