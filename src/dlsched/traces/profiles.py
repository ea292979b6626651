"""Which measured job behaviour a loaded trace job runs with (`--profiles`), and its elastic range.

A trace gives arrivals, sizes and durations; how a job's speed changes with its size and placement
comes from measured curves (`throughput.elasticflow`). Three modes:
- "auto": jobs whose trace names a measured (model, batch) — the ITP deadline traces'
  `model_name`/`batch_size` columns — run on that curve; every other job keeps the trace's
  duration-only behaviour.
- "draw" (the command line's default, `DEFAULT_PROFILES`): as auto, and every remaining
  duration-only job gets a curve measured at its size, drawn
  uniformly with a seeded generator (as Gavel and Pollux assigned profiles to Philly jobs). The
  draw is recorded per job (the `profile` column of jobs.csv says "drawn"); jobs larger than every
  curve stay duration-only, and the workload notes count them.
- "off": no measured curves at all: today's duration-only behaviour, the documented baseline.

Elasticity (`elastic`): None (default) makes curve jobs elastic within their measured range —
1 GPU up to where the curve stops improving (never below the requested size) — and leaves
duration-only jobs rigid; True also makes duration-only jobs elastic (1..2k, `sizing`); False
(`--rigid`) keeps every job at its requested size. A job keeps its trace duration at its requested
size either way.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np

from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.throughput.elasticflow import GPU_TYPE, PREFIX, Curve, profile_name, shipped_curves

PROFILE_MODES = ("auto", "draw", "off")
#: What `simulate`, `compare`, `replay`, run configs and sweeps use when no mode is named: a duration-only
#: trace's jobs on drawn measured curves, as Gavel and Pollux read Philly (docs/DECISIONS.md, issue 29).
#: `load_trace` itself defaults to "auto": a library caller names what it wants.
DEFAULT_PROFILES = "draw"


def on_curve(spec: JobSpec, curve: Curve, *, elastic: bool, how: str) -> JobSpec:
    """`spec` running on `curve`: model key, batch, elastic range, and a profile note."""
    k = spec.num_workers
    hi = curve.peak(at_least=k) if elastic else k
    extra = {**spec.extra, "profile": f"{profile_name(curve.model, curve.batch)} {GPU_TYPE}, {how}"}
    return replace(
        spec, model=f"{PREFIX}{curve.model}", batch_size=curve.batch, extra=extra,
        arch="allreduce" if hi > 1 else "single",
        min_workers=1 if elastic else k, max_workers=max(k, hi),
    )


def apply_profiles(
    jobs: list[JobSpec], mode: str = "auto", *, elastic: bool | None = None, seed: int = 0,
    curves: dict[tuple[str, int], Curve] | None = None,
) -> tuple[list[JobSpec], list[str]]:
    """The jobs with measured behaviour applied as `mode` says (module doc), and notes for the
    report (how many jobs run on which kind of data)."""
    if mode not in PROFILE_MODES:
        raise ConfigError(f"profiles must be one of {', '.join(PROFILE_MODES)}, got {mode!r}")
    if mode == "off":
        return jobs, []
    curves = shipped_curves() if curves is None else curves
    grow = elastic is not False
    rng = np.random.default_rng(seed)
    by_size: dict[int, list[Curve]] = {}
    ordered = [curves[k] for k in sorted(curves)]
    out: list[JobSpec] = []
    kinds: Counter = Counter()
    for spec in jobs:
        named = (spec.extra.get("model_name"), spec.extra.get("batch_size"))
        curve = curves.get((str(named[0]), int(named[1]))) if None not in named else None
        if curve is not None and spec.model == "duration-only":
            out.append(on_curve(spec, curve, elastic=grow, how="from the trace"))
            kinds["trace"] += 1
            continue
        if mode == "draw" and spec.model == "duration-only" and spec.worker_demand[0] == 1.0:
            k = spec.num_workers
            fits = by_size.get(k)
            if fits is None:
                fits = by_size[k] = [c for c in ordered if c.max_size >= k]
            if fits:
                pick = fits[int(rng.integers(len(fits)))]
                out.append(on_curve(spec, pick, elastic=grow, how=f"drawn with seed {seed}"))
                kinds["drawn"] += 1
                continue
            kinds["too large"] += 1
        out.append(spec)
    notes = []
    if kinds["trace"]:
        notes.append(f"{kinds['trace']} jobs run on the measured {GPU_TYPE} curve of the model and batch their "
                     "trace names (ElasticFlow)")
    if kinds["drawn"]:
        notes.append(f"{kinds['drawn']} jobs run on a measured {GPU_TYPE} curve drawn at their size "
                     f"(seed {seed}, recorded in jobs.csv's profile column)")
    if kinds["too large"]:
        notes.append(f"{kinds['too large']} jobs are larger than every measured curve and stay duration-only")
    if (kinds["trace"] or kinds["drawn"]) and grow:
        notes.append("jobs on measured curves are elastic from 1 GPU to where their curve stops improving "
                     "(--rigid keeps them at their requested size)")
    return out, notes
