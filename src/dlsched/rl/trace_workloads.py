"""Trace-like training workloads for DL2: windows of consecutive jobs of real traces, each job on
a measured scaling curve.

Why: the shipped DL2 network was trained on DL2's synthetic parameter-server jobs, and on the ITP
deadline traces' all-reduce curve jobs it is out of its training distribution (docs/DL2.md). To
learn on jobs like those it will schedule, the recipe stays DL2's (warm-up on a teacher, then
actor-critic) and only the workloads change: a seed picks a trace file and a window start, so the
same seed always gives the same jobs.

- `workloads: itp` (`itp_windows`): the ITP deadline traces, which name each job's model and batch.
  Training and validation read disjoint files, and neither reads the jobs dlsched's ITP evaluations
  use (cluster03, 195job, and the embedded cluster04 slice, rows 201-500: `first_row` skips them).
- `workloads: trace` (`dlsched train dl2 --trace FILE[,FILE...]`): any trace `load_trace` reads.
  Jobs get measured curves the way `--profiles` does: "auto" when the trace names its models,
  "draw" (a seeded, recorded draw of a curve measured at the job's size) when it names none.
  Validation windows come from other files, or from the last part of each training file (`part`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.paths import missing_traces_hint
from dlsched.traces.profiles import apply_profiles
from dlsched.traces.registry import load_trace
from dlsched.throughput.elasticflow import PREFIX

#: Where the ITP deadline traces live under the traces root.
ITP_DEADLINE_DIR = Path("elasticflow-itp") / "elasticflow"


def resolve_trace_files(files: tuple[str, ...], traces: Path | None) -> list[Path]:
    """Each file as given, or else relative to the traces root; a ConfigError naming the first
    one found in neither place."""
    paths = []
    for f in files:
        p = Path(f).expanduser()
        if not p.is_file() and traces is not None and (Path(traces) / f).is_file():
            p = Path(traces) / f
        if not p.is_file():
            raise ConfigError(f"trace file not found: {f}" + (f" (nor under {traces})" if traces is not None else ""))
        paths.append(p)
    return paths


@lru_cache(maxsize=8)
def trace_jobs(path: Path, profiles: str, seed: int) -> tuple[JobSpec, ...]:
    """A trace file's jobs, read once per process (the check, the training and the validation
    windows all read the same files): on named curves ("auto") or `measured_jobs`."""
    return tuple(load_trace(path, profiles="auto").jobs if profiles == "auto" else measured_jobs(path, seed))


def measured_jobs(path: Path, seed: int = 0) -> list[JobSpec]:
    """The trace's jobs on measured curves: those its rows name ("auto"), or, when it names no
    model with a curve, a seeded draw of one fitting each job ("draw")."""
    jobs = load_trace(path, profiles="off").jobs
    named, _ = apply_profiles(jobs, "auto")
    if any(j.model.startswith(PREFIX) for j in named):
        return named
    drawn, _ = apply_profiles(jobs, "draw", seed=seed)
    return drawn


class TraceWindows:
    """`num_jobs` consecutive jobs of one of `paths`, chosen by seed, from row `first_row` on and
    within the fraction `part` (start, end) of the rows left (the part a split may use)."""

    def __init__(self, paths: list[Path], num_jobs: int, first_row: int = 0, part: tuple[float, float] = (0.0, 1.0),
                 profiles: str = "auto", seed: int = 0):
        self.paths = paths
        self.num_jobs = num_jobs
        self.first_row = first_row
        self.part = part
        self.profiles = profiles  # "auto" (the ITP traces) or "measured" (auto, else draw: `measured_jobs`)
        self.seed = seed
        self._jobs: dict[Path, list[JobSpec]] = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_jobs": {}}  # a worker reads the files itself rather than receive them

    def _trace(self, path: Path) -> list[JobSpec]:
        if path not in self._jobs:
            jobs = list(trace_jobs(path, self.profiles, self.seed)[self.first_row:])
            lo, hi = (int(round(f * len(jobs))) for f in self.part)
            self._jobs[path] = jobs[lo:hi]
        return self._jobs[path]

    def check(self, num_jobs: int | None = None) -> None:
        """Read every file now and fail with one line if one has fewer jobs than a window needs."""
        need = num_jobs or self.num_jobs
        for path in self.paths:
            n = len(self._trace(path))
            if n < need:
                where = f"after row {self.first_row}" if self.part == (0.0, 1.0) else \
                    f"in its {self.part[0]:.0%}-{self.part[1]:.0%} part after row {self.first_row}"
                raise ConfigError(f"{path}: {n} jobs {where}, fewer than the {need} one workload needs")

    def __call__(self, seed: int, num_jobs: int | None = None) -> list[JobSpec]:
        n = num_jobs or self.num_jobs
        rng = np.random.default_rng(seed)
        path = self.paths[int(rng.integers(len(self.paths)))]
        jobs = self._trace(path)
        if len(jobs) < n:
            raise ConfigError(f"{path}: fewer than {n} jobs after row {self.first_row}")
        start = int(rng.integers(len(jobs) - n + 1))
        return jobs[start:start + n]


def itp_windows(traces: Path | None, files: tuple[str, ...], num_jobs: int, first_row: int = 0) -> TraceWindows:
    """Windows of the ITP deadline trace `files` (under the traces root), on their named curves."""
    hint = missing_traces_hint(f"{ITP_DEADLINE_DIR}/")
    if traces is None:
        raise ConfigError(f"ITP training workloads need the shared traces folder: {hint}")
    paths = [Path(traces) / ITP_DEADLINE_DIR / f for f in files]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ConfigError(f"ITP deadline trace(s) not found: {', '.join(missing)}; {hint}")
    return TraceWindows(paths, num_jobs, first_row)
