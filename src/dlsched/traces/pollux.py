"""Pollux (OSDI 2021) workloads: 160-job samples of Philly mapped onto six profiled applications.

Columns: name, time (s), application, num_replicas, batch_size.
- model = "pollux:" + application; num_workers = num_replicas (one T4 GPU each, worker demand
  (1 GPU, 4 CPU, 16 GiB)); batch_size = the job's fixed total batch size (what Pollux gives the
  non-adaptive baselines); `single` for 1 replica, else `allreduce`.
- iterations: Pollux's own completion rule. With no target metric, a job trains the application's
  epoch count (the rows of its validation-<B>.csv files: bert 2, cifar10 100, ...) and completes
  after the last one; the iterations that takes at total batch size B is the `iteration` value of
  the last row of validation-<B>.csv, linearly interpolated between the two profiled batch sizes
  around B when B itself was not profiled (as Pollux's Application.get_iteration does). A batch
  size outside the profiled range is a problem, not an extrapolation.
- work_known = True: each application declares its epoch count up front (as DL2 jobs do).
- elastic=True: min_workers 1, max_workers = min(64, max profiled batch / min local batch),
  Pollux's own cap; ncf is pinned to 1 replica, as in Pollux's simulator.
- Profiles are read from ../traces/<application>/ beside the workload folder, else from
  $DLSCHED_TRACES/pollux-profiles/traces.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.paths import missing_traces_hint, traces_dir
from dlsched.traces import checks
from dlsched.traces.frame import MAX_TASKS, Parsed
from dlsched.traces.problems import ProblemLog
from dlsched.traces.reader import read_csv

ATTRIBUTION = "Pollux workloads and profiles (Qiao et al., OSDI 2021), petuum/adaptdl osdi21-artifact, Apache-2.0"
MAX_REPLICAS = 64  # Pollux's simulator cap
PINNED_ONE_REPLICA = {"ncf"}


@dataclass(frozen=True)
class AppProfile:
    """Per-application facts derived from the profile CSVs."""

    batch_sizes: tuple[int, ...]  # profiled total batch sizes, ascending
    final_iterations: tuple[float, ...]  # iterations to finish at each of them
    epochs: int
    max_replicas: int

    def iterations(self, batch_size: float) -> float | None:
        """Pollux's linear interpolation between profiled batch sizes; None outside the range."""
        bs = np.asarray(self.batch_sizes, dtype=float)
        if not bs[0] <= batch_size <= bs[-1]:
            return None
        return float(np.interp(batch_size, bs, np.asarray(self.final_iterations)))


def profiles_dir(workload: Path, traces: Path | None = None) -> Path | None:
    """The profiles beside the workload folder, else in the traces root (`traces`, or the default
    root of `dlsched.paths.traces_dir` when None)."""
    beside = workload.resolve().parent.parent / "traces"
    if beside.is_dir():
        return beside
    root = traces if traces is not None else traces_dir()
    if root is not None and (root / "pollux-profiles" / "traces").is_dir():
        return root / "pollux-profiles" / "traces"
    return None


@functools.lru_cache(maxsize=16)
def load_profile(app_dir: Path) -> AppProfile | None:
    files = sorted(app_dir.glob("validation-*.csv"))
    if not files:
        return None
    tables = {}
    for f in files:
        try:
            tables[int(f.stem.rsplit("-", 1)[1])] = pd.read_csv(f)
        except (ValueError, pd.errors.ParserError):
            return None
    epochs = min(len(t) for t in tables.values())
    bss = tuple(sorted(tables))
    final = tuple(float(tables[b]["iteration"].iloc[epochs - 1]) for b in bss)
    cap = MAX_REPLICAS
    placements = app_dir / "placements.csv"
    if placements.is_file():
        min_local = float(pd.read_csv(placements)["local_bsz"].min())
        cap = int(min(MAX_REPLICAS, bss[-1] // min_local))
    if app_dir.name in PINNED_ONE_REPLICA:
        cap = 1
    return AppProfile(bss, final, epochs, max(cap, 1))


def read(path: Path, log: ProblemLog, *, elastic: bool = False, seed: int = 0, traces: Path | None = None) -> Parsed:
    folder = path.resolve().parent.name
    meta = dict(name=f"pollux-{folder}-{path.stem}", cluster="pollux", attribution=ATTRIBUTION)
    df = read_csv(path, log, required=["name", "time", "application", "num_replicas", "batch_size"], text_columns=["name", "application"])
    if df is None:
        return Parsed(None, **meta)
    lines = checks.lines_of(df)
    ids = checks.texts(df, "name", log)
    checks.unique_ids(ids, lines, log, "name")
    t = checks.numbers(df, "time", log, min_value=0)
    app = checks.texts(df, "application", log)
    reps = checks.numbers(df, "num_replicas", log, min_value=1, integer=True, max_value=MAX_TASKS)
    bs = checks.numbers(df, "batch_size", log, min_value=1, integer=True)
    pdir = profiles_dir(path, traces)
    if pdir is None:
        log.add(1, "application", "no Pollux profiles found (expected ../traces/<application>/validation-*.csv beside the "
                f"workload folder, or pollux-profiles/traces/ in the traces root); {missing_traces_hint('pollux-profiles/')}")
        return Parsed(None, **meta)
    profiles = {a: load_profile(pdir / a) for a in set(x for x in app if isinstance(x, str))}
    iters = np.full(len(df), np.nan)
    cap = np.ones(len(df))
    epochs = np.zeros(len(df), dtype=int)
    for i, (a, b) in enumerate(zip(app.tolist(), bs.tolist())):
        prof = profiles.get(a) if isinstance(a, str) else None
        if prof is None:
            if isinstance(a, str):
                log.add(int(lines[i]), "application", f"no profile for {a!r} in {pdir} (have: {', '.join(sorted(p.name for p in pdir.iterdir() if p.is_dir()))})")
            continue
        cap[i], epochs[i] = prof.max_replicas, prof.epochs
        if b == b:
            it = prof.iterations(b)
            if it is None:
                log.add(int(lines[i]), "batch_size", f"{b:g} is outside {a}'s profiled range {prof.batch_sizes[0]}..{prof.batch_sizes[-1]}")
            iters[i] = np.nan if it is None else it
    n = np.nan_to_num(reps, nan=1.0)
    if elastic:
        arch = np.full(len(df), "allreduce", dtype=object)
        lo, hi = np.ones(len(df)), np.maximum(cap, n)
    else:
        arch = np.where(n == 1, "single", "allreduce").astype(object)
        lo = hi = n
    frame = pd.DataFrame(
        {
            "_line": lines,
            "job_id": ids,
            "submit_time": t,
            "iterations": iters,
            "model": ["pollux:" + a if isinstance(a, str) else None for a in app],
            "num_workers": n,
            "min_workers": lo,
            "max_workers": hi,
            "arch": arch,
            "batch_size": bs,
            "work_known": True,
            "extra": [{"epochs": int(e)} if e else {} for e in epochs.tolist()],
        }
    )
    return Parsed(frame, **meta)
