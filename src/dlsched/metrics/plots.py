"""The report's plots: JCT CDF, GPU utilization over time, queue length over time.

Figures are built on `matplotlib.figure.Figure` (Agg), never through pyplot, so plotting has no
global state: no backend switch, no figures left open, safe next to other code using matplotlib.

The timelines are step functions with one sample per event (hundreds of thousands for the Philly
trace). Plotting them raw would be slow and unreadable, so each is averaged exactly over a common
grid of bins (the integral of the step function per bin / bin width); the CDF is drawn from at most
a few thousand order statistics of the sorted JCTs, which is exact at those points.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from dlsched.sim.results import SimResult

GRID_POINTS = 500
CDF_POINTS = 4000
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#7f7f7f", "#bcbd22")
_STYLES = ("-", "--", "-.", ":")


def line_style(i: int) -> dict:
    """Colour and dash for the i-th policy: distinct for 8 policies even in greyscale or overlapping."""
    return {"color": _COLORS[i % len(_COLORS)], "linestyle": _STYLES[i % len(_STYLES)], "linewidth": 1.8}


@dataclass(frozen=True)
class TimeAxis:
    """The common time grid of all policies: bin edges in seconds, and how to label them."""

    edges: np.ndarray  # seconds
    origin: float  # seconds; the earliest submit of any run
    unit: float  # seconds per displayed unit
    unit_name: str

    @property
    def centers(self) -> np.ndarray:
        return ((self.edges[:-1] + self.edges[1:]) / 2 - self.origin) / self.unit

    @property
    def bins_text(self) -> str:
        """E.g. "mean over 500 bins of 10.5 min", for plot titles."""
        w = float(self.edges[1] - self.edges[0])
        size, name = next((s, n) for s, n in ((86400.0, "days"), (3600.0, "h"), (60.0, "min"), (1.0, "s"))
                          if w >= s or s == 1.0)
        return f"mean over {len(self.edges) - 1} bins of {w / size:.3g} {name}"

    @classmethod
    def for_results(cls, results: Sequence[SimResult], points: int = GRID_POINTS) -> "TimeAxis":
        starts = [float(r.timeline["t"].iloc[0]) for r in results if len(r.timeline)]
        ends = [float(r.timeline["t"].iloc[-1]) for r in results if len(r.timeline)]
        t0 = min(starts) if starts else 0.0
        t1 = max(ends) if ends else 1.0
        t1 = t1 if t1 > t0 else t0 + 1.0
        unit, name = (86400.0, "days") if t1 - t0 > 3 * 86400 else (3600.0, "hours")
        return cls(np.linspace(t0, t1, points + 1), t0, unit, name)


def bin_average(t: np.ndarray, v: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Time-average of the step function (v[i] on [t[i], t[i+1])) over each bin; NaN outside the run.

    The integral of a step function is piecewise linear between its knots, so interpolating the
    cumulative integral at the bin edges is exact.
    """
    t = np.asarray(t, dtype=float)
    v = np.asarray(v, dtype=float)
    out = np.full(len(edges) - 1, np.nan)
    if len(t) == 0:
        return out
    cum = np.concatenate(([0.0], np.cumsum(v[:-1] * np.diff(t))))
    clipped = np.clip(edges, t[0], t[-1])
    covered = np.diff(clipped)
    area = np.diff(np.interp(clipped, t, cum))
    has = covered > 0
    out[has] = area[has] / covered[has]
    if len(t) == 1 or t[-1] == t[0]:  # a run that is one instant: show its single value there
        i = min(np.searchsorted(edges, t[0], side="right") - 1, len(out) - 1)
        out[max(i, 0)] = v[-1]
    return out


def cluster_gpus(result: SimResult) -> float | None:
    """The cluster's GPU count (from the summary), to turn busy GPUs into a utilization fraction."""
    gpus = result.summary.get("total_gpus")
    return float(gpus) if gpus else None


def _new_figure() -> tuple[Figure, object]:
    fig = Figure(figsize=(9, 4.8), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


def _legend(ax, n: int) -> None:
    """Inside the axes for a few policies; below them for more, where it cannot hide a line."""
    if not n:
        return
    if n <= 3:
        ax.legend(loc="best", fontsize=9, framealpha=0.85)
    else:
        ax.figure.legend(loc="outside lower center", ncol=min(n, 4), fontsize=9, frameon=False)


def to_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def jct_cdf(results: Sequence[SimResult], labels: Sequence[str]) -> Figure:
    """CDF of JCT over ALL submitted jobs: a policy's curve tops out at its finished fraction, so
    finishing fewer jobs shows as a lower plateau instead of a better-looking curve."""
    fig, ax = _new_figure()
    drawn = 0
    lo = np.inf
    for i, (label, r) in enumerate(zip(labels, results)):
        jct = np.sort(r.jobs.loc[r.jobs["status"] == "done", "jct"].to_numpy(dtype=float)) / 3600.0
        jct = jct[np.isfinite(jct)]
        total = len(r.jobs)
        if total == 0 or len(jct) == 0:
            continue
        done = len(jct)
        frac = np.arange(1, done + 1) / total
        if len(jct) > CDF_POINTS:  # exact order statistics at evenly spaced ranks, incl. the last
            idx = np.unique(np.linspace(0, len(jct) - 1, CDF_POINTS).astype(int))
            jct, frac = jct[idx], frac[idx]
        pos = jct > 0
        if pos.any():
            lo = min(lo, float(jct[pos][0]))
        ax.step(jct[pos], frac[pos], where="post", label=f"{label} ({done:,}/{total:,})", **line_style(i))
        drawn += 1
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of all submitted jobs")
    ax.set_title("JCT CDF (legend: finished/submitted)")
    if not drawn:
        ax.text(0.5, 0.5, "no policy finished a job", ha="center", va="center", transform=ax.transAxes)
    _legend(ax, drawn)
    return fig


def _timeline_figure(
    results: Sequence[SimResult], labels: Sequence[str], axis: TimeAxis, column: str,
    per: Sequence[float | None] | None, ylabel: str, title: str,
) -> Figure:
    fig, ax = _new_figure()
    x = axis.centers
    peak = 0.0
    for i, (label, r) in enumerate(zip(labels, results)):
        tl = r.timeline
        y = bin_average(tl["t"].to_numpy(dtype=float), tl[column].to_numpy(dtype=float), axis.edges)
        if per is not None:
            y = y / per[i]
        if np.isfinite(y).any():
            peak = max(peak, float(np.nanmax(y)))
        lone = np.isfinite(y).sum() == 1  # a run that lasted an instant: a line would be invisible
        ax.plot(x, y, label=label, marker="o" if lone else None, **line_style(i))
    ax.set_xlabel(f"time since first submission ({axis.unit_name})")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_xlim(x[0] - (x[1] - x[0]) / 2, x[-1] + (x[1] - x[0]) / 2)
    ax.set_ylim(bottom=0, top=max(peak * 1.05, 1.0) if per is None else max(1.02, peak * 1.02))
    _legend(ax, len(results))
    return fig


def utilization(results: Sequence[SimResult], labels: Sequence[str], axis: TimeAxis) -> Figure:
    """Busy GPUs (making progress; held partial gangs excluded) as a share of the cluster, bin-averaged."""
    sizes = [cluster_gpus(r) for r in results]
    bins = axis.bins_text
    if all(s for s in sizes):
        fig = _timeline_figure(results, labels, axis, "busy_gpus", sizes, "busy GPUs / cluster GPUs",
                               f"GPU utilization ({bins})")
        fig.axes[0].yaxis.set_major_formatter(PercentFormatter(1.0))
        return fig
    return _timeline_figure(results, labels, axis, "busy_gpus", None, "busy GPUs", f"Busy GPUs ({bins})")


def queue(results: Sequence[SimResult], labels: Sequence[str], axis: TimeAxis) -> Figure:
    """Jobs waiting (pending, including preempted ones) over time, bin-averaged."""
    bins = axis.bins_text
    return _timeline_figure(results, labels, axis, "queue", None, "waiting jobs", f"Queue length ({bins})")


def ci_bars(summary, ylabel: str, title: str, path, log: bool = False) -> None:
    """Grouped bars with confidence intervals, saved as a PNG at `path`: one group per distinct
    `group` of `summary` (columns group, policy, value, low, high), one bar per policy. The
    experiments and the sweep report compare policies across workloads with it."""
    from matplotlib import colormaps

    groups, pols = list(dict.fromkeys(summary["group"])), list(dict.fromkeys(summary["policy"]))
    fig = Figure(figsize=(max(8, 1.4 * len(groups) * len(pols) / 4), 4.5))
    ax = fig.subplots()
    width = 0.8 / len(pols)
    for i, p in enumerate(pols):
        dp = summary[summary["policy"] == p].set_index("group").reindex(groups)
        x = np.arange(len(groups)) + i * width
        err = np.vstack([dp["value"] - dp["low"], dp["high"] - dp["value"]]).clip(min=0)
        err = np.nan_to_num(err)  # no interval (one seed): no whisker
        ax.bar(x, dp["value"], width, yerr=err, capsize=2, label=p, color=colormaps["tab20"](i % 20))
    ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2, groups)
    ax.set_ylabel(ylabel)
    if log:  # collapsed schedulers are 100x the best: log scale
        ax.set_yscale("log")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
