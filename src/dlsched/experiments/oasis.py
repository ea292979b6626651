"""Rerun OASiS' evaluation (INFOCOM 2018, Sec. V-A): Fig. 3 (total utility vs number of jobs, T = 300)
and Fig. 4 (actual minus target completion time per utility class, 100 time-sensitive + 100
time-critical jobs, T = 100), on the paper's setup (`traces.oasis_workload`), plus OASiS on a real
trace with duration-derived utilities.

Every number written comes from the runs; the paper's values (read off its bar charts, see
shared/research/oasis-dualagent.md A.9) are printed next to them and labelled as the paper's.
All policies run with no restart overhead (the paper ignores set-up overheads, A.1) and stop at the
horizon T: a job not done by then earns nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from dlsched.core.errors import ConfigError
from dlsched.core.utility import classify, with_default_utilities
from dlsched.metrics.style import policy_styles
from dlsched.metrics.table import markdown_table
from dlsched.policies.registry import UTILITY_DRIVEN, make_policy
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.sweep.cell import CellResult, content_key
from dlsched.sweep.runner import run_afresh
from dlsched.sweep.store import ResultsStore
from dlsched.throughput.oasis_model import OASiSModel
from dlsched.traces.oasis_workload import oasis_workload, paper_cluster

POLICIES = ("oasis", "fifo", "drf", "rrh", "dorm")
SLOT = 3600.0
#: the paper's Fig. 3, total utility x 10^4 (A.9), for comparison only
PAPER_FIG3 = {
    100: {"oasis": 0.30, "fifo": 0.09, "drf": 0.23, "rrh": 0.07, "dorm": 0.27},
    200: {"oasis": 0.51, "fifo": 0.11, "drf": 0.14, "rrh": 0.15, "dorm": 0.34},
    300: {"oasis": 0.67, "fifo": 0.04, "drf": 0.09, "rrh": 0.18, "dorm": 0.39},
    400: {"oasis": 0.75, "fifo": 0.09, "drf": 0.10, "rrh": 0.19, "dorm": 0.37},
}
#: the paper's Fig. 4 medians (slots): (time-critical, time-sensitive)
PAPER_FIG4 = {"oasis": (-2, 0), "fifo": (50, 63), "drf": (49, 43), "rrh": (98, 55), "dorm": (48, 50)}

Progress = Callable[[str], None]


def _policy(name: str, horizon: int, options: dict | None = None):
    if name == "oasis":
        return make_policy("oasis", slot_seconds=SLOT, horizon=horizon, rolling=False, **(options or {}))
    return make_policy(name, **(options or {}))


#: What an `OasisCell` keeps of its run besides its row: OASiS' admission decisions (Fig. 3),
#: every job's class and completion against its target (Fig. 4), or nothing (the variants).
DETAILS = ("decisions", "jobs", "")


@dataclass(frozen=True)
class OasisCell:
    """One policy on the paper's setup (`oasis_workload(num_jobs, seed)` with `mix`, on
    `paper_cluster(seed)`, T = `horizon` slots), as a sweep cell (`dlsched.sweep`): a Fig. 3 or
    Fig. 4 run, or a design variant (`label`, `options`, `restart_overhead`). Its row carries the
    run's totals and the wall time of the simulation itself (measured in the cell, where it ran);
    `detail` says which per-job table it keeps (`DETAILS`)."""

    num_jobs: int
    seed: int
    horizon: int
    policy: str
    mix: tuple[float, ...] | None = None
    options: dict = field(default_factory=dict)
    restart_overhead: float = 0.0
    label: str = ""
    detail: str = ""

    @property
    def key(self) -> str:
        return content_key({"kind": "oasis", "jobs": self.num_jobs, "seed": self.seed, "horizon": self.horizon,
                            "policy": self.policy, "mix": self.mix, "options": self.options,
                            "restart_overhead": self.restart_overhead, "label": self.label, "detail": self.detail})

    @property
    def name(self) -> str:
        return f"n{self.num_jobs}-s{self.seed}-T{self.horizon}-{self.policy}-{self.key}"

    def labels(self) -> dict:
        return {"jobs": self.num_jobs, "seed": self.seed, "policy": self.policy, "variant": self.label}

    def run(self) -> CellResult:
        if self.detail not in DETAILS:
            raise ConfigError(f"unknown OASiS cell detail {self.detail!r}; known: {DETAILS}")
        kw = {} if self.mix is None else {"mix": self.mix}
        jobs = oasis_workload(self.num_jobs, seed=self.seed, slot_seconds=SLOT,
                              arrival_slots=max(1, (2 * self.horizon) // 3), **kw)
        cluster = paper_cluster(seed=self.seed)
        cfg = SimConfig(seed=self.seed, restart_overhead=self.restart_overhead, max_time=self.horizon * SLOT)
        pol = _policy(self.policy, self.horizon, self.options)
        t0 = time.perf_counter()
        res = simulate(jobs, cluster, pol, OASiSModel(), cfg)
        wall = time.perf_counter() - t0
        s = res.summary
        row = {**self.labels(), "restart_overhead_s": self.restart_overhead, "total_utility": s["total_utility"],
               "finished": s["finished"], "rejected": s["rejected"], "unfinished": s["unfinished"],
               "restarts": s["restarts"], "wall_seconds": wall}
        if self.policy == "oasis" and pol.online.terms:
            c = pol.online.current()
            row.update(U1_gpu=float(c.U1[0]), L1=float(c.L1), eta1=float(c.eta1), alpha=float(c.alpha))
        if self.policy == "dorm":
            row.update(dorm_fallbacks=int(pol.fallbacks))
        table = None
        if self.detail == "decisions" and self.policy == "oasis" and pol.decisions:
            table = pd.DataFrame([dict(jobs=self.num_jobs, seed=self.seed, **d) for d in pol.decisions])
        elif self.detail == "jobs":
            spec = {j.job_id: j for j in jobs}
            rows = []
            for r in res.jobs.itertuples():
                j = spec[r.job_id]
                cls = classify(j.utility, SLOT)
                rows.append(dict(seed=self.seed, policy=self.policy, cls=cls.value if cls else "", status=r.status,
                                 delta=(r.jct - j.utility.gamma3) / SLOT if r.status == "done" else np.nan,
                                 utility=r.utility))
            table = pd.DataFrame(rows)
        return CellResult(row, table)


def _run(cells: list[OasisCell], out: Path, step: Progress | None, message: Callable[[OasisCell], str],
         workers: int, address: str | None) -> ResultsStore:
    """Run `cells` into `out/cells` (emptied first: the folder is this run's), saying
    `message(cell)` to `step` as each finishes; returns the store."""
    return run_afresh(cells, out / "cells", workers=workers, address=address,
                      on_done=None if step is None else lambda c, _row: step(message(c)))


def _setting_message(c: OasisCell) -> str:
    return f"{c.policy} {c.num_jobs} jobs seed {c.seed}"


def fig3_cells(job_counts: Sequence[int], seeds: Sequence[int], horizon: int = 300,
               policies: Sequence[str] = POLICIES) -> list[OasisCell]:
    """Fig. 3's runs: every (job count, seed, policy), keeping OASiS' admission decisions."""
    return [OasisCell(n, seed, horizon, name, detail="decisions") for n in job_counts for seed in seeds for name in policies]


def fig4_cells(seeds: Sequence[int], horizon: int = 100, policies: Sequence[str] = POLICIES) -> list[OasisCell]:
    """Fig. 4's runs: 100 time-sensitive + 100 time-critical jobs per seed, every policy, keeping every job."""
    return [OasisCell(200, seed, horizon, name, mix=(0.0, 0.5, 0.5), detail="jobs") for seed in seeds for name in policies]


FIG3_COLUMNS = ["jobs", "seed", "policy", "total_utility", "finished", "rejected", "unfinished", "wall_seconds"]


def fig3(cells: list[OasisCell], store: ResultsStore) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (jobs, seed, policy) of the finished Fig. 3 `cells`: total utility and counts; and every
    OASiS admission decision."""
    return store.rows(cells, FIG3_COLUMNS), store.stacked_jobs(cells)


def fig4(cells: list[OasisCell], store: ResultsStore) -> pd.DataFrame:
    """Actual minus target completion time (slots) of every job of the finished Fig. 4 `cells`, with its class."""
    return store.stacked_jobs(cells)


# ---------------------------------------------------------------------- tables and plots
def fig3_table(df: pd.DataFrame) -> pd.DataFrame:
    """Mean total utility per job count and policy, the OASiS ratios, and the paper's ratios."""
    mean = df.groupby(["jobs", "policy"])["total_utility"].mean().unstack("policy")
    out = mean.copy()
    for other in [p for p in mean.columns if p != "oasis"]:
        if "oasis" in mean.columns:
            out[f"oasis/{other}"] = mean["oasis"] / mean[other]
            out[f"paper oasis/{other}"] = [
                PAPER_FIG3[n]["oasis"] / PAPER_FIG3[n][other] if n in PAPER_FIG3 else np.nan for n in mean.index
            ]
    return out


def fig4_table(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (pol, cls), g in df.groupby(["policy", "cls"]):
        d = g["delta"].dropna()
        paper = PAPER_FIG4.get(pol, (np.nan, np.nan))
        rows.append(dict(policy=pol, cls=cls, jobs=len(g), completed=len(d),
                         median=float(d.median()) if len(d) else np.nan,
                         q25=float(d.quantile(0.25)) if len(d) else np.nan, q75=float(d.quantile(0.75)) if len(d) else np.nan,
                         paper_median=paper[0] if cls == "time-critical" else paper[1]))
    return pd.DataFrame(rows)


def _plots(t3: pd.DataFrame, d4: pd.DataFrame, out: Path) -> None:
    pols = [p for p in POLICIES if p in t3.columns]
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    x = np.arange(len(t3.index))
    w = 0.8 / max(1, len(pols))
    styles = policy_styles(pols)
    for i, p in enumerate(pols):
        ax.bar(x + i * w, t3[p].to_numpy(), w, label=p, **styles[i].bar())
    ax.set_xticks(x + 0.4 - w / 2, [str(n) for n in t3.index])
    ax.set_xlabel("number of jobs")
    ax.set_ylabel("total utility (mean over seeds)")
    ax.set_title("OASiS Fig. 3 rerun (T = 300)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fig3_total_utility.png", dpi=120)

    fig = Figure(figsize=(9, 4))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, cls in zip(axes, ("time-critical", "time-sensitive")):
        data = [d4[(d4.policy == p) & (d4.cls == cls)]["delta"].dropna().to_numpy() for p in pols]
        boxes = ax.boxplot([d if len(d) else [np.nan] for d in data], showfliers=False, patch_artist=True,
                           medianprops={"color": "black"})
        for box, st in zip(boxes["boxes"], styles):  # each policy in its colour, as in every dlsched plot
            box.set(facecolor=st.color, alpha=0.75, hatch=st.hatch, edgecolor="black")
        ax.set_xticks(range(1, len(pols) + 1), pols)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(cls)
    axes[0].set_ylabel("actual - target completion (slots), completed jobs")
    fig.suptitle("OASiS Fig. 4 rerun (100 time-sensitive + 100 time-critical jobs, T = 100)")
    fig.tight_layout()
    fig.savefig(out / "fig4_completion_vs_target.png", dpi=120)


def _md(df: pd.DataFrame, floatfmt: str = ".3g") -> str:
    return markdown_table(df, lambda v: format(v, floatfmt) if isinstance(v, (float, np.floating)) else str(v))


def run_experiment(out: Path, job_counts, seeds, fig4_seeds=None, step: Progress | None = None, workers: int = 1,
                   address: str | None = None) -> dict:
    """Fig. 3 and Fig. 4; writes CSVs, a markdown summary and PNGs into `out`. Returns the tables.

    Every run is a sweep cell (`OasisCell`, stored in `out/cells`): in this process with one
    worker, as Ray tasks with more or with an `address`; the tables are read back in grid order."""
    if not job_counts or any(n <= 0 for n in job_counts):
        raise ConfigError("--jobs needs positive job counts, e.g. 100,200,300,400")
    if not seeds:
        raise ConfigError("--seeds must be >= 1")
    out.mkdir(parents=True, exist_ok=True)
    c3, c4 = fig3_cells(job_counts, seeds), fig4_cells(fig4_seeds if fig4_seeds is not None else seeds)
    store = _run([*c3, *c4], out, step, _setting_message, workers, address)
    raw3, dec = fig3(c3, store)
    raw4 = fig4(c4, store)
    t3, t4 = fig3_table(raw3), fig4_table(raw4)
    raw3.to_csv(out / "fig3_runs.csv", index=False)
    dec.to_csv(out / "oasis_decisions.csv", index=False)
    t3.to_csv(out / "fig3_table.csv")
    raw4.to_csv(out / "fig4_jobs.csv", index=False)
    t4.to_csv(out / "fig4_table.csv", index=False)
    ms = dec["decision_seconds"].to_numpy() * 1000 if len(dec) else np.array([np.nan])
    timing = dict(mean_ms=float(np.mean(ms)), p95_ms=float(np.percentile(ms, 95)), max_ms=float(np.max(ms)))
    _plots(t3, raw4, out)
    md = [
        "# OASiS evaluation rerun",
        "",
        f"Seeds: {list(seeds)}; job counts: {list(job_counts)}; slot = {SLOT:g} s; restart overhead 0.",
        "",
        "## Fig. 3: total utility (mean over seeds), OASiS ratios, and the paper's ratios",
        "",
        _md(t3.reset_index()),
        "",
        "## Fig. 4: actual - target completion time (slots) of completed jobs",
        "",
        _md(t4),
        "",
        f"OASiS decision time per arrival (Fig. 3 runs): mean {timing['mean_ms']:.1f} ms, "
        f"p95 {timing['p95_ms']:.1f} ms, max {timing['max_ms']:.1f} ms.",
    ]
    (out / "summary.md").write_text("\n".join(md) + "\n")
    return {"fig3": t3, "fig4": t4, "timing": timing, "fig3_runs": raw3}


@lru_cache(maxsize=2)  # the policies of one trace share it when the cells run in one process
def _trace_setup(trace: str, limit: int | None, seed: int):
    """The trace's jobs (with `from_duration` default utilities), its cluster, the throughput model,
    whether any job leaves its work undeclared, and OASiS' slots from the trace's durations."""
    from dlsched.paths import traces_dir
    from dlsched.policies.oasis_jobs import workload_slots
    from dlsched.presets import trace_cluster
    from dlsched.throughput.registry import default_throughput
    from dlsched.traces import load_trace

    wl = load_trace(trace, None, limit=limit, seed=seed, profiles="off")
    jobs, _ = with_default_utilities(wl.jobs)
    undeclared = any(not j.work_known for j in jobs)
    return jobs, trace_cluster(wl), default_throughput(traces_dir()), undeclared, workload_slots(jobs)


@dataclass(frozen=True)
class OasisTraceCell:
    """One policy on a real trace (`trace`: its path, as a string, loaded inside the cell), as a
    sweep cell; the row is `run_trace`'s, its wall time measured in the cell."""

    trace: str
    limit: int | None
    seed: int
    policy: str

    @property
    def key(self) -> str:
        return content_key({"kind": "oasis-trace", "trace": self.trace, "limit": self.limit, "seed": self.seed,
                            "policy": self.policy})

    @property
    def name(self) -> str:
        return f"{Path(self.trace).stem}-s{self.seed}-{self.policy}"

    def labels(self) -> dict:
        return {"trace": self.trace, "seed": self.seed, "policy": self.policy}

    def run(self) -> CellResult:
        jobs, cluster, tp, undeclared, picked = _trace_setup(self.trace, self.limit, self.seed)
        name = self.policy  # utility-driven policies plan from the work: an oracle when jobs declare none
        opts = dict(zip(("slot_seconds", "horizon"), picked)) if name == "oasis" and picked else {}
        if name in UTILITY_DRIVEN and undeclared:
            opts["oracle"] = True
        pol = make_policy(name, **opts)
        t0 = time.perf_counter()
        res = simulate(jobs, cluster, pol, tp, SimConfig(seed=self.seed))
        s = res.summary
        return CellResult(dict(policy=f"{name} (oracle)" if s["oracle"] else name, jobs=s["jobs"],
                               total_utility=s["total_utility"], finished=s["finished"], rejected=s["rejected"],
                               rejection_rate=s["rejected"] / max(1, s["jobs"]), mean_jct_h=s["mean_jct"] / 3600,
                               wall_seconds=time.perf_counter() - t0))


TRACE_COLUMNS = ["policy", "jobs", "total_utility", "finished", "rejected", "rejection_rate", "mean_jct_h", "wall_seconds"]


def run_trace(trace: str, limit: int | None, policies, out: Path, seed: int = 0, step: Progress | None = None,
              workers: int = 1, address: str | None = None) -> pd.DataFrame:
    """Policies on a real trace; every job gets the `from_duration` default utility so total utility
    is comparable. One sweep cell per policy (`OasisTraceCell`, stored in `out/cells`)."""
    path = Path(trace)
    cells = [OasisTraceCell(str(path.resolve()) if path.exists() else trace, limit, seed, name) for name in policies]
    out.mkdir(parents=True, exist_ok=True)
    store = _run(cells, out, step, lambda c: f"{c.policy} on {Path(trace).name}", workers, address)
    df = store.rows(cells, TRACE_COLUMNS)
    df.to_csv(out / "trace_table.csv", index=False)
    (out / "trace_summary.md").write_text(f"# Policies on {trace} (limit {limit})\n\n" + _md(df) + "\n")
    return df


# ---------------------------------------------------------------------- variants (decisions, Fig. 6 points)
#: (label, policy, options, restart overhead s): the design choices docs/OASIS.md argues for, and the
#: U/L scale sensitivity (Fig. 6 points), each on the Fig. 3 workload at one size and seed.
VARIANTS: tuple[tuple[str, str, dict, float], ...] = (
    ("oasis default", "oasis", {}, 0.0),
    ("oasis order=value", "oasis", {"order": "value"}, 0.0),
    ("oasis l_min_fraction=0 (literal eq. 25/26)", "oasis", {"l_min_fraction": 0.0}, 0.0),
    ("oasis release=False", "oasis", {"release": False}, 0.0),
    ("oasis scale=0.2", "oasis", {"scale": 0.2}, 0.0),
    ("oasis scale=0.5", "oasis", {"scale": 0.5}, 0.0),
    ("oasis scale=5", "oasis", {"scale": 5.0}, 0.0),
    ("oasis scale=20", "oasis", {"scale": 20.0}, 0.0),
    ("rrh", "rrh", {}, 0.0),
    ("dorm", "dorm", {}, 0.0),
    ("oasis restart 600 s", "oasis", {}, 600.0),
    ("rrh restart 600 s", "rrh", {}, 600.0),
    ("dorm restart 600 s", "dorm", {}, 600.0),
)


def workload_stats(num_jobs: int, seed: int, horizon: int = 300, max_units: int = 64) -> dict:
    """What decision 2 (tau in seconds) rests on: mini-batch time, work and fastest completion per job;
    and how bursty the arrivals are (largest share of jobs submitted within 3 consecutive slots)."""
    from dlsched.policies.oasis import profile
    from dlsched.throughput.oasis_model import minibatch_seconds

    jobs = oasis_workload(num_jobs, seed=seed, slot_seconds=SLOT, arrival_slots=max(1, (2 * horizon) // 3))
    slots = np.floor(np.array([j.submit_time for j in jobs]) / SLOT).astype(int)
    per_slot = np.bincount(slots)
    burst3 = float(np.convolve(per_slot, np.ones(3, dtype=int), mode="valid").max() / num_jobs) if len(per_slot) >= 3 else 1.0
    mb = np.array([minibatch_seconds(j.extra) for j in jobs])
    profs = [profile(j, SLOT, max_units) for j in jobs]
    work = np.array([p.work_slots for p in profs])
    fastest = np.array([p.fastest_slots for p in profs])
    # tau read in slots: one mini-batch takes at least tau slots, and a worker's M mini-batches of a
    # chunk are sequential in every one of the E epochs, so even at N workers a job needs E*M*tau slots.
    tau_slots = np.array([j.extra["epochs"] * j.extra["minibatches"] * j.extra["tau_s"] for j in jobs])
    return dict(jobs=num_jobs, seed=seed, minibatch_s_min=float(mb.min()), minibatch_s_max=float(mb.max()),
                median_work_worker_slots=float(np.median(work)), median_fastest_slots=float(np.median(fastest)),
                max_fastest_slots=float(fastest.max()), median_fastest_slots_if_tau_in_slots=float(np.median(tau_slots)),
                max_share_of_jobs_in_3_slots=burst3)


VARIANT_COLUMNS = ["variant", "policy", "restart_overhead_s", "total_utility", "finished", "rejected", "unfinished",
                   "restarts", "wall_seconds"]
#: columns only some variants have (OASiS' final price constants, Dorm's fallbacks): present when one does
VARIANT_EXTRAS = ["U1_gpu", "L1", "eta1", "alpha", "dorm_fallbacks"]


def run_variants(out: Path, num_jobs: int = 400, seed: int = 0, horizon: int = 300, variants=VARIANTS,
                 step: Progress | None = None, workers: int = 1, address: str | None = None) -> tuple[pd.DataFrame, dict]:
    """Every variant on `oasis_workload(num_jobs, seed)` and `paper_cluster(seed)`, T = `horizon` slots,
    one sweep cell each (`OasisCell`, stored in `out/cells`).

    Writes variants_table.csv and variants.md (with the workload statistics) into `out`. OASiS rows
    also give the final price constants (U1 on GPUs, L1, eta1, alpha) and Dorm rows the number of
    events where HiGHS found no incumbent in time (the allocations were kept).
    """
    if num_jobs <= 0:
        raise ConfigError("variants need a positive job count")
    cells = [OasisCell(num_jobs, seed, horizon, name, options=dict(opts), restart_overhead=overhead, label=label)
             for label, name, opts, overhead in variants]
    out.mkdir(parents=True, exist_ok=True)
    store = _run(cells, out, step, lambda c: c.label, workers, address)
    table = store.table()
    df = store.rows(cells, [*VARIANT_COLUMNS, *(c for c in VARIANT_EXTRAS if c in table.columns)])
    stats = workload_stats(num_jobs, seed, horizon)
    df.to_csv(out / "variants_table.csv", index=False)
    md = [
        f"# OASiS variants: {num_jobs} jobs, seed {seed}, T = {horizon} slots (Fig. 3 workload)",
        "",
        _md(df, ".4g"),
        "",
        "## Workload statistics",
        "",
        *(f"- {k}: {v:.4g}" if isinstance(v, float) else f"- {k}: {v}" for k, v in stats.items()),
    ]
    (out / "variants.md").write_text("\n".join(md) + "\n")
    return df, stats
