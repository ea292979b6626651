"""Synthetic duration-only workloads: Poisson arrivals or a given per-slot arrival pattern.

For sweeps that real traces cannot give (load levels, burstiness). Every random choice comes from
one NumPy generator seeded by `seed`, so a (parameters, seed) pair always gives the same jobs.
Defaults are shaped after the ITP cluster04 trace: GPU mix 1:75%, 2:1%, 4:3%, 8:18%, 16:1%,
32:2%; log-normal durations with a 1 h median and sigma 1.5, clipped to [60 s, 7 days].
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from dlsched.core.errors import ConfigError
from dlsched.traces.frame import build_jobs, finalize
from dlsched.traces.problems import ProblemLog
from dlsched.traces.sizing import worker_columns
from dlsched.traces.workload import Workload

DEFAULT_GPU_MIX: dict[int, float] = {1: 0.75, 2: 0.01, 4: 0.03, 8: 0.18, 16: 0.01, 32: 0.02}
DEFAULT_RATE = 1 / 300.0  # one job every 5 minutes on average


def synthetic_workload(
    num_jobs: int,
    rate: float | None = None,
    pattern: Sequence[int] | None = None,
    seed: int = 0,
    *,
    slot_seconds: float = 3600.0,
    gpu_mix: dict[int, float] | None = None,
    duration_median: float = 3600.0,
    duration_sigma: float = 1.5,
    min_duration: float = 60.0,
    max_duration: float = 7 * 86400.0,
    elastic: bool = False,
    cluster: str = "itp-small",
    name: str = "synthetic",
) -> Workload:
    """`num_jobs` jobs arriving as a Poisson process of `rate` jobs/s (default one per 5 min), or,
    when `pattern` is given, `pattern[k]` jobs at the start of slot k (cycled until num_jobs)."""
    if num_jobs < 1:
        raise ConfigError(f"synthetic workload: num_jobs must be >= 1, got {num_jobs}")
    if rate is not None and pattern is not None:
        raise ConfigError("synthetic workload: give a Poisson rate or an arrival pattern, not both")
    if duration_median <= 0 or duration_sigma < 0 or not 0 < min_duration <= max_duration:
        raise ConfigError("synthetic workload: need duration_median > 0, sigma >= 0, 0 < min <= max duration")
    mix = dict(gpu_mix or DEFAULT_GPU_MIX)
    sizes = np.array(list(mix), dtype=float)
    probs = np.array(list(mix.values()), dtype=float)
    if len(sizes) == 0 or (sizes < 1).any() or (sizes != np.floor(sizes)).any():
        raise ConfigError(f"synthetic workload: GPU mix sizes must be whole numbers >= 1, got {list(mix)}")
    if (probs < 0).any() or probs.sum() <= 0:
        raise ConfigError("synthetic workload: GPU mix weights must be >= 0 and not all 0")
    rng = np.random.default_rng(seed)
    if pattern is not None:
        counts = [int(c) for c in pattern]
        if not counts or min(counts) < 0 or sum(counts) == 0:
            raise ConfigError("synthetic workload: the arrival pattern needs non-negative counts, not all 0")
        if slot_seconds <= 0:
            raise ConfigError("synthetic workload: slot_seconds must be > 0")
        reps = -(-num_jobs // sum(counts))
        slots = np.repeat(np.arange(len(counts) * reps), np.tile(counts, reps))[:num_jobs]
        submit = slots * float(slot_seconds)
        how = f"pattern of {len(counts)} slots x {slot_seconds:g} s"
    else:
        rate = DEFAULT_RATE if rate is None else float(rate)
        if not rate > 0:
            raise ConfigError(f"synthetic workload: rate must be > 0 jobs/s, got {rate}")
        submit = np.cumsum(rng.exponential(1.0 / rate, num_jobs))
        how = f"Poisson, {rate:g} jobs/s"
    gpus = rng.choice(sizes, size=num_jobs, p=probs / probs.sum())
    dur = np.clip(
        np.round(duration_median * np.exp(duration_sigma * rng.standard_normal(num_jobs))), min_duration, max_duration
    )
    frame = pd.DataFrame(
        {
            "_line": np.arange(1, num_jobs + 1),
            "job_id": [f"syn-{i:05d}" for i in range(1, num_jobs + 1)],
            "submit_time": submit,
            "iterations": dur,
            "duration": dur,
            **worker_columns(gpus, elastic),
        }
    )
    log = ProblemLog(name)
    jobs = build_jobs(finalize(frame, log), log)
    log.raise_if_any("synthetic workload")
    return Workload(
        name=name,
        jobs=jobs,
        source=f"synthetic:{how}, seed {seed}",
        cluster=cluster,
        attribution="synthetic (dlsched)",
    )
