"""DL2's measured training speeds, interpolated the way DL2's simulator does.

`config_speed.txt` holds one record per (model, #PS p, #workers w) measured on the DL2 testbed
(synchronous MXNet parameter-server training at a fixed global batch per model). DL2 sums the
per-worker speeds of a record into one speed and fits, per model, a linear radial-basis-function
interpolant over (p, w) (`scipy.interpolate.Rbf(..., function='linear')`); we do exactly that, so a
measured (p, w) returns the measured sum and other points follow DL2's own surface. Values are clipped
at 0 (a linear RBF can dip below zero far outside the measured grid, p, w in 1..23).

Units: the summed speed is what DL2's plotting code calls steps/s, and DL2 turns it into epochs as
speed × time / epoch_size, so with `iterations = epochs × epoch_size` the rate here is iterations/s.

The speeds were measured on one testbed with its own placement, so placement does not change them:
only the PS and worker counts of the allocation matter (node speed factors still apply in the engine).

The data has no license: it is read from the shared traces folder at run time, never copied into
the package. Without the file this model cannot be built (ConfigError), and `default_throughput`
leaves it out.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.interpolate import Rbf

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.throughput import trace_files
from dlsched.throughput.base import ThroughputModel

PREFIX = "dl2:"


def read_speed_records(path: Path) -> dict[str, dict[tuple[int, int], float]]:
    """{model: {(p, w): summed speed}} from a config_speed.txt file."""
    table: dict[str, dict[tuple[int, int], float]] = defaultdict(dict)
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = ast.literal_eval(line)
                model, p, w, speeds = rec[0], int(rec[3]), int(rec[4]), rec[5]
                table[str(model)][(p, w)] = float(sum(speeds))
            except (ValueError, SyntaxError, LookupError, TypeError) as exc:
                raise ConfigError(f"{path}:{lineno}: not a DL2 speed record ({exc})") from None
    if not table:
        raise ConfigError(f"{path}: no speed records")
    return dict(table)


class DL2Speed(ThroughputModel):
    name = "dl2-speed"

    def __init__(self, path: Path | str | None = None):
        self.path = trace_files.require(path, trace_files.DL2_SPEED, "DL2 measured speeds")
        self.records = read_speed_records(self.path)
        self._fits: dict[str, Rbf] = {}
        self._cache: dict[tuple[str, int, int], float] = {}

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(sorted(self.records))

    def supports(self, spec: JobSpec) -> bool:
        return spec.model.startswith(PREFIX) and spec.model[len(PREFIX):] in self.records

    def _fit(self, model: str) -> Rbf:
        fit = self._fits.get(model)
        if fit is None:
            pts = self.records[model]
            p, w = (np.array(x, dtype=float) for x in zip(*pts))
            fit = Rbf(p, w, np.array(list(pts.values())), function="linear")
            self._fits[model] = fit
        return fit

    def speed(self, model: str, ps: int, workers: int) -> float:
        """Summed steps/s of `model` with `ps` parameter servers and `workers` workers."""
        key = (model, ps, workers)
        v = self._cache.get(key)
        if v is None:
            if model not in self.records:
                raise ConfigError(f"DL2 speeds: unknown model {model!r} (have: {', '.join(self.models)})")
            if ps <= 0 or workers <= 0:
                v = 0.0
            else:
                v = max(0.0, float(self._fit(model)(float(ps), float(workers))))
            self._cache[key] = v
        return v

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        return self.speed(spec.model[len(PREFIX):], alloc.num_ps, alloc.num_workers)
