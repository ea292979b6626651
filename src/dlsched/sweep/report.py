"""A sweep's report: policies compared across cells, with confidence intervals over seeds.

Cells that differ only by seed (and policy) form a group: one trace, cluster and load. Per group,
each policy's metric is the mean over seeds with a 95% Student-t interval of that mean
(`scipy.stats.t.interval`, n-1 degrees of freedom, standard error of the seeds' values): how much
the figure would move with other seeds. One seed gives no interval ("n/a"); seeds that all agree
give a zero-width one. The ratio to the reference policy is paired by seed (the policy's value
over the reference's on the same seed), with the same t interval over those ratios.

Written: RESULTS.md, summary.csv (group × policy × metric), ratios.csv, cells.csv (one row per
cell), jobs/<cell>.csv (each cell's per-job table) and one PNG per metric.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from dlsched.metrics.intervals import t_interval
from dlsched.metrics.plots import ci_bars
from dlsched.metrics.table import markdown_table
from dlsched.sweep.cell import Cell
from dlsched.sweep.store import ResultsStore

#: metric column of a cell's row -> (label, which way is better)
METRICS: dict[str, tuple[str, str]] = {
    "mean_jct_h": ("mean JCT (h)", "lower"),
    "p95_jct_h": ("p95 JCT (h)", "lower"),
    "makespan_h": ("makespan (h)", "lower"),
    "gpu_utilization": ("GPU utilization", "higher"),
    "deadline_met_ratio": ("deadlines met", "higher"),
    "total_utility": ("total utility", "higher"),
}
GROUP = ("trace", "cluster", "load")
FILES = ("RESULTS.md", "summary.csv", "ratios.csv", "cells.csv")


def cell_table(cells: Sequence[Cell], store: ResultsStore) -> pd.DataFrame:
    """One row per finished cell of `cells`: its labels (from the grid as it is now) and results."""
    table = store.table()
    labels = pd.DataFrame([{**c.labels(), "key": c.key} for c in cells if store.done(c)])
    if not len(labels):
        return labels
    results = table.drop(columns=[c for c in labels.columns if c != "key" and c in table.columns])
    merged = labels.merge(results.drop_duplicates("key", keep="last"), on="key", how="left")
    merged["group"] = [" / ".join("load " + f"{v:g}" if k == "load" and v == v and v is not None else
                                  "as given" if k == "load" else str(v) for k, v in zip(GROUP, r))
                       for r in merged[list(GROUP)].itertuples(index=False)]
    return merged


def summarize(cells: pd.DataFrame, reference: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per group, policy and metric: mean and 95% t interval over seeds; per group, policy and
    metric: the ratio to `reference` paired by seed, with its interval)."""
    rows, ratios = [], []
    for group, g in cells.groupby("group", sort=False):
        for policy, gp in g.groupby("policy", sort=False):
            for m in METRICS:
                mean, lo, hi = t_interval(gp[m].to_numpy(float))
                rows.append({"group": group, "policy": policy, "metric": m, "seeds": len(gp), "value": mean,
                             "low": lo, "high": hi})
                if policy == reference or reference not in set(g["policy"]):
                    continue
                pair = gp[["seed", m]].merge(g[g["policy"] == reference][["seed", m]], on="seed", suffixes=("", "_ref"))
                with np.errstate(divide="ignore", invalid="ignore"):
                    r = pair[m].to_numpy(float) / pair[f"{m}_ref"].to_numpy(float)
                mean, lo, hi = t_interval(np.where(np.isfinite(r), r, np.nan))
                ratios.append({"group": group, "policy": policy, "reference": reference, "metric": m,
                               "pairs": len(pair), "ratio": mean, "low": lo, "high": hi})
    return pd.DataFrame(rows), pd.DataFrame(ratios)


def _fmt(v: float, lo: float, hi: float) -> str:
    if v != v:
        return "n/a"
    if lo != lo:
        return f"{v:.4g}"
    return f"{v:.4g} [{lo:.4g}, {hi:.4g}]"


def write_report(out: Path, cells: Sequence[Cell], store: ResultsStore, title: str, reference: str) -> Path:
    """Write the report of the finished cells of `cells` into `out`; returns RESULTS.md's path."""
    table = cell_table(cells, store)
    lines = [f"# {title}", "", "Written by `dlsched sweep`; every figure comes from the cells in results.parquet.", ""]
    if not len(table):
        lines.append("No cell has finished yet.")
        (out / "RESULTS.md").write_text("\n".join(lines) + "\n")
        return out / "RESULTS.md"
    summary, ratios = summarize(table, reference)
    table.drop(columns=["group"]).to_csv(out / "cells.csv", index=False)
    summary.to_csv(out / "summary.csv", index=False)
    ratios.to_csv(out / "ratios.csv", index=False)
    jobs_dir = out / "jobs"
    jobs_dir.mkdir(exist_ok=True)
    for c in cells:
        if store.done(c) and (jobs := store.jobs(c)) is not None:
            jobs.to_csv(jobs_dir / f"{c.name}.csv", index=False)
    seeds = sorted(set(table["seed"]))
    lines += [f"{len(table)} of {len(cells)} cells finished; seeds {', '.join(map(str, seeds))}. Each figure is "
              "the mean over seeds with its 95% Student-t interval [low, high]; a ratio is to "
              f"**{reference}**, paired by seed.", ""]
    policies = list(dict.fromkeys(table["policy"]))
    for m, (label, better) in METRICS.items():
        d = summary[summary["metric"] == m]
        if d["value"].isna().all():
            continue
        wide = d.assign(cell=[_fmt(v, lo, hi) for v, lo, hi in zip(d["value"], d["low"], d["high"])])
        shown = wide.pivot(index="policy", columns="group", values="cell").reindex(policies).reset_index()
        lines += [f"## {label} ({better} is better)", "", markdown_table(shown), "", f"![{label}]({m}.png)", ""]
        ci_bars(d, label, f"{label} ({better} is better), mean over seeds, 95% t interval", out / f"{m}.png",
                log=m.endswith("jct_h"))
        r = ratios[ratios["metric"] == m] if len(ratios) else ratios
        if len(r) and not r["ratio"].isna().all():
            r = r.assign(cell=[_fmt(v, lo, hi) for v, lo, hi in zip(r["ratio"], r["low"], r["high"])])
            shown = r.pivot(index="policy", columns="group", values="cell").reset_index()
            lines += [f"{label}, ratio to {reference} (paired by seed):", "", markdown_table(shown), ""]
    wall = table.groupby("policy", sort=False)["wall_s"].sum().round(1).reset_index()
    lines += ["## Wall time per policy, all cells (s)", "", markdown_table(wall), ""]
    (out / "RESULTS.md").write_text("\n".join(lines))
    return out / "RESULTS.md"


