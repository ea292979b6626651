"""The report's plots: JCT CDF, GPU utilization over time, queue length over time.

Figures are built on `matplotlib.figure.Figure` (Agg), never through pyplot, so plotting has no
global state: no backend switch, no figures left open, safe next to other code using matplotlib.

The timelines are step functions with one sample per event (hundreds of thousands for the Philly
trace). Plotting them raw would be slow and unreadable, so each is averaged exactly over a common
grid of bins (the integral of the step function per bin / bin width); the CDF is drawn from at most
a few thousand order statistics of the sorted JCTs, which is exact at those points.

Every policy is drawn in its own colour and marker, the same in every report (`style.py`);
baselines, published systems and other policies differ in line style and marker fill, and a legend
of more than a few policies lists them in those three groups, each under its heading.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import PercentFormatter

from dlsched.metrics.style import group_title, policy_styles
from dlsched.metrics.table import KINDS
from dlsched.sim.results import SimResult

GRID_POINTS = 500
CDF_POINTS = 4000
MARKS_PER_LINE = 8  # markers along each line: enough to follow it, few enough not to clutter
LEGEND_COLUMNS = 4  # below a 9-inch figure, at most this many columns of entries fit


def marker_positions(y: np.ndarray, i: int, n: int) -> list[int]:
    """Indices of `y` (its finite points) at which the i-th of n lines shows its marker: evenly
    spaced, each line shifted by i/n of the spacing, so lines lying on one another still show
    every marker (NaN-safe, unlike matplotlib's distance-based `markevery`)."""
    finite = np.flatnonzero(np.isfinite(np.asarray(y, dtype=float)))
    if len(finite) <= MARKS_PER_LINE:
        return finite.tolist()
    step = len(finite) / MARKS_PER_LINE
    at = (np.arange(MARKS_PER_LINE) + (i + 0.5) / max(n, 1)) * step
    return finite[np.minimum(at.astype(int), len(finite) - 1)].tolist()


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


def _legend(ax, entries: Sequence[tuple[Artist, str, str]]) -> None:
    """The legend of (artist, text, kind) entries, grouped baselines / published systems / others.

    A few policies: inside the axes, in that order. More: below the axes, where it cannot hide a
    line, one block of columns per group headed by the group's name (matplotlib fills a legend
    column by column, so each group is padded to whole columns)."""
    if not entries:
        return
    entries = sorted(entries, key=lambda e: KINDS.index(e[2]))  # stable: the run's order within a group
    if len(entries) <= 3:
        ax.legend([e[0] for e in entries], [e[1] for e in entries], loc="best", fontsize=9, framealpha=0.85)
        return
    groups = [[e for e in entries if e[2] == k] for k in KINDS]
    groups = [g for g in groups if g]
    rows = 3
    while sum(-(-(len(g) + 1) // rows) for g in groups) > LEGEND_COLUMNS:
        rows += 1
    blank = Line2D([], [], linestyle="none")
    handles: list[Artist] = []
    texts: list[str] = []
    headers: list[int] = []
    for g in groups:
        headers.append(len(texts))
        cells = [(blank, group_title(g[0][2]))] + [(h, t) for h, t, _ in g]
        cells += [(blank, "")] * (-len(cells) % rows)
        handles += [h for h, _ in cells]
        texts += [t for _, t in cells]
    legend = ax.figure.legend(handles, texts, loc="outside lower center", ncol=len(texts) // rows, fontsize=9,
                              frameon=False, handlelength=3.0, columnspacing=1.5)
    for i in headers:
        legend.get_texts()[i].set_fontweight("bold")


def to_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def jct_cdf(results: Sequence[SimResult], labels: Sequence[str]) -> Figure:
    """CDF of JCT over ALL submitted jobs: a policy's curve tops out at its finished fraction, so
    finishing fewer jobs shows as a lower plateau instead of a better-looking curve."""
    fig, ax = _new_figure()
    drawn: list[tuple[Artist, str, str]] = []
    lo = np.inf
    styles = policy_styles(labels)
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
        text = f"{label} ({done:,}/{total:,})"
        (line,) = ax.step(jct[pos], frac[pos], where="post", label=text,
                          markevery=marker_positions(frac[pos], i, len(results)), **styles[i].line())
        drawn.append((line, text, styles[i].kind))
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
    styles = policy_styles(labels)
    drawn: list[tuple[Artist, str, str]] = []
    for i, (label, r) in enumerate(zip(labels, results)):
        tl = r.timeline
        y = bin_average(tl["t"].to_numpy(dtype=float), tl[column].to_numpy(dtype=float), axis.edges)
        if per is not None:
            y = y / per[i]
        if np.isfinite(y).any():
            peak = max(peak, float(np.nanmax(y)))
        # a run that lasted an instant is one point: its marker shows it where a line would not
        (line,) = ax.plot(x, y, label=label, markevery=marker_positions(y, i, len(results)), **styles[i].line())
        drawn.append((line, label, styles[i].kind))
    ax.set_xlabel(f"time since first submission ({axis.unit_name})")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_xlim(x[0] - (x[1] - x[0]) / 2, x[-1] + (x[1] - x[0]) / 2)
    ax.set_ylim(bottom=0, top=max(peak * 1.05, 1.0) if per is None else max(1.02, peak * 1.02))
    _legend(ax, drawn)
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
    `group` of `summary` (columns group, policy, value, low, high), one bar per policy, in the
    policy's colour (hatched unless a baseline, as in `style.py`). The experiments and the sweep
    report compare policies across workloads with it."""
    groups, pols = list(dict.fromkeys(summary["group"])), list(dict.fromkeys(summary["policy"]))
    fig = Figure(figsize=(max(8, 1.4 * len(groups) * len(pols) / 4), 4.5))
    ax = fig.subplots()
    width = 0.8 / len(pols)
    styles = policy_styles(pols)
    for i, p in enumerate(pols):
        dp = summary[summary["policy"] == p].set_index("group").reindex(groups)
        x = np.arange(len(groups)) + i * width
        err = np.vstack([dp["value"] - dp["low"], dp["high"] - dp["value"]]).clip(min=0)
        err = np.nan_to_num(err)  # no interval (one seed): no whisker
        ax.bar(x, dp["value"], width, yerr=err, capsize=2, label=p, **styles[i].bar())
    ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2, groups)
    ax.set_ylabel(ylabel)
    if log:  # collapsed schedulers are 100x the best: log scale
        ax.set_yscale("log")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
