"""Gavel's measured throughput matrix: steps/s of each job type × GPU count × GPU type.

Why: Gavel's heterogeneity-aware policies (and any policy run on a K80/P100/V100 cluster) need the
measured speed of a job on each GPU type; this is Gavel's own table (`simulation_throughputs.json`,
MIT License, stanford-futuredata/gavel), read from the shared traces folder at run time.

What is used: the isolated throughput (`"null"`; the other keys are co-location pairs, which this
simulator does not model) of (job type, scale factor) on the allocation's GPU type.
- Scale factor = the allocation's worker count (one GPU per worker).
- GPU type: the lowest throughput over the allocation's node types (a synchronous job runs at the
  pace of its slowest GPU). Cluster gpu_type names match case-insensitively by containment, so "V100",
  "Tesla-V100" and "V100M32" all read the v100 column. A type with no column (T4, A100, "generic") is
  priced as `default_type` (V100 by default: Gavel's own Philly spec assumes an all-V100 cluster);
  with `default_type=None` it is an error.
- Consolidation: Gavel measured every multi-GPU job twice: packed on one server (`<type>`) and spread
  over servers (`<type>_unconsolidated`; communication-heavy jobs drop sharply there, e.g. LM batch 20 on
  8 V100s: 497 vs 59 steps/s). A job on more than one node reads the unconsolidated column; where
  Gavel has no unconsolidated entry (six ResNet-50 K80 keys) it falls back to the consolidated one.
- GPU counts Gavel did not measure (it has 1, 2, 4, 8; A3C, CycleGAN and Recommendation only 1):
  between measured counts, linear interpolation of log(throughput) in log(GPUs) (power-law segments);
  above the largest measured count, the power law of the last segment continues, its exponent clipped
  to [0, 1] (no super-linear extrapolation); a type measured at one GPU only scales with the median
  1→8-GPU exponent of the other job types in the same column, also clipped to [0, 1]. A measured 0
  (K80 ResNet-50 batch 128 at 2+ GPUs: it did not run) stays 0 for counts it brackets or exceeds.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.throughput import trace_files
from dlsched.throughput.base import ThroughputModel

PREFIX = "gavel:"
UNCONSOLIDATED = "_unconsolidated"


class GavelMatrix(ThroughputModel):
    name = "gavel-matrix"

    def __init__(self, path: Path | str | None = None, *, default_type: str | None = "v100"):
        self.path = trace_files.require(path, trace_files.GAVEL_THROUGHPUTS, "Gavel throughput matrix")
        try:
            raw = json.loads(Path(self.path).read_text())
            # column -> job type -> {scale factor: isolated steps/s}
            self.table: dict[str, dict[str, dict[int, float]]] = {}
            for column, entries in raw.items():
                col = self.table.setdefault(column.lower(), {})
                for key, val in entries.items():
                    job_type, scale = ast.literal_eval(key)
                    col.setdefault(str(job_type), {})[int(scale)] = float(val["null"])
        except (ValueError, SyntaxError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"{self.path}: not a Gavel throughput matrix ({exc!r})") from None
        self.types = tuple(sorted(c for c in self.table if not c.endswith(UNCONSOLIDATED)))
        if not self.types:
            raise ConfigError(f"{self.path}: no GPU-type columns")
        if default_type is not None and default_type.lower() not in self.types:
            raise ConfigError(f"Gavel matrix: default_type {default_type!r} is not one of {self.types}")
        self.default_type = default_type.lower() if default_type else None
        self.job_types = frozenset(jt for c in self.types for jt in self.table[c])
        self._exponent = {c: self._median_exponent(c) for c in self.table}
        self._type_of: dict[str, str] = {}
        self._cache: dict[tuple[str, int, str, bool], float] = {}

    # ------------------------------------------------------------------ lookup helpers
    def supports(self, spec: JobSpec) -> bool:
        return spec.model.startswith(PREFIX) and spec.model[len(PREFIX):] in self.job_types

    def column_for(self, gpu_type: str) -> str:
        """The matrix column of a cluster GPU type name (case-insensitive containment)."""
        col = self._type_of.get(gpu_type)
        if col is None:
            low = str(gpu_type).lower()
            hits = [c for c in self.types if c in low]
            if hits:
                col = max(hits, key=len)
            elif self.default_type is not None:
                col = self.default_type
            else:
                raise ConfigError(f"Gavel matrix has no measurements for GPU type {gpu_type!r} (have {', '.join(self.types)})")
            self._type_of[gpu_type] = col
        return col

    def _median_exponent(self, column: str) -> float:
        slopes = [
            math.log(s[8] / s[1]) / math.log(8)
            for s in self.table[column].values()
            if s.get(1, 0) > 0 and s.get(8, 0) > 0
        ]
        return float(np.clip(np.median(slopes), 0.0, 1.0)) if slopes else 1.0

    def throughput(self, job_type: str, gpus: int, column: str, consolidated: bool = True) -> float:
        """Isolated steps/s of `job_type` on `gpus` GPUs of matrix column `column` (e.g. "v100")."""
        key = (job_type, gpus, column, consolidated)
        v = self._cache.get(key)
        if v is None:
            v = self._lookup(job_type, gpus, column, consolidated)
            self._cache[key] = v
        return v

    def _lookup(self, job_type: str, gpus: int, column: str, consolidated: bool) -> float:
        if gpus <= 0:
            return 0.0
        base = self.table[column].get(job_type)
        if base is None:
            raise ConfigError(f"Gavel matrix: no {column} measurements for job type {job_type!r}")
        points = dict(base)
        if not consolidated:
            # a 1-GPU job is always on one server; take the spread measurements where they exist
            points.update({s: t for s, t in self.table.get(column + UNCONSOLIDATED, {}).get(job_type, {}).items() if s > 1})
            column = column + UNCONSOLIDATED if column + UNCONSOLIDATED in self._exponent else column
        if gpus in points:
            return points[gpus]
        scales = sorted(points)
        lo = max((s for s in scales if s < gpus), default=None)
        hi = min((s for s in scales if s > gpus), default=None)
        if lo is None:  # below the smallest measured count (only if 1 GPU is unmeasured)
            lo = hi
        if hi is not None and lo != hi:
            t_lo, t_hi = points[lo], points[hi]
            if t_lo <= 0 or t_hi <= 0:
                return 0.0
            x = (math.log(gpus) - math.log(lo)) / (math.log(hi) - math.log(lo))
            return math.exp(math.log(t_lo) + x * (math.log(t_hi) - math.log(t_lo)))
        # extrapolate above the largest measured count
        top = scales[-1]
        t_top = points[top]
        if t_top <= 0:
            return 0.0
        below = [s for s in scales if s < top and points[s] > 0]
        if below:
            prev = below[-1]
            exp = math.log(t_top / points[prev]) / math.log(top / prev)
            exp = min(1.0, max(0.0, exp))
        else:
            exp = self._exponent[column]
        return t_top * (gpus / top) ** exp

    # ------------------------------------------------------------------ rate
    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        job_type = spec.model[len(PREFIX):]
        w = alloc.num_workers
        worker_nodes = [n for n, k in zip(alloc.nodes, alloc.workers) if k > 0]
        consolidated = len(worker_nodes) <= 1
        cols = {self.column_for(cluster.gpu_type[n]) for n in worker_nodes}
        if not cols:
            return 0.0
        return min(self.throughput(job_type, w, c, consolidated) for c in cols)
