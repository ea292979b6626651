"""Pollux's measured step times as a function of placement and batch size.

Why: Pollux's six applications (bert, cifar10, deepspeech2, imagenet, ncf, yolov3) were profiled on
16 nodes × 4 T4 GPUs; their step time depends on how many GPUs sit on each node, which is what
placement-aware and elastic policies trade off. Data: pollux-profiles/traces/<app>/ (Apache-2.0,
petuum/adaptdl osdi21-artifact), read from the shared traces folder at run time.

Step time: `step_time` in the profiles is the whole synchronous step and already includes
`sync_time` (step − sync is the compute part, ≈ the 1-GPU step), so it is used as is, as Pollux's
simulator does (not step + sync).

Batch size follows Pollux's simulator for a job with a fixed batch size (`Job.update_local_bsz`):
the job's `batch_size` is the GLOBAL batch (the Pollux workloads' `batch_size` column; default: the
app's smallest validated batch size). With r replicas the local batch is ceil(B / r); when it
exceeds the largest profiled local batch, steps are split into accumulation steps
(`accum = ceil(local / max_local) − 1`, and at least 1 on a single replica whose batch exceeds the
initial one); an atomic batch below the smallest profiled one is priced at the smallest (the profiles
have nothing smaller). Time per optimizer step = step(atomic) + accum × (step − sync)(atomic), and
the rate is in optimizer steps of the global batch per second. (Pollux also caps the batch at the
largest validated one; here the job keeps its batch, so a step always means the same work.)

Placement = GPUs per node of the allocation, normalised to its lexicographically smallest rotation
(as Pollux does). If the profiles measured that placement: linear interpolation over local batch
size (held at the end values outside the profiled range). Otherwise (Pollux's rule) linear interpolation over (num_nodes, num_replicas, local_bsz) of the
per-placement means plus the scalability rows, with num_nodes capped at 16. Placements outside the
profiled region (more than 4 GPUs per node, or beyond 64 replicas) are first re-expressed as their
densest profiled equivalent (num_nodes raised to ceil(replicas / 4), replicas capped at 64: extra
replicas beyond 64 add nothing); if still outside, the nearest profiled point in (nodes, replicas,
log2 batch) is used.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.interpolate import LinearNDInterpolator, NearestNDInterpolator

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.throughput import trace_files
from dlsched.throughput.base import ThroughputModel

PREFIX = "pollux:"
PROFILED_GPUS_PER_NODE = 4
PROFILED_MAX_NODES = 16
PROFILED_MAX_REPLICAS = 64


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@dataclass
class _App:
    """One application's profiles as arrays (no pandas on the hot path)."""

    name: str
    by_placement: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]]  # bsz, step, sync
    points: np.ndarray  # (n, 3) num_nodes, num_replicas, local_bsz
    values: np.ndarray  # (n, 2) step_time, sync_time
    batch_sizes: tuple[int, ...]  # validated global batch sizes
    min_local: float
    max_local: float
    linear: LinearNDInterpolator | None = None
    nearest: NearestNDInterpolator | None = None

    @classmethod
    def load(cls, folder: Path) -> "_App":
        try:
            groups: dict[tuple[int, ...], list[tuple[float, float, float]]] = {}
            for r in _rows(folder / "placements.csv"):
                key = tuple(int(c) for c in r["placement"].strip())
                groups.setdefault(key, []).append((float(r["local_bsz"]), float(r["step_time"]), float(r["sync_time"])))
            by_placement = {}
            mean_rows = []
            for key, rows in groups.items():
                a = np.array(sorted(rows))
                bsz = np.unique(a[:, 0])
                step = np.array([a[a[:, 0] == b, 1].mean() for b in bsz])
                sync = np.array([a[a[:, 0] == b, 2].mean() for b in bsz])
                by_placement[key] = (bsz, step, sync)
                mean_rows += [(len(key), sum(key), b, s, y) for b, s, y in zip(bsz, step, sync)]
            scal = [
                (float(r["num_nodes"]), float(r["num_replicas"]), float(r["local_bsz"]),
                 float(r["step_time"]), float(r["sync_time"]))
                for r in _rows(folder / "scalability.csv")
            ]
        except (OSError, KeyError, ValueError) as exc:
            raise ConfigError(f"Pollux profiles in {folder}: {exc!r}") from None
        allrows = np.array(mean_rows + scal, dtype=float)
        batches = sorted(int(p.stem.split("-")[1]) for p in folder.glob("validation-*.csv"))
        if not batches or not by_placement:
            raise ConfigError(f"Pollux profiles in {folder}: no validation-<batch>.csv or no placements")
        local = np.concatenate([v[0] for v in by_placement.values()])
        return cls(folder.name, by_placement, allrows[:, :3], allrows[:, 3:], tuple(batches),
                   float(local.min()), float(local.max()))

    def exact(self, placement: tuple[int, ...], bsz: float) -> tuple[float, float] | None:
        prof = self.by_placement.get(placement)
        if prof is None:
            return None
        b, step, sync = prof
        return float(np.interp(bsz, b, step)), float(np.interp(bsz, b, sync))

    def interpolated(self, nodes: int, replicas: int, bsz: float) -> tuple[float, float]:
        if self.linear is None:
            self.linear = LinearNDInterpolator(self.points, self.values)
        nodes = min(nodes, PROFILED_MAX_NODES)
        v = self.linear([[nodes, replicas, bsz]])[0]
        if np.isnan(v).any():
            replicas = min(replicas, PROFILED_MAX_REPLICAS)
            nodes = min(max(nodes, math.ceil(replicas / PROFILED_GPUS_PER_NODE)), PROFILED_MAX_NODES)
            v = self.linear([[nodes, replicas, bsz]])[0]
        if np.isnan(v).any():
            if self.nearest is None:
                pts = self.points.copy()
                pts[:, 2] = np.log2(pts[:, 2])
                self.nearest = NearestNDInterpolator(pts, self.values)
            v = self.nearest([[nodes, replicas, math.log2(bsz)]])[0]
        return float(v[0]), float(v[1])


class PolluxProfile(ThroughputModel):
    name = "pollux-profile"

    def __init__(self, path: Path | str | None = None):
        """`path`: the folder holding <app>/placements.csv (pollux-profiles/traces)."""
        self.path = trace_files.require(path, trace_files.POLLUX_PROFILES, "Pollux profiles")
        self.apps = tuple(sorted(p.name for p in Path(self.path).iterdir() if (p / "placements.csv").is_file()))
        if not self.apps:
            raise ConfigError(f"Pollux profiles: no <app>/placements.csv under {self.path}")
        self._loaded: dict[str, _App] = {}
        self._cache: dict[tuple[str, tuple[int, ...], int | None], float] = {}

    def supports(self, spec: JobSpec) -> bool:
        return spec.model.startswith(PREFIX) and spec.model[len(PREFIX):] in self.apps

    def app(self, name: str) -> _App:
        a = self._loaded.get(name)
        if a is None:
            if name not in self.apps:
                raise ConfigError(f"Pollux profiles: unknown app {name!r} (have: {', '.join(self.apps)})")
            a = self._loaded[name] = _App.load(Path(self.path) / name)
        return a

    @staticmethod
    def placement_of(alloc: Allocation) -> tuple[int, ...]:
        p = tuple(w for w in alloc.workers if w > 0)
        return min((p[i:] + p[:i] for i in range(len(p))), default=())

    def step_time(self, app: str, placement: tuple[int, ...], batch_size: int | None = None) -> float:
        """Seconds per optimizer step of the global batch for `placement` (GPUs per node)."""
        a = self.app(app)
        r = sum(placement)
        if r == 0:
            return math.inf
        init = a.batch_sizes[0]
        B = int(batch_size) if batch_size else init
        local = math.ceil(B / r - 1e-8)
        accum = math.ceil(local / a.max_local - 1e-8) - 1
        if r == 1 and B > init:
            accum = max(1, accum)
        atomic = math.ceil(local / (accum + 1) - 1e-8)
        atomic = min(max(atomic, a.min_local), a.max_local)
        got = a.exact(placement, atomic)
        step, sync = got if got is not None else a.interpolated(len(placement), r, atomic)
        return step + accum * max(0.0, step - sync)

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        placement = self.placement_of(alloc)
        key = (spec.model, placement, spec.batch_size)
        v = self._cache.get(key)
        if v is None:
            t = self.step_time(spec.model[len(PREFIX):], placement, spec.batch_size)
            v = 0.0 if not math.isfinite(t) or t <= 0 else 1.0 / t
            self._cache[key] = v
        return v
