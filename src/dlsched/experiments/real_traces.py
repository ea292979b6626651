"""Every published system against the baselines on real traces with measured job behaviour.

Why: the papers each evaluated on their own setup; a user wants to know which system wins on
a real trace that none of them tuned for. Each workload here is a real trace whose jobs run on
measured scaling curves (`traces.profiles`: the ITP deadline traces name their models; Philly jobs
draw a curve that fits their size, seeded, several draws), on a cluster sized so the trace offers
load 0.8 (`traces.load.cluster_for_load`; at 11% load every policy ties).

Every policy of a workload sees the same jobs, cluster, throughput model and seed, and is scored on
the same utilities (the duration-derived default, since the traces give none: OASiS needs one).
Policies that plan from a job's true work (srtf, oasis) run as oracles and are marked.

Confidence intervals are 95% bootstrap intervals over jobs (scipy.stats.bootstrap, percentile
method, the draws of a workload pooled): how much a figure would move with another sample of jobs
like these. A ratio to a reference policy is paired by job (the same jobs finished under both).
The issue's claims are checked on every workload and reported as measured, whatever they are.
"""

from __future__ import annotations

import json
import operator
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from scipy import stats

from dlsched.core.errors import ConfigError
from dlsched.core.utility import with_default_utilities
from dlsched.paths import missing_traces_hint
from dlsched.metrics.plots import ci_bars
from dlsched.policies.oasis_jobs import workload_slots
from dlsched.policies.registry import DEFAULT_POLICIES, UTILITY_DRIVEN, make_policy
from dlsched.presets import load_cluster
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.registry import default_throughput
from dlsched.sweep.cell import CellResult, content_key
from dlsched.sweep.runner import pending, run_cells
from dlsched.sweep.store import ResultsStore
from dlsched.traces import load_trace
from dlsched.traces.load import at_load

LOAD = 0.8
#: A claim's comparison of a measured ratio with its bound, by its written operator.
OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
POLICIES: tuple[str, ...] = (*DEFAULT_POLICIES, "kube-autoscale", "edf")
ORACLES = frozenset({"oasis"}) | UTILITY_DRIVEN  # srtf is an oracle by construction


@dataclass(frozen=True)
class TraceCase:
    """One workload: a trace file under the traces root, its format, job limit, profile mode and
    `base`, the preset whose node shape the load-sized cluster is built from — or, with `load`
    None, the cluster it runs on as the preset is. `elastic` as `load_trace` takes it (None: the
    jobs on measured curves are elastic, duration-only ones rigid)."""

    path: str
    fmt: str
    limit: int | None
    profiles: str
    base: str
    seeds: int = 1  # profile draws; a trace that names its models has one
    elastic: bool | None = None
    load: float | None = LOAD

    def key_content(self) -> dict:
        """What identifies the case in a cell's key. `elastic` enters only when set, so the keys of
        cases written before it existed (results folders of earlier runs) stay as they were."""
        content = asdict(self)
        if self.elastic is None:
            del content["elastic"]
        return content


CASES: dict[str, TraceCase] = {
    "itp-195job": TraceCase("elasticflow-itp/elasticflow/195job.csv", "itp-deadline", None, "auto", "itp"),
    "itp-cluster03": TraceCase("elasticflow-itp/elasticflow/cluster03.csv", "itp-deadline", None, "auto", "itp"),
    "itp-cluster02": TraceCase("elasticflow-itp/elasticflow/cluster02.csv", "itp-deadline", None, "auto", "itp"),
    "philly-2k": TraceCase("philly-pollux/philly.csv", "philly", 2000, "draw", "philly", seeds=3),
}
QUICK_CASES: dict[str, TraceCase] = {
    "itp-195job": CASES["itp-195job"],
    "philly-300": TraceCase("philly-pollux/philly.csv", "philly", 300, "draw", "philly", seeds=2),
}

#: metric -> (label, better is "lower"/"higher")
METRICS: dict[str, tuple[str, str]] = {
    "mean_jct_h": ("mean JCT (h)", "lower"),
    "p95_jct_h": ("p95 JCT (h)", "lower"),
    "deadline_met": ("deadlines met (%)", "higher"),
    "utility": ("total utility", "higher"),
    "gpu_hours": ("GPU-hours used", "lower"),
}
#: The issue's claims: (policy, metric, reference, relation, bound).
CLAIMS = [
    ("qos", "deadline_met", "kube-default", "diff >=", 26.0),
    ("qos", "deadline_met", "kube-autoscale", "diff >", 0.0),
    ("dragon", "mean_jct_h", "kube-default", "ratio <=", 0.5),
    ("dl2", "mean_jct_h", "drf", "ratio <=", 1.0),
    ("oasis", "utility", "fifo", "ratio >=", 1.0),
]


def _job_table(result) -> pd.DataFrame:
    j = result.jobs
    return pd.DataFrame({
        "job_id": j["job_id"], "done": j["status"] == "done", "jct_h": j["jct"] / 3600.0,
        "has_deadline": j["deadline"].notna(), "met": j["deadline_met"].fillna(False).astype(bool),
        "utility": j["utility"].fillna(0.0), "gpu_h": j["gpu_seconds"] / 3600.0,
    })


def _metric(t: pd.DataFrame, name: str) -> float:
    done = t[t["done"]]
    if name == "mean_jct_h":
        return float(done["jct_h"].mean()) if len(done) else float("nan")
    if name == "p95_jct_h":
        return float(np.percentile(done["jct_h"], 95)) if len(done) else float("nan")
    if name == "deadline_met":
        d = t[t["has_deadline"]]
        return 100.0 * float(d["met"].mean()) if len(d) else float("nan")
    if name == "utility":
        return float(t["utility"].sum())
    if name == "gpu_hours":
        return float(t["gpu_h"].sum())
    raise ConfigError(f"unknown metric {name!r}")


def _values(t: pd.DataFrame, name: str) -> tuple[np.ndarray, Callable[[np.ndarray], float]]:
    """The per-job sample a metric is a statistic of, and that statistic (for the bootstrap)."""
    if name in ("mean_jct_h", "p95_jct_h"):
        x = t.loc[t["done"], "jct_h"].to_numpy()
        return x, (np.mean if name == "mean_jct_h" else lambda a, axis=-1: np.percentile(a, 95, axis=axis))
    if name == "deadline_met":
        return 100.0 * t.loc[t["has_deadline"], "met"].to_numpy(float), np.mean
    col = "utility" if name == "utility" else "gpu_h"
    return t[col].to_numpy(float), np.sum


def bootstrap_ci(x: np.ndarray, statistic, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of `statistic` over the sample `x` (NaNs when too small)."""
    if len(x) < 3 or np.all(x == x[0]):
        v = float(statistic(x)) if len(x) else float("nan")
        return (v, v)
    res = stats.bootstrap((x,), statistic, n_resamples=1000, method="percentile", vectorized=True,
                          random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def paired_ci(t: pd.DataFrame, ref: pd.DataFrame, name: str, how: str, seed: int = 0) -> tuple[float, float, float]:
    """A policy's metric against a reference's, paired by job: (value, low, high), where value is
    the ratio (how='ratio') or the difference (how='diff') of the two."""
    m = t.merge(ref, on=["run", "job_id"], suffixes=("", "_ref"))
    if name in ("mean_jct_h", "p95_jct_h"):
        m = m[m["done"] & m["done_ref"]]
        a, b = m["jct_h"].to_numpy(), m["jct_h_ref"].to_numpy()
        f = np.mean if name == "mean_jct_h" else (lambda v, axis=-1: np.percentile(v, 95, axis=axis))
    elif name == "deadline_met":
        m = m[m["has_deadline"]]
        a, b, f = 100.0 * m["met"].to_numpy(float), 100.0 * m["met_ref"].to_numpy(float), np.mean
    else:
        col = "utility" if name == "utility" else "gpu_h"
        a, b, f = m[col].to_numpy(float), m[f"{col}_ref"].to_numpy(float), np.sum
    if len(a) < 3:
        return (float("nan"),) * 3

    def stat(x, y, axis=-1):
        return f(x, axis=axis) / f(y, axis=axis) if how == "ratio" else f(x, axis=axis) - f(y, axis=axis)

    value = float(stat(a, b))
    if np.array_equal(a, b):
        return value, value, value
    res = stats.bootstrap((a, b), stat, paired=True, n_resamples=1000, method="percentile", vectorized=True,
                          random_state=np.random.default_rng(seed))
    return value, float(res.confidence_interval.low), float(res.confidence_interval.high)


@lru_cache(maxsize=2)  # the policies of one draw share it when the cells run in one process
def load_case(name: str, case: TraceCase, root: Path, seed: int):
    """The jobs (with default utilities), the cluster (load-sized, or the preset as is when
    `case.load` is None), the throughput model, the offered load and the trace's notes of one draw."""
    path = root / case.path
    if not path.exists():
        raise ConfigError(f"{name}: {path} not found (the real-traces experiment needs the shared traces); "
                          f"{missing_traces_hint(str(case.path))}")
    w = load_trace(path, case.fmt, limit=case.limit, elastic=case.elastic, seed=seed, traces=root,
                   profiles=case.profiles)
    jobs, _ = with_default_utilities(w.jobs)
    throughput = default_throughput(root)
    sizing = at_load(jobs, load_cluster(case.base), case.load, throughput)
    return jobs, sizing.cluster, throughput, sizing.offered, w.notes


@dataclass(frozen=True)
class RealTraceCell:
    """One (workload, draw, policy) run of this experiment, as a sweep cell (`dlsched.sweep`):
    its per-job table is `cells/<case>__s<seed>__<policy>.parquet`, its row the run's facts."""

    case_name: str
    case: TraceCase
    seed: int
    policy: str
    root: str

    @property
    def key(self) -> str:
        return content_key({"kind": "real-traces", "case": self.case_name, **self.case.key_content(),
                            "seed": self.seed, "policy": self.policy})

    @property
    def name(self) -> str:
        return f"{self.case_name}__s{self.seed}__{self.policy}"

    def labels(self) -> dict:
        return {"case": self.case_name, "seed": self.seed, "policy": self.policy}

    def run(self) -> CellResult:
        jobs, cluster, throughput, ol, notes = load_case(self.case_name, self.case, Path(self.root), self.seed)
        opts = {"oracle": True} if self.policy in ORACLES else {}
        if self.policy == "oasis" and (picked := workload_slots(jobs)):  # from the trace, as `compare` does
            opts.update(slot_seconds=picked[0], horizon=picked[1])
        t0 = time.perf_counter()
        r = simulate(jobs, cluster, make_policy(self.policy, **opts), throughput, SimConfig(seed=self.seed))
        served = r.jobs["throughput_model"].fillna("?").value_counts()
        return CellResult({
            **self.labels(), "sim_wall_s": time.perf_counter() - t0, "oracle": bool(r.summary["oracle"]),
            "cluster": cluster.describe(), "gpus": cluster.total_gpus, "offered_load": ol.effective, "jobs": len(jobs),
            "finished": r.summary["finished"], "rejected": r.summary["rejected"], "notes": json.dumps(notes),
            "throughput": json.dumps({str(k): int(v) for k, v in served.items()})},
            _job_table(r))


def run(out: Path, root: Path, *, cases: dict[str, TraceCase] | None = None, policies: tuple[str, ...] = POLICIES,
        step: Callable[[str], None] | None = None, report_only: bool = False, workers: int = 1,
        address: str | None = None) -> pd.DataFrame:
    """Run every (case, draw, policy) cell not already finished in `out` (`dlsched.sweep`: its
    results.parquet and cells/), in this process or on Ray (`workers`, `address`), then write the
    tables, plots and RESULTS.md. Returns one row per cell. A killed run resumes where it stopped.
    `report_only`: run nothing, write the report from the cells there are (a policy missing a
    draw of a workload reads "not run" there)."""
    cases = CASES if cases is None else cases
    runs = run_grid(out, root, cases, policies, step=step, report_only=report_only, workers=workers, address=address)
    write_results(out, runs, cases, policies)
    return runs


def run_grid(out: Path, root: Path, cases: dict[str, TraceCase], policies: tuple[str, ...], *,
             step: Callable[[str], None] | None = None, report_only: bool = False, workers: int = 1,
             address: str | None = None, extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """The running half of `run` (the robustness experiment shares it): every (case, draw, policy)
    cell not yet in `out`, then one row per finished cell with its facts, the row columns named in
    `extra` (empty when a cell written earlier lacks one) and every metric."""
    (out / "cells").mkdir(parents=True, exist_ok=True)
    cells = [RealTraceCell(cname, case, seed, p, str(root))
             for cname, case in cases.items() for seed in range(case.seeds) for p in policies]
    store = ResultsStore(out)
    if not report_only:
        todo = {c.key for c in pending(cells, store)}
        for c in cells:
            if step is not None and c.key not in todo:
                step(f"{c.case_name} s{c.seed} {c.policy} (done before)")
        run_cells(cells, store, workers=workers, address=address,
                  on_done=None if step is None else lambda c, _: step(f"{c.case_name} s{c.seed} {c.policy}"))
    table = store.table()
    rows = []
    for c in cells:
        if not store.done(c):
            continue
        meta = table[table["key"] == c.key].iloc[-1]
        t = store.jobs(c)
        rows.append({**{k: meta[k] for k in ("case", "seed", "policy", "wall_s", "oracle", "gpus", "offered_load",
                                            "jobs", "finished", "rejected")},
                     **{k: meta.get(k, "") for k in extra}, **{m: _metric(t, m) for m in METRICS}})
    return pd.DataFrame(rows)


def job_tables(out: Path, cases: dict[str, TraceCase], policies) -> dict[str, pd.DataFrame]:
    """Per case, every cell's job table (draws stacked, with a `run` column); a (case, policy)
    with a draw not run yet is left out."""
    cells_dir = out / "cells"
    got: dict[str, pd.DataFrame] = {}
    for cname, case in cases.items():
        for p in policies:
            files = [cells_dir / f"{cname}__s{s}__{p}.parquet" for s in range(case.seeds)]
            if all(f.exists() for f in files):
                got[f"{cname}/{p}"] = pd.concat([pd.read_parquet(f).assign(run=s) for s, f in enumerate(files)],
                                                ignore_index=True)
    return got


def summarize(out: Path, cases: dict[str, TraceCase], policies, claims=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per case, policy and metric: value and 95% CI; the table of `claims`, default CLAIMS)."""
    tables = job_tables(out, cases, policies)
    rows = []
    for cname in cases:
        for p in policies:
            t = tables.get(f"{cname}/{p}")
            for m in METRICS:
                if t is None:  # not run (yet): no figure
                    rows.append({"case": cname, "policy": p, "metric": m, "value": np.nan, "low": np.nan,
                                 "high": np.nan, "run": False})
                    continue
                x, f = _values(t, m)
                lo, hi = bootstrap_ci(x, f)
                rows.append({"case": cname, "policy": p, "metric": m, "value": _metric(t, m), "low": lo, "high": hi,
                             "run": True})
    checked = []
    for cname in cases:
        for p, m, ref, rel, bound in (CLAIMS if claims is None else claims):
            if f"{cname}/{p}" not in tables or f"{cname}/{ref}" not in tables:
                continue
            how, op = rel.split()
            v, lo, hi = paired_ci(tables[f"{cname}/{p}"], tables[f"{cname}/{ref}"], m, how)
            ok = None if v != v else OPS[op](v, bound)  # NaN: not defined here
            checked.append({"case": cname, "claim": f"{p} vs {ref}: {METRICS[m][0]} {how} {op} {bound:g}",
                            "measured": v, "low": lo, "high": hi, "holds": "n/a" if ok is None else str(ok)})
    return pd.DataFrame(rows), pd.DataFrame(checked)


def _plot(summary: pd.DataFrame, metric: str, path: Path) -> None:
    d = summary[summary["metric"] == metric].rename(columns={"case": "group"})
    ci_bars(d, METRICS[metric][0], f"{METRICS[metric][0]} ({METRICS[metric][1]} is better), 95% bootstrap CI, "
            f"load {LOAD}", path, log=metric in ("mean_jct_h", "p95_jct_h"))


def write_results(out: Path, runs: pd.DataFrame, cases: dict[str, TraceCase], policies) -> None:
    summary, claims = summarize(out, cases, policies)
    runs.to_csv(out / "runs.csv", index=False)
    summary.to_csv(out / "summary.csv", index=False)
    claims.to_csv(out / "claims.csv", index=False)
    lines = ["# Real traces at load 0.8, measured job behaviour", "",
             "Written by `dlsched experiment real-traces`; every figure below comes from the runs in `cells/`.", ""]
    setup = runs.groupby("case").agg(jobs=("jobs", "first"), gpus=("gpus", "first"),
                                     offered_load=("offered_load", "mean"), draws=("seed", "nunique")).reset_index()
    lines += ["## Setup", "", _md(setup, "{:.3g}"), ""]
    for m, (label, better) in METRICS.items():
        d = summary[summary["metric"] == m]
        wide = d.assign(cell=[f"{v:.4g} [{lo:.4g}, {hi:.4g}]" if v == v else "n/a" if ran else "not run"
                              for v, lo, hi, ran in zip(d["value"], d["low"], d["high"], d["run"])])
        table = wide.pivot(index="policy", columns="case", values="cell").reindex(list(policies)).reset_index()
        lines += [f"## {label} ({better} is better)", "", _md(table), "", f"![{label}]({m}.png)", ""]
        _plot(summary, m, out / f"{m}.png")
    lines += ["## The issue's claims (paired by job, 95% bootstrap CI)", "", _md(claims, "{:.3g}"), ""]
    wall = runs.groupby("policy")["wall_s"].sum().reindex(list(policies)).round(1).reset_index()
    lines += ["## Wall time per policy, all cells (s)", "", _md(wall), ""]
    (out / "RESULTS.md").write_text("\n".join(lines))


def _md(df: pd.DataFrame, fmt: str = "{}") -> str:
    from dlsched.metrics.table import markdown_table

    return markdown_table(df, lambda v: fmt.format(v) if isinstance(v, float) else str(v))
