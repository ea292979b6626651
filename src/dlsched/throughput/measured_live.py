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
from dlsched.trainer.protocol import PROGRESS
from dlsched.throughput.base import ThroughputModel

Key = tuple[str, int, int]  # (model, workers, ps)


def read_rates(job_dir: Path, model: str) -> dict[Key, list[float]]:
    """Steps/s of every steady-state progress record in one job's log, by size. A run too short
    to write a progress record (under the trainer's 1 s report interval) counts once, at its mean
    speed from its first step to its last record."""
    out: dict[Key, list[float]] = defaultdict(list)
    try:
        lines = (Path(job_dir) / PROGRESS).read_text().splitlines()
    except OSError:
        return out
    runs: dict[tuple[str, Key], list[dict]] = defaultdict(list)  # a run has one size
    for line in lines:
        try:
            rec = json.loads(line)
            key = (model, int(rec.get("workers", 1)), int(rec.get("ps", 0)))
        except (ValueError, TypeError, AttributeError):
            continue
        runs[(str(rec.get("run")), key)].append(rec)
    for (_, key), recs in runs.items():
        rates = [r["steps_per_s"] for r in recs if r.get("event") == "progress"
                 and isinstance(r.get("steps_per_s"), (int, float)) and r["steps_per_s"] > 0]
        if not rates:
            rates = _mean_rate(recs)
        out[key].extend(float(r) for r in rates)
    return {k: v for k, v in out.items() if v}


def _mean_rate(recs: list[dict]) -> list[float]:
    first = next((r for r in recs if r.get("event") == "start"), None)
    if first is None:
        return []
    last = recs[-1]
    try:
        steps, seconds = last["step"] - first["step"], last["time"] - first["time"]
    except (KeyError, TypeError):
        return []
    return [steps / seconds] if steps > 0 and seconds > 0 else []


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
