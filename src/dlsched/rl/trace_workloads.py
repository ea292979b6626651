"""Trace-like training workloads for DL2: windows of consecutive jobs of the ITP deadline traces,
each job on the measured ElasticFlow curve of the model and batch its row names.

Why: the shipped DL2 network was trained on DL2's synthetic parameter-server jobs, and on the ITP
deadline traces' all-reduce curve jobs it is out of its training distribution (docs/DL2.md). To
learn on jobs like those it will schedule, the recipe stays DL2's (warm-up on a teacher, then
actor-critic) and only the workloads change: a seed picks a trace file and a window start, so the
same seed always gives the same jobs. Training and validation read disjoint files, and neither
reads the jobs dlsched's ITP evaluations use (cluster03, 195job, and the embedded cluster04 slice,
rows 201-500: `first_row` skips them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.traces.registry import load_trace

#: Where the ITP deadline traces live under the traces root.
ITP_DEADLINE_DIR = Path("elasticflow-itp") / "elasticflow"


class TraceWindows:
    """`num_jobs` consecutive jobs (from row `first_row` on) of one of `files`, chosen by seed."""

    def __init__(self, traces: Path | None, files: tuple[str, ...], num_jobs: int, first_row: int = 0):
        if traces is None:
            raise ConfigError("ITP training workloads need the shared traces folder (--traces or $DLSCHED_TRACES)")
        self.paths = [Path(traces) / ITP_DEADLINE_DIR / f for f in files]
        missing = [str(p) for p in self.paths if not p.is_file()]
        if missing:
            raise ConfigError(f"ITP deadline trace(s) not found: {', '.join(missing)}")
        self.num_jobs = num_jobs
        self.first_row = first_row
        self._jobs: dict[Path, list[JobSpec]] = {}

    def _trace(self, path: Path) -> list[JobSpec]:
        if path not in self._jobs:  # read once: a trace file is parsed in seconds, a window in none
            jobs = load_trace(path, profiles="auto").jobs[self.first_row:]
            if len(jobs) < self.num_jobs:
                raise ConfigError(f"{path}: fewer than {self.num_jobs} jobs after row {self.first_row}")
            self._jobs[path] = jobs
        return self._jobs[path]

    def __call__(self, seed: int) -> list[JobSpec]:
        rng = np.random.default_rng(seed)
        jobs = self._trace(self.paths[int(rng.integers(len(self.paths)))])
        start = int(rng.integers(len(jobs) - self.num_jobs + 1))
        return jobs[start:start + self.num_jobs]
