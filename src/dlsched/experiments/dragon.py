"""DRAGON's evaluation, rerun: against the default Kubernetes scheduler and gang FIFO, with the
ablation of each of its three capabilities, on a DRAGON-like TensorFlow-PS workload and on a real
trace.

What is compared (every figure comes from the runs made here, over several seeds):
- mean job elapsed time (JCT: submit to finish) and its ratio to kube-default (paper: > 65% less);
- makespan;
- GPU utilization two ways. *Allocated*: GPUs held by running jobs / all GPUs, what kube
  dashboards show. *Compute*: GPU-seconds actually spent computing (iterations done × the model's
  per-step compute time) / all GPU-seconds; a spread-out job holds its GPUs while waiting on the
  network, so only this one shows what locality buys. The paper's "+20–30% utilization" does
  not say which it measured; both are reported;
- GPU-hours held by partially placed jobs (waste that gang scheduling removes);
- nodes spanned per job (time-weighted; 1.0 = every job always on one node).

The ablation switches each capability off in turn (`dragon(gang=False)`, `locality=False`,
`scaling=False`) and reports how much mean JCT grows without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import pandas as pd
from matplotlib.figure import Figure

from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.policy import Named, Policy
from dlsched.metrics.style import policy_styles
from dlsched.metrics.table import markdown_table
from dlsched.paths import traces_dir
from dlsched.policies.dragon import dragon
from dlsched.policies.fifo import fifo
from dlsched.policies.kube_default import kube_default
from dlsched.presets import load_cluster
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.sim.results import SimResult
from dlsched.sweep.cell import CellResult, content_key
from dlsched.sweep.runner import run_afresh, when_groups_finish
from dlsched.throughput.base import ThroughputModel
from dlsched.throughput.parameter_server import ParameterServerModel
from dlsched.throughput.registry import default_throughput
from dlsched.traces import default_workload
from dlsched.traces.dragon_workload import dragon_workload

#: the paper's claims against the default Kubernetes scheduler
PAPER_JCT_RATIO = 0.35  # "over 65% shorter job elapsed time"
PAPER_UTIL_GAIN = (0.20, 0.30)  # "+20-30% resource utilization"

POLICIES: dict[str, Callable[[], Policy]] = {
    "kube-default": kube_default,
    "gang-fifo": lambda: Named(fifo(), "gang-fifo"),
    "dragon": dragon,
    "dragon-no-gang": lambda: dragon(gang=False),
    "dragon-no-locality": lambda: dragon(locality=False),
    "dragon-no-scaling": lambda: dragon(scaling=False),
}
ABLATIONS = {"gang": "dragon-no-gang", "locality": "dragon-no-locality", "scaling": "dragon-no-scaling"}
TRACE_POLICIES: dict[str, Callable[[], Policy]] = {
    "kube-default": kube_default,
    "gang-fifo": lambda: Named(fifo(), "gang-fifo"),
    "dragon": dragon,
    "dragon-backfill": lambda: dragon(backfill_past_starving=True),
}
METRICS = ["mean_jct_min", "makespan_min", "gpu_util_allocated", "gpu_util_compute", "held_gpu_hours",
           "nodes_spanned", "finished", "unfinished", "restarts"]


@dataclass
class DragonReport:
    runs: pd.DataFrame  # one row per (workload, seed, policy)
    summary: pd.DataFrame  # mean and std per (workload, policy)
    headline: dict[str, float]
    ablation: pd.DataFrame
    files: list[Path] = field(default_factory=list)


def compute_utilization(result: SimResult, jobs: list[JobSpec], cluster: Cluster, model: ParameterServerModel) -> float:
    """GPU-seconds spent computing / GPU-seconds available over the run's span.

    Each counted PS-model iteration is one worker step of `compute_s` seconds on that worker's
    GPUs, so the work done is Σ progress × compute_s × GPUs per worker whatever the placement.
    """
    span = float(result.timeline["t"].max() - result.jobs["submit"].min()) if len(result.timeline) else 0.0
    if span <= 0:
        return float("nan")
    progress = dict(zip(result.jobs["job_id"], result.jobs["progress"]))
    busy = sum(progress[j.job_id] * model.params(j, cluster)[0] * j.worker_demand[0] for j in jobs)
    return busy / (cluster.total_gpus * span)


def _row(result: SimResult, jobs: list[JobSpec], cluster: Cluster, ps_model: ParameterServerModel | None) -> dict:
    s = result.summary
    return {
        "mean_jct_min": s["mean_jct"] / 60.0,
        "makespan_min": s["makespan"] / 60.0,
        "gpu_util_allocated": s["gpu_utilization"],
        "gpu_util_compute": compute_utilization(result, jobs, cluster, ps_model) if ps_model else float("nan"),
        "held_gpu_hours": s["held_gpu_hours"],
        "nodes_spanned": s["mean_nodes_spanned"],
        "finished": s["finished"],
        "unfinished": s["unfinished"],
        "restarts": s["restarts"],
    }


def run_workload(
    label: str,
    jobs: list[JobSpec],
    cluster: Cluster,
    throughput: ThroughputModel,
    policies: dict[str, Callable[[], Policy]],
    seed: int,
    ps_model: ParameterServerModel | None = None,
    config: SimConfig | None = None,
) -> list[dict]:
    """One row per policy of `policies` on the same workload (the experiment runs each as a `DragonCell`)."""
    return [run_policy(label, jobs, cluster, throughput, name, make, seed, ps_model, config)
            for name, make in policies.items()]


def run_policy(
    label: str,
    jobs: list[JobSpec],
    cluster: Cluster,
    throughput: ThroughputModel,
    name: str,
    make: Callable[[], Policy],
    seed: int,
    ps_model: ParameterServerModel | None = None,
    config: SimConfig | None = None,
) -> dict:
    """One policy on one workload: its row of runs.csv."""
    cfg = (config or SimConfig()).model_copy(update={"seed": seed})
    result = simulate(jobs, cluster, make(), throughput, cfg)
    return {"workload": label, "seed": seed, "policy": name, **_row(result, jobs, cluster, ps_model)}


RUN_COLUMNS = ["workload", "seed", "policy", *METRICS]


@dataclass(frozen=True)
class DragonCell:
    """One policy on one workload of this experiment, as a sweep cell (`dlsched.sweep`): the
    DRAGON-like TF-PS workload (`num_jobs` jobs drawn with `seed`, on the `cluster` preset or YAML
    file), or with `trace` the embedded ITP slice (rigid, or `elastic`) on its own cluster, seed 0.
    Everything is rebuilt from this content inside `run()`, so a cell runs the same anywhere."""

    seed: int
    policy: str
    num_jobs: int = 0
    cluster: str | None = None
    trace: bool = False
    elastic: bool = False

    @property
    def key(self) -> str:
        return content_key({"kind": "dragon", "seed": self.seed, "policy": self.policy, "jobs": self.num_jobs,
                            "cluster": self.cluster, "trace": self.trace, "elastic": self.elastic})

    @property
    def name(self) -> str:
        where = ("itp-slice-elastic" if self.elastic else "itp-slice-rigid") if self.trace else f"tfps{self.num_jobs}"
        return f"{where}__s{self.seed}__{self.policy}"

    def labels(self) -> dict:
        return {"seed": self.seed, "policy": self.policy}

    def run(self) -> CellResult:
        tp = default_throughput(traces_dir(), dl2="analytic")
        if self.trace:
            label, jobs, preset = trace_jobs(self.elastic)
            return CellResult(run_policy(label, jobs, load_cluster(preset), tp, self.policy,
                                         TRACE_POLICIES[self.policy], self.seed))
        ps_model = next(m for m in tp.models if isinstance(m, ParameterServerModel))
        wl = dragon_workload(self.num_jobs, seed=self.seed)
        return CellResult(run_policy(wl.name, wl.jobs, load_cluster(self.cluster or "dragon"), tp, self.policy,
                                     POLICIES[self.policy], self.seed, ps_model))


def summarize_runs(runs: pd.DataFrame) -> pd.DataFrame:
    g = runs.groupby(["workload", "policy"], sort=False)[METRICS]
    mean, std = g.mean(), g.std(ddof=1).fillna(0.0)
    return mean.join(std.add_suffix("_std")).reset_index()


def headline_figures(runs: pd.DataFrame, workload: str = "dragon-tf-ps") -> dict[str, float]:
    """Paired (same seed) DRAGON / kube-default ratios, averaged over seeds."""
    w = runs[runs.workload == workload].pivot(index="seed", columns="policy")
    kube, dr = "kube-default", "dragon"
    jct_ratio = w["mean_jct_min"][dr] / w["mean_jct_min"][kube]
    ua = w["gpu_util_allocated"][dr] / w["gpu_util_allocated"][kube] - 1.0
    uc = w["gpu_util_compute"][dr] / w["gpu_util_compute"][kube] - 1.0
    upp = w["gpu_util_allocated"][dr] - w["gpu_util_allocated"][kube]
    return {
        "seeds": int(len(w)),
        "jct_ratio_vs_kube": float(jct_ratio.mean()),
        "jct_ratio_vs_kube_std": float(jct_ratio.std(ddof=1)) if len(w) > 1 else 0.0,
        "util_allocated_gain_rel": float(ua.mean()),
        "util_allocated_gain_pp": float(upp.mean()),
        "util_compute_gain_rel": float(uc.mean()),
        "nodes_spanned_dragon": float(w["nodes_spanned"][dr].mean()),
        "nodes_spanned_kube": float(w["nodes_spanned"][kube].mean()),
        "held_gpu_hours_dragon": float(w["held_gpu_hours"][dr].mean()),
        "held_gpu_hours_kube": float(w["held_gpu_hours"][kube].mean()),
    }


def ablation_table(runs: pd.DataFrame, workload: str = "dragon-tf-ps") -> pd.DataFrame:
    """How much mean JCT grows (paired by seed) when each capability is switched off."""
    w = runs[runs.workload == workload].pivot(index="seed", columns="policy")["mean_jct_min"]
    full = w["dragon"]
    gap = (w["kube-default"] - full).mean()
    rows = []
    for cap, name in ABLATIONS.items():
        growth = w[name] / full - 1.0
        rows.append({
            "capability switched off": cap,
            "mean JCT (min)": float(w[name].mean()),
            "JCT growth vs DRAGON": float(growth.mean()),
            "growth std": float(growth.std(ddof=1)) if len(w) > 1 else 0.0,
            "share of kube→DRAGON gap": float((w[name] - full).mean() / gap) if gap > 0 else float("nan"),
        })
    return pd.DataFrame(rows)


def trace_jobs(elastic: bool) -> tuple[str, list[JobSpec], str]:
    """The embedded ITP slice (real trace, MIT licence), rigid or with min-instances = half."""
    w = default_workload(measured=False)
    jobs = w.jobs
    label = "itp-slice-rigid"
    if elastic:
        jobs = [replace(j, min_workers=max(1, j.num_workers // 2)) if j.num_workers > 1 else j for j in jobs]
        label = "itp-slice-elastic"
    return label, jobs, w.cluster


def run_dragon_experiment(
    out: Path,
    seeds: int = 10,
    num_jobs: int = 40,
    cluster: str = "dragon",
    real_trace: bool = True,
    on_step: Callable[[str], None] | None = None,
    workers: int = 1,
    address: str | None = None,
) -> DragonReport:
    """Run everything, write runs.csv, summary.csv, ablation.csv, RESULTS.md and a plot into `out`.

    Every (workload, seed, policy) run is a sweep cell (`DragonCell`, stored in `out/cells`): in
    this process with one worker, as Ray tasks with more or with an `address`."""
    out.mkdir(parents=True, exist_ok=True)
    c = load_cluster(cluster)
    where = str(Path(cluster).resolve()) if Path(cluster).is_file() else cluster  # a YAML file: found from any worker
    cells = [DragonCell(seed, name, num_jobs, where) for seed in range(seeds) for name in POLICIES]
    steps = {(False, False, seed): f"dragon-tf-ps seed {seed}" for seed in range(seeds)}
    if real_trace:
        for elastic in (False, True):
            cells += [DragonCell(0, name, trace=True, elastic=elastic) for name in TRACE_POLICIES]
            steps[(True, elastic, 0)] = trace_jobs(elastic)[0]
    done = when_groups_finish(cells, lambda x: (x.trace, x.elastic, x.seed), on_step and (lambda k: on_step(steps[k])))
    store = run_afresh(cells, out / "cells", workers=workers, address=address, on_done=done)
    runs = store.rows(cells, RUN_COLUMNS)
    summary = summarize_runs(runs)
    report = DragonReport(runs, summary, headline_figures(runs), ablation_table(runs))
    report.files = _write(report, out, c, num_jobs)
    return report


def _write(report: DragonReport, out: Path, cluster: Cluster, num_jobs: int) -> list[Path]:
    files = [out / "runs.csv", out / "summary.csv", out / "ablation.csv", out / "RESULTS.md", out / "dragon.png"]
    report.runs.to_csv(files[0], index=False)
    report.summary.to_csv(files[1], index=False)
    report.ablation.to_csv(files[2], index=False)
    files[3].write_text(results_markdown(report, cluster, num_jobs))
    _plot(report, files[4])
    return files


def results_markdown(report: DragonReport, cluster: Cluster, num_jobs: int) -> str:
    h = report.headline
    lines = [
        "# DRAGON rerun",
        "",
        f"Workload: {num_jobs} TensorFlow-PS-like jobs per seed (`dlsched.traces.dragon_workload`), "
        f"{h['seeds']} seeds, on {cluster.describe()}; analytic PS throughput model with DL2's bandwidths.",
        "",
        "| claim | paper | measured (mean over seeds, paired) |",
        "|---|---|---|",
        f"| mean JCT, DRAGON / kube-default | ≤ {PAPER_JCT_RATIO:.2f} | {h['jct_ratio_vs_kube']:.3f} ± {h['jct_ratio_vs_kube_std']:.3f} |",
        f"| GPU utilization gain, allocated | +{PAPER_UTIL_GAIN[0]:.0%}–{PAPER_UTIL_GAIN[1]:.0%} | "
        f"{h['util_allocated_gain_rel']:+.1%} ({h['util_allocated_gain_pp'] * 100:+.1f} pp) |",
        f"| GPU utilization gain, compute | +{PAPER_UTIL_GAIN[0]:.0%}–{PAPER_UTIL_GAIN[1]:.0%} | {h['util_compute_gain_rel']:+.1%} |",
        f"| nodes spanned per job | fewer | DRAGON {h['nodes_spanned_dragon']:.2f} vs kube-default {h['nodes_spanned_kube']:.2f} |",
        f"| GPU-hours held by partial jobs | 0 | DRAGON {h['held_gpu_hours_dragon']:.2f} vs kube-default {h['held_gpu_hours_kube']:.2f} |",
        "",
        "## All policies (mean ± std over seeds)",
        "",
        _table(report.summary),
        "",
        "## Ablation: each capability switched off",
        "",
        markdown_table(report.ablation, lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)),
        "",
    ]
    return "\n".join(lines)


def _table(summary: pd.DataFrame) -> str:
    cols = ["mean_jct_min", "makespan_min", "gpu_util_allocated", "gpu_util_compute", "held_gpu_hours", "nodes_spanned"]
    rows = []
    for _, r in summary.iterrows():
        cells = [r["workload"], r["policy"]]
        for c in cols:
            v, sd = r[c], r[f"{c}_std"]
            cells.append("–" if pd.isna(v) else f"{v:.3f} ± {sd:.3f}" if c.startswith("gpu") else f"{v:.2f} ± {sd:.2f}")
        rows.append(cells + [f"{r['finished']:.0f}", f"{r['unfinished']:.0f}", f"{r['restarts']:.0f}"])
    head = ["workload", "policy", "mean JCT (min)", "makespan (min)", "GPU util. allocated", "GPU util. compute",
            "held GPU·h", "nodes/job", "finished", "unfinished", "restarts"]
    return markdown_table(pd.DataFrame(rows, columns=head))


def _plot(report: DragonReport, path: Path) -> None:
    s = report.summary[report.summary.workload == "dragon-tf-ps"]
    fig = Figure(figsize=(13, 4))
    axes = fig.subplots(1, 3)
    for ax, (col, label) in zip(axes, [("mean_jct_min", "mean JCT (min)"), ("gpu_util_compute", "GPU compute utilization"),
                                       ("nodes_spanned", "nodes spanned per job")]):
        looks = [st.bar() for st in policy_styles(list(s["policy"]))]
        bars = ax.bar(s["policy"], s[col], yerr=s[f"{col}_std"], capsize=3)
        for bar, look in zip(bars, looks):  # each policy in its colour, as in every dlsched plot
            bar.set(facecolor=look["color"], hatch=look["hatch"], edgecolor=look["edgecolor"])
        ax.set_title(label)
        ax.tick_params(axis="x", rotation=45)
    fig.suptitle("DRAGON vs default Kubernetes and gang FIFO, with ablations (mean ± std over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)

