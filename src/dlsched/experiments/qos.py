"""`dlsched experiment qos`: the QoS deadline framework's evaluation (Xing et al., IJCNN 2019).

Two workloads, each on an insufficient and a sufficient cluster, six policies each:
- `synthetic`: the paper-like LSTM/GAN/autoencoder deadline jobs on a CPU-only cluster
  (`traces.qos_synthetic`), deadline-only jobs (the framework picks sizes);
- `itp-195job`, `itp-cluster10`: ElasticFlow's ITP traces with deadlines (the 195-job testbed trace
  and the smallest cluster file, 260 jobs; --quick runs the first 60 jobs of the former), elastic
  (1..2k workers), duration-only speeds; the total work is *not* known to the policies, so the
  predictor runs on Optimus' loss-curve fit.

Cluster sizes follow one stated rule per workload, computed from the jobs (not tuned to results):
- insufficient: half of the time-averaged demand (over the arrival window) of the workload with
  every job at its default size from its submission, i.e. the cluster cannot even run the jobs as
  submitted (but at least every job's requested size must fit, else rigid baselines deadlock);
- sufficient: the peak, over time, of the demand of every job at its maximum size during the time
  from its submission to its deadline (or its fastest completion if later), plus 10%.

Policies: default Kubernetes (`kube-default`), FIFO, EDF (no autoscaling), the autoscaler under
arrival order and kube-like spreading (`kube-autoscale`, isolating what the scheduling adds),
QoS without autoscaling (`qos-noscale`), and the full QoS framework (`qos`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dlsched.core.cluster import CPU, GPU, RESOURCES, Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.experiments.qos_metrics import (
    PlanRecorder, allocated_utilization, error_summary, fastest_alone, prediction_errors,
)
from dlsched.metrics.style import policy_styles
from dlsched.metrics.table import markdown_table
from dlsched.paths import missing_traces_hint, traces_dir
from dlsched.policies.phases.sizing import ps_for
from dlsched.policies.phases.placement import even_spread, pack
from dlsched.policies.registry import make_policy
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.sweep.cell import CellResult, content_key
from dlsched.sweep.runner import run_afresh
from dlsched.throughput.base import ThroughputModel
from dlsched.throughput.registry import default_throughput
from dlsched.traces.qos_synthetic import qos_cluster, qos_workload
from dlsched.traces.registry import load_trace

POLICIES: dict[str, dict] = {
    "kube-default": {}, "fifo": {}, "edf": {}, "kube-autoscale": {},
    "qos-noscale": {"autoscale": False}, "qos": {},
}
#: ElasticFlow's testbed trace and the smallest ITP cluster file (260 jobs); --quick runs the first only
ITP_FILES = (Path("elasticflow-itp/elasticflow/195job.csv"), Path("elasticflow-itp/elasticflow/cluster10.csv"))
ITP_NODE = (8.0, 48.0, 384.0)  # the itp preset's node: 8 GPUs, 48 CPUs, 384 GiB
PAPER_GAIN_PP = 26.0


@dataclass
class Scenario:
    """One workload with its cluster family and the resource its utilization is measured on."""

    name: str
    jobs: list[JobSpec]
    make_cluster: Callable[[int], Cluster]
    resource: int
    node_amount: float
    seed: int | None = None  # workload seed (None: a fixed trace)


def _policy(name: str):
    base = "qos" if name.startswith("qos") else name
    return make_policy(base, **POLICIES[name])


@dataclass(frozen=True)
class ScenarioSource:
    """What a `Scenario` is built from, as content (picklable, hashable, part of a cell's key): the
    synthetic workload's job count and seed, or an ITP deadline trace's path and job limit."""

    name: str
    synthetic_jobs: int | None = None
    seed: int | None = None
    path: str | None = None
    limit: int | None = None

    def build(self) -> Scenario:
        return _build(self)


@lru_cache(maxsize=4)  # the cells of one scenario share it when they run in one process
def _build(src: ScenarioSource) -> Scenario:
    if src.path is None:
        jobs = qos_workload(src.synthetic_jobs, mean_interarrival=120.0, seed=src.seed).jobs
        return Scenario(src.name, jobs, qos_cluster, CPU, 8.0, src.seed)
    itp = load_trace(Path(src.path), "itp-deadline", elastic=True, limit=src.limit, profiles="off")
    return Scenario(src.name, itp.jobs, _itp_cluster, GPU, ITP_NODE[0])


def _sources(quick: bool, seeds: list[int], itp_path: Path | None) -> list[ScenarioSource]:
    n_syn = 24 if quick else 60
    out = [ScenarioSource("synthetic", synthetic_jobs=n_syn, seed=sd) for sd in seeds]
    if itp_path is not None:
        paths = [Path(itp_path)]
    else:
        root = traces_dir()
        if root is None:
            raise ConfigError("the ITP scenarios need the ITP deadline traces: pass --itp PATH to one (e.g. "
                              f"elasticflow-itp/elasticflow/195job.csv), or {missing_traces_hint('elasticflow-itp/')}")
        paths = [root / f for f in (ITP_FILES[:1] if quick else ITP_FILES)]
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise ConfigError(f"ITP deadline trace(s) not found: {', '.join(missing)}; "
                              f"{missing_traces_hint('elasticflow-itp/')}")
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(path)
        out.append(ScenarioSource(f"itp-{path.stem}", path=str(path.resolve()), limit=60 if quick else None))
    return out


def _itp_cluster(nodes: int) -> Cluster:
    return Cluster.homogeneous(f"itp-{nodes}x8", nodes=nodes, gpus=ITP_NODE[0], cpus=ITP_NODE[1],
                               mem=ITP_NODE[2], nodes_per_rack=8)


def _alone_time(spec: JobSpec, workers: int, cluster: Cluster, tp: ThroughputModel) -> float:
    p = ps_for(spec, workers)
    alloc = even_spread(cluster, cluster.capacity, spec, workers, p) or pack(cluster, cluster.capacity, spec, workers, p)
    rate = tp.rate(spec, alloc, cluster) if alloc is not None else 0.0
    return spec.iterations / rate if rate > 0 else math.inf


def cluster_sizes(sc: Scenario, tp: ThroughputModel) -> tuple[int, int]:
    """(insufficient, sufficient) node counts by the module's rule."""
    big = sc.make_cluster(512)
    r = sc.resource
    profile = []  # demand over time with every job at its default size from its submission
    for j in sc.jobs:
        d = float(j.demand(j.num_workers, j.num_ps)[r])
        profile += [(j.submit_time, d), (j.submit_time + _alone_time(j, j.num_workers, big, tp), -d)]
    mean = _time_average(profile, min(j.submit_time for j in sc.jobs), max(j.submit_time for j in sc.jobs))
    # every job must fit as submitted, or rigid baselines deadlock by construction
    need = max(math.ceil(float(j.demand(j.num_workers, j.num_ps)[r]) / sc.node_amount) for j in sc.jobs)
    low = max(need, math.ceil(0.5 * mean / sc.node_amount))
    events = []
    for j in sc.jobs:
        d = float(j.demand(j.max_workers, ps_for(j, j.max_workers))[r])
        end = max(j.deadline or j.submit_time, j.submit_time + fastest_alone(j, big, tp))
        events += [(j.submit_time, d), (end, -d)]
    level = peak = 0.0
    for _, d in sorted(events, key=lambda e: (e[0], e[1])):
        level += d
        peak = max(peak, level)
    high = max(low + 1, math.ceil(1.1 * peak / sc.node_amount))
    return low, high


def _time_average(events: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Time average over [lo, hi] of the step function that jumps by d at each (t, d)."""
    events = sorted(events)
    ts = np.array([t for t, _ in events])
    level = np.cumsum([d for _, d in events])
    edges = np.clip(np.append(ts, np.inf), lo, hi)
    width = np.diff(edges)
    return float((level * width).sum() / (hi - lo)) if hi > lo else float(level.max(initial=0.0))


def _feasible(sc: Scenario, cluster: Cluster, tp: ThroughputModel) -> dict[str, bool]:
    """Deadline met by the job alone on this (empty) cluster at its best size (true model)."""
    return {
        j.job_id: j.deadline is not None and j.submit_time + fastest_alone(j, cluster, tp) <= j.deadline + 1e-6
        for j in sc.jobs
    }


def run_qos(
    out: Path, quick: bool = False, seed: int = 0, seeds: int = 1, itp: Path | None = None,
    restart_overhead: float = 10.0, console=None, workers: int = 1, address: str | None = None,
) -> dict:
    """Run the evaluation, write CSV/markdown tables and a plot into `out`; return the tables.

    The synthetic workload is drawn with seeds `seed .. seed+seeds-1` (figures are then means over
    seeds, with their spread); the ITP trace is fixed and run once. Every (scenario, resource
    level, policy) run is a sweep cell (`QosCell`, stored in `out/cells`): in this process with one
    worker, as Ray tasks with more or with an `address`. The cluster sizes are computed here, once
    per scenario, and handed to its cells."""
    if seeds < 1:
        raise ConfigError(f"seeds must be >= 1, got {seeds}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tp = default_throughput(traces_dir())
    cells = []
    for src in _sources(quick, list(range(seed, seed + seeds)), itp):
        low, high = cluster_sizes(src.build(), tp)
        cells += [QosCell(src, level, nodes, name, seed, restart_overhead)
                  for level, nodes in (("insufficient", low), ("sufficient", high)) for name in POLICIES]
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=False,
    ) as bar:
        runs = bar.add_task("runs", total=len(cells))

        def done(c: QosCell, _row: dict) -> None:
            src = c.source
            tag = src.name if src.seed is None else f"{src.name} seed {src.seed}"
            bar.update(runs, description=f"{tag} {c.level} ({c.nodes} nodes): {c.policy}", advance=1)

        store = run_afresh(cells, out / "cells", workers=workers, address=address, on_done=done)
    table = store.rows(cells, ROW_COLUMNS)
    pred_df = store.stacked_jobs(cells)
    gains = _gains(table)
    summary = _summary(table)
    gain_summary = _gain_summary(gains)
    errors = _error_table(pred_df)
    table.to_csv(out / "qos_results.csv", index=False)
    gains.to_csv(out / "qos_gains.csv", index=False)
    summary.to_csv(out / "qos_summary.csv", index=False)
    gain_summary.to_csv(out / "qos_gains_summary.csv", index=False)
    errors.to_csv(out / "qos_prediction_error.csv", index=False)
    if len(pred_df):
        pred_df.to_csv(out / "qos_predictions.csv", index=False)
    (out / "qos_results.md").write_text(
        _markdown(table, summary, gain_summary, errors, quick, seed, seeds, restart_overhead))
    _plot(summary).savefig(out / "qos_deadlines.png", dpi=120)
    return {"results": table, "summary": summary, "gains": gains, "gain_summary": gain_summary, "errors": errors}


@dataclass(frozen=True)
class QosCell:
    """One policy on one scenario at one resource level (`nodes` of the scenario's cluster family),
    as a sweep cell (`dlsched.sweep`). The scenario is rebuilt from its `source` inside `run()`;
    `seed` and `restart_overhead` are the simulator's. Its row is a row of qos_results.csv, its
    per-job table the completion predictions of the policies that make them (qos_predictions.csv)."""

    source: ScenarioSource
    level: str
    nodes: int
    policy: str
    seed: int = 0
    restart_overhead: float = 10.0

    @property
    def key(self) -> str:
        return content_key({"kind": "qos", **asdict(self.source), "level": self.level, "nodes": self.nodes,
                            "policy": self.policy, "sim_seed": self.seed, "restart_overhead": self.restart_overhead})

    @property
    def name(self) -> str:
        src = self.source
        tag = src.name if src.seed is None else f"{src.name}-s{src.seed}"
        return f"{tag}__{self.level}__{self.policy}"

    def labels(self) -> dict:
        src = self.source
        return {"workload": src.name, "seed": src.seed if src.seed is not None else -1, "resources": self.level,
                "policy": self.policy}

    def run(self) -> CellResult:
        sc = self.source.build()
        tp = default_throughput(traces_dir())
        config = SimConfig(seed=self.seed, restart_overhead=self.restart_overhead)
        cluster = sc.make_cluster(self.nodes)
        feasible = _feasible(sc, cluster, tp)
        rec = PlanRecorder(_policy(self.policy))
        res = simulate(sc.jobs, cluster, rec, tp, config)
        row = _row(sc, self.level, cluster, self.policy, res, rec, feasible, config)
        preds = None
        sizing = getattr(rec.inner, "sizing", None)
        if getattr(sizing, "predictions", None):
            df = prediction_errors(list(sizing.predictions.values()), res, rec)
            if len(df):
                df.insert(0, "policy", self.policy)
                df.insert(0, "resources", self.level)
                df.insert(0, "seed", sc.seed if sc.seed is not None else -1)
                df.insert(0, "workload", sc.name)
                preds = df
        return CellResult(row, preds)


ROW_COLUMNS = ["workload", "seed", "resources", "nodes", "capacity", "resource", "policy", "jobs", "deadline_met",
               "feasible_jobs", "feasible_met", "finished", "rejected", "unfinished", "mean_jct_s", "restarts",
               "alloc_util"]


def _row(sc, level, cluster, name, res, rec, feasible, config) -> dict:
    """One run's row of qos_results.csv (its columns: `ROW_COLUMNS`)."""
    jobs = res.jobs
    feas_ids = {k for k, v in feasible.items() if v}
    f = jobs[jobs.job_id.isin(feas_ids)]
    s = res.summary
    return {
        "workload": sc.name, "seed": sc.seed if sc.seed is not None else -1, "resources": level, "nodes": cluster.num_nodes,
        "capacity": float(cluster.total[sc.resource]), "resource": RESOURCES[sc.resource], "policy": name,
        "jobs": s["jobs"], "deadline_met": float(s["deadline_met_ratio"]),
        "feasible_jobs": int(len(f)),
        "feasible_met": float(f.deadline_met.astype(bool).mean()) if len(f) else math.nan,
        "finished": s["finished"], "rejected": s["rejected"], "unfinished": s["unfinished"],
        "mean_jct_s": s["mean_jct"], "restarts": s["restarts"],
        "alloc_util": allocated_utilization(rec, res, config, sc.resource),
    }


def _gains(table: pd.DataFrame) -> pd.DataFrame:
    """QoS vs each baseline, per workload and resource level: percentage points and relative."""
    rows = []
    for (w, sd, lvl), g in table.groupby(["workload", "seed", "resources"], sort=False):
        qos = g[g.policy == "qos"].deadline_met.iloc[0]
        for base in ("kube-default", "kube-autoscale", "fifo", "edf", "qos-noscale"):
            b = g[g.policy == base].deadline_met.iloc[0]
            rows.append({"workload": w, "seed": sd, "resources": lvl, "baseline": base, **_gain(qos, b)})
    return pd.DataFrame(rows)


def _gain(qos: float, base: float, **spread: float) -> dict:
    """QoS's deadline completion against a baseline's: in percentage points (then `spread`),
    relative, and whether the gain reaches the paper's."""
    pp = 100.0 * (qos - base)
    return {"qos_met": qos, "baseline_met": base, "gain_pp": pp, **spread,
            "gain_relative": (qos / base - 1.0) if base > 0 else math.inf if qos > 0 else math.nan,
            "meets_paper_26pp": bool(pp >= PAPER_GAIN_PP)}


METRICS = ["deadline_met", "feasible_met", "rejected", "mean_jct_s", "restarts", "alloc_util"]


def _summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per workload, resource level and policy: the mean over seeds (and the spread of deadline_met)."""
    g = table.groupby(["workload", "resources", "policy"], sort=False)
    out = g[["nodes", *METRICS]].mean().reset_index()
    out.insert(3, "runs", g.size().to_numpy())
    out["deadline_met_min"] = g.deadline_met.min().to_numpy()
    out["deadline_met_max"] = g.deadline_met.max().to_numpy()
    return out


def _gain_summary(gains: pd.DataFrame) -> pd.DataFrame:
    """QoS minus each baseline in percentage points over seeds; relative = ratio of the means."""
    rows = []
    for (w, lvl, base), g in gains.groupby(["workload", "resources", "baseline"], sort=False):
        gain = _gain(g.qos_met.mean(), g.baseline_met.mean(), gain_pp_min=g.gain_pp.min(), gain_pp_max=g.gain_pp.max())
        rows.append({"workload": w, "resources": lvl, "baseline": base, "runs": len(g), **gain})
    return pd.DataFrame(rows)


def _error_table(df: pd.DataFrame) -> pd.DataFrame:
    if not len(df):
        return pd.DataFrame()
    rows = []
    keys_ = ["workload", "policy", "resources"]  # pooled over seeds
    for keys, g in df.groupby(keys_, sort=False):
        rows.append({**dict(zip(keys_, keys)), "source": "all",
                     "excluded_resized": int((~g.kept).sum()), **error_summary(g)})
        for src, gs in g.groupby("source"):
            rows.append({**dict(zip(keys_, keys)), "source": src,
                         "excluded_resized": int((~gs.kept).sum()), **error_summary(gs)})
    return pd.DataFrame(rows)


def _md(df: pd.DataFrame) -> str:
    def cell(v) -> str:
        if isinstance(v, float):
            return "–" if math.isnan(v) else f"{v:.3f}" if abs(v) < 10 else f"{v:,.0f}"
        return str(v)

    return markdown_table(df, cell) + "\n" if len(df) else "(none)\n"


def _markdown(table, summary, gains, errors, quick, seed, seeds, restart) -> str:
    cmd = (f"dlsched experiment qos{' --quick' if quick else ''} --seed {seed} --seeds {seeds} "
           f"--restart-overhead {restart:g}")
    return (
        f"# QoS deadline framework: measured results\n\nProduced by `{cmd}`.\n"
        "deadline_met = jobs finished by their deadline / all jobs (rejected count as missed); "
        "feasible_met = the same over jobs whose deadline the job alone could meet on the empty "
        "cluster; mean JCT over finished jobs only; alloc_util = productive / allocated resource-seconds.\n\n"
        f"## Means over seeds\n\n{_md(summary)}\n## QoS vs baselines (deadline completion, pp = percentage points)\n\n"
        f"{_md(gains)}\n## Every run\n\n{_md(table)}\n"
        f"## Completion-time prediction error (APE vs. actual end; kept = finished unresized)\n\n{_md(errors)}"
    )


def _plot(table: pd.DataFrame) -> Figure:
    fig = Figure(figsize=(10, 4.5))
    ax = fig.subplots()
    groups = list(dict.fromkeys(zip(table.workload, table.resources)))
    names = list(POLICIES)
    width = 0.8 / len(names)
    x = np.arange(len(groups))
    styles = policy_styles(names)
    for i, name in enumerate(names):
        vals = [table[(table.workload == w) & (table.resources == r) & (table.policy == name)].deadline_met.iloc[0]
                for w, r in groups]
        ax.bar(x + i * width - 0.4 + width / 2, vals, width, label=name, **styles[i].bar())
    ax.set_xticks(x, [f"{w}\n{r}" for w, r in groups])
    ax.set_ylabel("deadline completion rate")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8, ncols=3)
    ax.set_title("QoS framework vs baselines (dlsched experiment qos)")
    fig.tight_layout()
    return fig
