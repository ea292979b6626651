"""Every published system and the baselines on each form of the real traces, on two cluster sizes.

Why: a policy tuned on one workload at one load can fall apart on another reading of the same
trace (rigid or elastic jobs, duration-only or measured curves) or on a cluster of another size,
and a change that fixes one cell can break another. This experiment is the regression net for that
class of defect: every cell (trace form x size) runs every policy, and the claims the published
systems make against the baselines are checked on every cell and reported as measured, a cell that
misses included (`docs/ROBUSTNESS.md` gives each miss a reason column for the docs).

The machinery is the real-traces experiment's (`real_traces`): one `TraceCase` per cell, run as
sweep cells (`RealTraceCell`, resumable), 95% bootstrap intervals over jobs and ratios paired by
job. What this module adds is the grid (forms x sizes), its own claims — some against "the best
baseline", chosen per cell — and the one-page table for the docs.

Sizes: the trace's own preset as it is (the cluster a user gets without `--cluster`; for ITP the
`itp-small` preset, since the `itp-clusterNN` presets are already sized to load 0.8: see
docs/DECISIONS.md) and the preset's node shape sized to offered load 0.8 (`--load 0.8`).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from dlsched.core.errors import ConfigError
from dlsched.experiments import real_traces as rt
from dlsched.experiments.real_traces import LOAD, METRICS, POLICIES, TraceCase
from dlsched.policies.registry import BASELINES, PUBLISHED

#: The sizes of every form: the trace's own preset as it is, and the preset's node shape at load 0.8.
SIZES: tuple[str, ...] = ("preset", f"load{LOAD:g}")


@dataclass(frozen=True)
class TraceForm:
    """One reading of a trace: `case` sizes its load-0.8 cluster from `case.base`'s node shape;
    `preset` is the cluster it runs on as is (the trace's own)."""

    case: TraceCase
    preset: str
    about: str = ""  # how its jobs behave, for the setup table

    def at(self, size: str) -> TraceCase:
        """The case of this form at one of SIZES."""
        if size == "preset":
            return replace(self.case, base=self.preset, load=None)
        return replace(self.case, load=float(size.removeprefix("load")))


_ITP = "elasticflow-itp/{}/cluster03.csv"
#: The full grid's forms: ITP cluster03 (3,011 jobs; held out from DL2's training) in four readings —
#: raw in its default form (duration-only jobs on drawn measured curves, `--profiles draw`), raw read
#: rigid as recorded (`--profiles auto`), raw elastic, and the deadline trace's measured curves — and
#: Philly's first 2,000 jobs in their default form (drawn curves, two draws).
FORMS: dict[str, TraceForm] = {
    "itp-raw": TraceForm(TraceCase(_ITP.format("raw"), "itp", None, "draw", "itp"), "itp-small",
                         "duration-only, drawn measured curves (the default form)"),
    "itp-raw-rigid": TraceForm(TraceCase(_ITP.format("raw"), "itp", None, "auto", "itp"), "itp-small",
                               "duration-only, rigid as recorded"),
    "itp-raw-elastic": TraceForm(TraceCase(_ITP.format("raw"), "itp", None, "auto", "itp", elastic=True), "itp-small",
                                 "duration-only, elastic 1..2x requested"),
    "itp-deadline": TraceForm(TraceCase(_ITP.format("elasticflow"), "itp-deadline", None, "auto", "itp"), "itp-small",
                              "measured curves of the named models, elastic, deadlines"),
    "philly-draw": TraceForm(TraceCase("philly-pollux/philly.csv", "philly", 2000, "draw", "philly", seeds=2), "philly",
                             "duration-only, drawn measured curves (the default form)"),
}
#: `--quick`: the same forms on the first 200 jobs (Philly: one draw), a few minutes.
QUICK_FORMS: dict[str, TraceForm] = {
    name: replace(f, case=replace(f.case, limit=200, seeds=1)) for name, f in FORMS.items()
}

#: Stands for "the best baseline of the cell" as a claim's reference.
BEST = "best-baseline"


@dataclass(frozen=True)
class Claim:
    """`policy`'s `metric` over `reference`'s (paired by job) `op` `bound`, on the cells whose form
    is in `forms` and size in `sizes` (None: every one). `reference` BEST is the cell's best
    baseline (`best_baseline`)."""

    policy: str
    metric: str
    reference: str
    op: str  # "<=", ">=", "<", ">"
    bound: float
    forms: tuple[str, ...] | None = None
    sizes: tuple[str, ...] | None = None

    def applies(self, form: str, size: str) -> bool:
        return (self.forms is None or form in self.forms) and (self.sizes is None or size in self.sizes)

    def text(self, reference: str) -> str:
        return f"{self.policy} {METRICS[self.metric][0]} {self.op} {self.bound:g}x {reference}"


#: The issue's claims. All clusters here have one GPU type, so dual-agent's "homogeneous" one applies everywhere.
CLAIMS: tuple[Claim, ...] = (
    Claim("dl2", "mean_jct_h", "drf", "<=", 1.0),
    Claim("oasis", "utility", "drf", ">=", 1.0),
    Claim("dual-agent", "mean_jct_h", BEST, "<=", 1.05),
    *(Claim(p, "mean_jct_h", BEST, "<=", 1.5) for p in PUBLISHED),
    Claim("dragon", "mean_jct_h", "kube-default", "<=", 0.5, forms=("itp-raw", "philly-draw"), sizes=(f"load{LOAD:g}",)),
)
#: The baselines "best baseline" picks from: the six without SRTF, an oracle (it plans from each job's true work).
REFERENCE_BASELINES: tuple[str, ...] = tuple(b for b in BASELINES if b != "srtf")


def cell_name(form: str, size: str) -> str:
    return f"{form}@{size}"


def grid(forms: dict[str, TraceForm], sizes: Sequence[str] = SIZES) -> dict[str, TraceCase]:
    """Every (form, size) as a real-traces case, named `form@size`."""
    for s in sizes:
        if s not in SIZES:
            raise ConfigError(f"unknown size {s!r}; known: {', '.join(SIZES)}")
    return {cell_name(f, s): form.at(s) for f, form in forms.items() for s in sizes}


def run(out: Path, root: Path, *, forms: dict[str, TraceForm] | None = None, sizes: Sequence[str] = SIZES,
        policies: tuple[str, ...] = POLICIES, claims: Sequence[Claim] = CLAIMS,
        reference_baselines: Sequence[str] = REFERENCE_BASELINES, step: Callable[[str], None] | None = None,
        report_only: bool = False, workers: int = 1, address: str | None = None,
        docs: Path | None = None, command: str | None = None) -> pd.DataFrame:
    """Run every (form, size, draw, policy) not yet in `out` (resumable: `real_traces.run_grid`),
    then write summary.csv (every cell x policy x metric with its interval), claims.csv and
    RESULTS.md; with `docs`, the same page there too (the reasons already written in its claims
    table are kept). Returns one row per run."""
    forms = FORMS if forms is None else forms
    cases = grid(forms, sizes)
    runs = rt.run_grid(out, root, cases, policies, step=step, report_only=report_only, workers=workers,
                       address=address, extra=("cluster", "throughput"))
    summary, _ = rt.summarize(out, cases, policies, claims=())
    where = {name: tuple(name.split("@", 1)) for name in cases}
    summary.insert(1, "form", summary["case"].map(lambda c: where[c][0]))
    summary.insert(2, "size", summary["case"].map(lambda c: where[c][1]))
    checked = check_claims(rt.job_tables(out, cases, policies), where, claims, reference_baselines)
    runs.to_csv(out / "runs.csv", index=False)
    summary.to_csv(out / "summary.csv", index=False)
    checked.to_csv(out / "claims.csv", index=False)
    page = render(runs, summary, checked, cases, forms, policies, command=command)
    (out / "RESULTS.md").write_text(page)
    if docs is not None:
        docs.write_text(keep_reasons(page, docs.read_text() if docs.exists() else ""))
    return runs


def best_baseline(tables: dict[str, pd.DataFrame], case: str, baselines: Sequence[str]) -> str | None:
    """The baseline with the lowest mean JCT on `case` (its point value; the claim's interval is
    paired against it, so it does not count the uncertainty of the choice). None: none ran."""
    got = {b: rt._metric(tables[f"{case}/{b}"], "mean_jct_h") for b in baselines if f"{case}/{b}" in tables}
    got = {b: v for b, v in got.items() if v == v}
    return min(got, key=got.__getitem__) if got else None


def check_claims(tables: dict[str, pd.DataFrame], where: dict[str, tuple[str, str]], claims: Sequence[Claim],
                 baselines: Sequence[str] = REFERENCE_BASELINES) -> pd.DataFrame:
    """Every claim on every cell it applies to: the paired ratio with its 95% interval and whether
    it holds (on the point value). A claim whose policy or reference did not run reads "not run",
    one whose ratio is undefined (no job finished under both) "n/a": a miss is never left out."""
    rows = []
    for case, (form, size) in where.items():
        best = best_baseline(tables, case, baselines)
        for c in claims:
            if not c.applies(form, size):
                continue
            ref = best if c.reference == BEST else c.reference
            label = ref if c.reference != BEST else f"best baseline ({ref or 'none run'})"
            row = {"claim": c.text(label), "cell": case, "form": form, "size": size, "policy": c.policy,
                   "reference": ref or "", "value": np.nan, "low": np.nan, "high": np.nan}
            if ref is None or f"{case}/{c.policy}" not in tables or f"{case}/{ref}" not in tables:
                rows.append({**row, "holds": "not run"})
                continue
            v, lo, hi = rt.paired_ci(tables[f"{case}/{c.policy}"], tables[f"{case}/{ref}"], c.metric, "ratio")
            rows.append({**row, "value": v, "low": lo, "high": hi,
                         "holds": "n/a" if v != v else str(rt.OPS[c.op](v, c.bound))})
    cols = ["claim", "cell", "form", "size", "policy", "reference", "value", "low", "high", "holds"]
    return pd.DataFrame(rows, columns=cols)


def _interval(v: float, lo: float, hi: float) -> str:
    return f"{v:.3g} [{lo:.3g}, {hi:.3g}]" if v == v else "n/a"


def _setup(runs: pd.DataFrame, cases: dict[str, TraceCase], forms: dict[str, TraceForm]) -> pd.DataFrame:
    rows = []
    for name, case in cases.items():
        r = runs[runs["case"] == name] if len(runs) else runs
        served: dict[str, int] = {}
        for text in (r["throughput"] if "throughput" in r else []):
            for k, v in (json.loads(text) if isinstance(text, str) and text else {}).items():  # "": a cell from before
                served[k] = max(served.get(k, 0), v)
        form, size = name.split("@", 1)
        rows.append({
            "cell": name, "trace": case.path + (f" (first {case.limit:,})" if case.limit else ""),
            "jobs": forms[form].about,
            "cluster": (forms[form].preset if size == "preset" else f"{case.base} at load {case.load:g}")
            + (f": {int(r['gpus'].iloc[0])} GPUs" if len(r) else ""),
            "offered load": f"{r['offered_load'].mean():.2f}" if len(r) else "not run",
            "draws": case.seeds,
            "throughput model (jobs)": ", ".join(f"{k} ({v:,})" for k, v in served.items()) or "-",
        })
    return pd.DataFrame(rows)


def render(runs: pd.DataFrame, summary: pd.DataFrame, claims: pd.DataFrame, cases: dict[str, TraceCase],
           forms: dict[str, TraceForm], policies: Sequence[str], *, command: str | None = None) -> str:
    """The page: how it was made, the setup, mean JCT of every policy on every cell, the claims."""
    from dlsched import provenance as prov

    git = prov.git_state()
    commit = "unknown" if git is None else f"{git['commit'][:10]}{' (dirty)' if git['dirty'] else ''}"
    wall = runs["wall_s"].sum() / 3600 if len(runs) else 0.0
    lines = [
        "# Robustness: every policy on each trace form x two cluster sizes", "",
        "Written by `dlsched experiment robustness` (`src/dlsched/experiments/robustness.py`); every figure is "
        "from the runs in its results folder. Values are means over jobs with 95% bootstrap intervals; a claim "
        "is a ratio paired by job, and `holds` judges its point value. A claim that misses stays in the table; "
        "its `reason` is for the docs (a rerun with `--docs` keeps the reasons written).", "",
        f"- Command: `{command or prov.command_line() or 'dlsched experiment robustness'}`",
        f"- Machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; dlsched {prov.version()} at commit {commit}",
        f"- Date: {_dt.date.today().isoformat()}; simulation time of the runs {wall:.2f} h (sum over runs)", "",
        "## Setup", "", rt._md(_setup(runs, cases, forms)), "",
    ]
    d = summary[summary["metric"] == "mean_jct_h"]
    cellv = [_interval(v, lo, hi) if ran else "not run" for v, lo, hi, ran in zip(d["value"], d["low"], d["high"], d["run"])]
    wide = d.assign(v=cellv).pivot(index="case", columns="policy", values="v").reindex(list(cases))
    wide = wide[[p for p in policies]].reset_index().rename(columns={"case": "cell"})
    lines += ["## Mean JCT (h), 95% CI", "", rt._md(wide), ""]
    shown = claims.assign(measured=[_interval(v, lo, hi) if h != "not run" else "not run"
                                    for v, lo, hi, h in zip(claims["value"], claims["low"], claims["high"], claims["holds"])],
                          reason="")
    lines += ["## Claims", "", rt._md(shown[["claim", "cell", "measured", "holds", "reason"]]), ""]
    held = shown["holds"].value_counts()
    lines += [f"{int(held.get('True', 0))} hold, {int(held.get('False', 0))} miss, "
              f"{int(held.get('n/a', 0) + held.get('not run', 0))} not measured, of {len(shown)}.", ""]
    return "\n".join(lines)


_CLAIM_ROW = re.compile(r"^\| (?P<claim>[^|]+) \| (?P<cell>[^|]+) \| [^|]* \| (?P<holds>[^|]*) \| (?P<reason>[^|]*) \|$")


def keep_reasons(page: str, old: str) -> str:
    """`page` with the reasons of `old`'s claims table put back where the claim and cell match (by
    the claim's text without its chosen reference, the trailing "(drf)" of a best-baseline claim,
    which may change between runs; only that: "mean JCT (h) <= 1.05x best baseline (drf)" and
    "... <= 1.5x best baseline (drf)" are two claims) and the claim still misses: a reason says
    why a claim misses, so one that now holds drops it."""
    def ident(claim: str, cell: str) -> tuple[str, str]:
        return re.sub(r"\s*\([^()]*\)\s*$", "", claim.strip()), cell.strip()

    reasons = {ident(m["claim"], m["cell"]): m["reason"].strip()
               for m in map(_CLAIM_ROW.match, old.splitlines()) if m and m["reason"].strip()}
    out = []
    for line in page.splitlines():
        m = _CLAIM_ROW.match(line)
        if m and m["holds"].strip() != "True" and (why := reasons.get(ident(m["claim"], m["cell"]))):
            line = line[: m.start("reason")] + why + line[m.end("reason"):]
        out.append(line)
    return "\n".join(out) + ("\n" if page.endswith("\n") else "")
