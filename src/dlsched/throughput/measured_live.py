"""Throughput measured on a live run, as a model the simulator can use.

The fidelity check asks: given the speeds the live run really had, does the simulator predict its
job completion times? So the simulator must use *those* speeds, not an analytic model. Every
progress record a trainer writes carries its steps/s and its size (workers, PSs); the median per
(model, workers, PSs) is the table. A size the live run never used is estimated from the nearest
measured worker count of the same model and PS count, scaled linearly in workers up to the
measured point's speed-up trend (stated: an extrapolation, reported by `missing`).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.live.progress_log import PROGRESS
from dlsched.throughput.base import ThroughputModel

Key = tuple[str, int, int]  # (model, workers, ps)


def read_rates(job_dir: Path, model: str) -> dict[Key, list[float]]:
    """Steps/s of every steady-state progress record in one job's log, by size."""
    out: dict[Key, list[float]] = defaultdict(list)
    try:
        lines = (Path(job_dir) / PROGRESS).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        rate = rec.get("steps_per_s")
        if rec.get("event") != "progress" or not isinstance(rate, (int, float)) or rate <= 0:
            continue
        out[(model, int(rec.get("workers", 1)), int(rec.get("ps", 0)))].append(float(rate))
    return out


class MeasuredThroughput(ThroughputModel):
    """Median measured steps/s per (model, workers, PSs); job `model` keys are `live-<model>`."""

    name = "measured-live"

    def __init__(self, samples: dict[Key, list[float]]):
        self.table: dict[Key, float] = {k: statistics.median(v) for k, v in samples.items() if v}
        self.missing: set[Key] = set()

    @classmethod
    def from_job_dirs(cls, dirs: dict[Path, str]) -> "MeasuredThroughput":
        """`dirs` maps a job directory to its model name (mlp, cnn, transformer)."""
        pooled: dict[Key, list[float]] = defaultdict(list)
        for d, model in dirs.items():
            for k, v in read_rates(d, model).items():
                pooled[k].extend(v)
        return cls(pooled)

    @staticmethod
    def _model(spec: JobSpec) -> str:
        return spec.model.removeprefix("live-")

    def supports(self, spec: JobSpec) -> bool:
        m = self._model(spec)
        return any(k[0] == m for k in self.table)

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        m, w, p = self._model(spec), alloc.num_workers, alloc.num_ps
        hit = self.table.get((m, w, p))
        if hit is not None:
            return hit
        self.missing.add((m, w, p))
        same = [(kw, r) for (km, kw, kp), r in self.table.items() if km == m and kp == p]
        if not same:
            same = [(kw, r) for (km, kw, kp), r in self.table.items() if km == m]
        kw, r = min(same, key=lambda x: (abs(x[0] - w), x[0]))
        return r * min(w / kw, 1.0) if w < kw else r  # never assume a speed-up nobody measured
