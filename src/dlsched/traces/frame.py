"""The canonical job table every adapter produces, and the one place that turns it into JobSpecs.

Adapters translate their file into a DataFrame with the JobSpec field names (worker/PS demands as
`worker_gpu`, `worker_cpu`, ... columns); `finalize` fills defaults, applies JobSpec's own
normalisation and runs JobSpec's checks vectorised, so a bad row is reported with its line instead
of failing on the first bad object. `build_jobs` then makes the frozen JobSpecs.

Building 82k JobSpecs through the constructor costs ~2 s (per-object checks in Python); since
`finalize` has already done exactly those checks and normalisations on whole columns, `build_jobs`
fills each object's fields directly. It does so only while JobSpec has exactly the fields this
module knows; if JobSpec gains or loses a field it falls back to the constructor, so a change to
the core can never be silently bypassed (tests compare both paths).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from sys import intern

import numpy as np
import pandas as pd

from dlsched.core.errors import ConfigError
from dlsched.core.job import Architecture, JobSpec, demand_tuple
from dlsched.traces.problems import ProblemLog
from dlsched.traces.reader import LINE

#: Defaults for columns an adapter may leave out (JobSpec's own defaults; NaN = "derive").
DEFAULTS: dict[str, object] = {
    "num_workers": 1,
    "arch": "allreduce",
    "model": "duration-only",
    "worker_gpu": 1.0,
    "worker_cpu": 4.0,
    "worker_mem": 16.0,
    "ps_gpu": 0.0,
    "ps_cpu": 2.0,
    "ps_mem": 8.0,
    "min_workers": np.nan,
    "max_workers": np.nan,
    "num_ps": 0,
    "min_ps": np.nan,
    "max_ps": np.nan,
    "duration": np.nan,
    "work_known": False,
    "deadline": np.nan,
    "priority": 0,
    "queue": "default",
    "user": "default",
    "gpu_type": None,
    "batch_size": np.nan,
    "extra": None,
    "utility": None,
}

_KNOWN_FIELDS = {
    "job_id", "submit_time", "iterations", "num_workers", "arch", "model", "worker_demand",
    "ps_demand", "min_workers", "max_workers", "num_ps", "min_ps", "max_ps", "duration",
    "work_known", "deadline", "utility", "priority", "queue", "user", "gpu_type", "batch_size",
    "extra",
}  # fmt: skip


#: The largest value each numeric column may hold (docs/DECISIONS.md, "Trace value bounds"). Past
#: these no cluster could ever hold the job, and the arithmetic downstream overflows: 1e308 GPUs
#: passed validation and became a negative task count in the simulator. The bounds are far above
#: any real trace (the largest GPU clusters have ~10^5 GPUs; ~31,700 years of seconds).
MAX_TASKS = 1_000_000
MAX_PER_TASK = 1_000_000.0
MAX_SECONDS = 1e12
BOUNDS: dict[str, float] = {
    **dict.fromkeys(("num_workers", "min_workers", "max_workers", "num_ps", "min_ps", "max_ps"), MAX_TASKS),
    **dict.fromkeys(("worker_gpu", "worker_cpu", "worker_mem", "ps_gpu", "ps_cpu", "ps_mem"), MAX_PER_TASK),
    **dict.fromkeys(("submit_time", "duration", "deadline"), MAX_SECONDS),
    "iterations": 1e15,
    "priority": 1e9,
    "batch_size": 1e9,
}


@dataclass
class Parsed:
    """What an adapter returns: the canonical table plus what a Workload says about its source."""

    frame: pd.DataFrame | None
    name: str
    cluster: str
    attribution: str = ""
    dropped: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def finalize(df: pd.DataFrame, log: ProblemLog) -> pd.DataFrame:
    """Fill defaults, normalise like JobSpec.__post_init__, and report what JobSpec would reject."""
    df = df.copy()
    for col, val in DEFAULTS.items():
        if col not in df.columns:
            df[col] = [val] * len(df) if isinstance(val, (dict, list)) else val
    lines = df[LINE].to_numpy()
    _check_bounds(df, lines, log)
    # rows already reported at their source column (e.g. a negative duration) are not reported
    # again here under the derived column (iterations)
    fresh = ~log.flagged(lines)
    nw = df["num_workers"].to_numpy(dtype=float)
    mn = df["min_workers"].to_numpy(dtype=float)
    mx = df["max_workers"].to_numpy(dtype=float)
    mn = np.where(np.isnan(mn), nw, mn)
    mx = np.where(np.isnan(mx), nw, mx)
    is_ps = (df["arch"] == "ps").to_numpy()
    nps = np.where(is_ps, np.maximum(df["num_ps"].to_numpy(dtype=float), 1), 0)
    mnps = df["min_ps"].to_numpy(dtype=float)
    mxps = df["max_ps"].to_numpy(dtype=float)
    mnps = np.where(is_ps, np.where(np.isnan(mnps), 1, mnps), 0)
    mxps = np.where(is_ps, np.where(np.isnan(mxps), np.maximum(nps, mx), mxps), 0)
    df["min_workers"], df["max_workers"] = mn, mx
    df["num_ps"], df["min_ps"], df["max_ps"] = nps, mnps, mxps

    it = df["iterations"].to_numpy(dtype=float)
    sub = df["submit_time"].to_numpy(dtype=float)
    dl = df["deadline"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        log.add_rows(fresh & (it <= 0), lines, "iterations", lambda i: f"must be > 0, got {it[i]:g}")
        log.add_rows(fresh & ~np.isfinite(sub) & ~np.isnan(sub), lines, "submit_time", "not a finite time")
        log.add_rows(fresh & (sub < 0), lines, "submit_time", lambda i: f"must be >= 0, got {sub[i]:g}")
        order = fresh & ((mn < 1) | (mn > nw) | (nw > mx))
        log.add_rows(
            order, lines, "num_workers",
            lambda i: f"need 1 <= min_workers ({mn[i]:g}) <= num_workers ({nw[i]:g}) <= max_workers ({mx[i]:g})",
        )  # fmt: skip
        single = fresh & (df["arch"] == "single").to_numpy() & (mx != 1) & ~np.isnan(mx)
        log.add_rows(single, lines, "arch", lambda i: f"a 'single' job has exactly one worker, got max_workers {mx[i]:g}")
        ps_order = fresh & is_ps & ((mnps < 1) | (mnps > nps) | (nps > mxps))
        log.add_rows(
            ps_order, lines, "num_ps",
            lambda i: f"need 1 <= min_ps ({mnps[i]:g}) <= num_ps ({nps[i]:g}) <= max_ps ({mxps[i]:g})",
        )  # fmt: skip
        for col in ("worker_gpu", "worker_cpu", "worker_mem", "ps_gpu", "ps_cpu", "ps_mem"):
            v = df[col].to_numpy(dtype=float)
            log.add_rows(fresh & (v < 0), lines, col, lambda i, v=v: f"must be >= 0, got {v[i]:g}")
        early = fresh & (dl < sub)
        log.add_rows(early, lines, "deadline", lambda i: f"deadline {dl[i]:g} is before the submit time {sub[i]:g}")
    fresh = ~log.flagged(lines)  # safety net for adapter bugs: a required value left empty
    for col in ("job_id", "submit_time", "iterations", "num_workers"):
        log.add_rows(fresh & df[col].isna().to_numpy(), lines, col, "missing value")
    return df


def _check_bounds(df: pd.DataFrame, lines: np.ndarray, log: ProblemLog) -> None:
    """Every numeric value finite and within BOUNDS (a magnitude, so a priority of -10^300 counts);
    one problem per row, at the first column out of bounds (a derived column, e.g. max_workers
    copied from num_workers, is not reported again)."""
    fresh = ~log.flagged(lines)
    for col, bound in BOUNDS.items():
        v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        with np.errstate(invalid="ignore"):
            inf = fresh & np.isinf(v)
            big = fresh & ~inf & (np.abs(v) > bound)
        log.add_rows(inf, lines, col, "not a finite number")
        log.add_rows(big, lines, col, lambda i, v=v, b=bound: f"must be <= {b:g}, got {v[i]:g}")
        fresh &= ~(inf | big)


def sort_and_limit(df: pd.DataFrame, limit: int | None) -> pd.DataFrame:
    """Jobs in submit order (file order among equal times); `limit` keeps the first ones."""
    df = df.sort_values(["submit_time", LINE], kind="mergesort").reset_index(drop=True)
    if limit is not None:
        if limit < 0:
            raise ConfigError(f"limit must be >= 0, got {limit}")
        df = df.iloc[:limit]
    return df


def _opt(arr: np.ndarray, cast) -> list:
    """NaN -> None, else cast (so JobSpec fields hold plain Python values)."""
    return [None if x != x else cast(x) for x in arr.tolist()]


#: Rows turned into JobSpecs at a time: the per-column Python lists are made a chunk at a time.
CHUNK = 20_000


def build_jobs(df: pd.DataFrame, log: ProblemLog) -> list[JobSpec]:
    """JobSpecs for a finalized frame; any row JobSpec still refuses is reported by line.

    Memory: a million-job trace holds every JobSpec for the whole run, so values a trace repeats
    (model, queue, user, GPU type, demands) are shared between jobs, not one copy per job, and
    the rows are converted `CHUNK` at a time (a Python list per column of the whole frame was
    ~500 bytes a job on top of the specs at the peak of loading)."""
    jobs: list[JobSpec] = []
    for start in range(0, len(df), CHUNK):
        jobs.extend(_build_chunk(df.iloc[start:start + CHUNK], log))
    return jobs


def _build_chunk(df: pd.DataFrame, log: ProblemLog) -> list[JobSpec]:
    by_name = {a.value: a for a in Architecture}
    arch = [by_name[a] for a in df["arch"].tolist()]
    wd = [demand_tuple(t) for t in zip(*(df[c].to_numpy(dtype=float).tolist()
                                          for c in ("worker_gpu", "worker_cpu", "worker_mem")))]
    pd_ = [demand_tuple(t) for t in zip(*(df[c].to_numpy(dtype=float).tolist() for c in ("ps_gpu", "ps_cpu", "ps_mem")))]
    extra = [dict(e) if isinstance(e, dict) else {} for e in df["extra"].tolist()]
    cols = dict(
        job_id=[str(x) for x in df["job_id"].tolist()],
        submit_time=df["submit_time"].to_numpy(dtype=float).tolist(),
        iterations=df["iterations"].to_numpy(dtype=float).tolist(),
        num_workers=df["num_workers"].to_numpy(dtype=float).astype(int).tolist(),
        arch=arch,
        model=[intern(str(x)) for x in df["model"].tolist()],
        worker_demand=wd,
        ps_demand=pd_,
        min_workers=df["min_workers"].to_numpy(dtype=float).astype(int).tolist(),
        max_workers=df["max_workers"].to_numpy(dtype=float).astype(int).tolist(),
        num_ps=df["num_ps"].to_numpy(dtype=float).astype(int).tolist(),
        min_ps=df["min_ps"].to_numpy(dtype=float).astype(int).tolist(),
        max_ps=df["max_ps"].to_numpy(dtype=float).astype(int).tolist(),
        duration=_opt(df["duration"].to_numpy(dtype=float), float),
        work_known=[bool(x) for x in df["work_known"].tolist()],
        deadline=_opt(df["deadline"].to_numpy(dtype=float), float),
        utility=df["utility"].tolist(),
        priority=df["priority"].to_numpy(dtype=float).astype(int).tolist(),
        queue=[intern(str(x)) for x in df["queue"].tolist()],
        user=[intern(str(x)) for x in df["user"].tolist()],
        gpu_type=[intern(x) if isinstance(x, str) and x else None for x in df["gpu_type"].tolist()],
        batch_size=_opt(df["batch_size"].to_numpy(dtype=float), int),
        extra=extra,
    )
    names = list(cols)
    rows = zip(*cols.values())
    if {f.name for f in dataclasses.fields(JobSpec)} == _KNOWN_FIELDS:
        new = object.__new__
        setters = [getattr(JobSpec, name).__set__ for name in names]  # JobSpec is slotted
        jobs = []
        for row in rows:
            job = new(JobSpec)
            for put, value in zip(setters, row):
                put(job, value)
            jobs.append(job)
        return jobs
    return _build_slow(names, rows, df[LINE].tolist(), log)


def _build_slow(names: list[str], rows, lines: list[int], log: ProblemLog) -> list[JobSpec]:
    jobs = []
    for line, row in zip(lines, rows):
        try:
            jobs.append(JobSpec(**dict(zip(names, row))))
        except ConfigError as e:
            log.add(line, "-", str(e))
    return jobs
