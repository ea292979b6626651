"""Measured scaling curves of the ITP deadline traces' models (ElasticFlow, ASPLOS 2023).

Why: the ITP deadline traces name each job's model and global batch size, and ElasticFlow's
authors measured exactly those (model, batch) pairs on 1, 2, 4, ..., 64 A100 GPUs. With them a
job's speed at another size follows its own sublinear curve (bert at batch 64 gains 1.8x from 1 to
8 GPUs and loses speed beyond), instead of an assumed power law.

How a job runs (`MeasuredCurves.rate`):
- The trace's duration stays the truth at the requested size: a job's work is its duration in
  seconds (iterations = duration, as for duration-only jobs), so its rate at w GPUs is
  curve(w) / curve(requested): exactly 1.0 at its requested size, packed.
- Sizes between measured ones are interpolated linearly in w; beyond the last measured size the
  curve stays at its last value (one trace pair, deepspeech2 at batch 32, lacks its 64-GPU point).
- The curves were measured packed (8 GPUs per server, NVLink inside, 200 Gbps between). A job
  placed more widely than packed (on several nodes when it fits on one, or over several racks)
  pays a ring all-reduce of its gradients over the slower link it now crosses:
  2 (w - 1) / w x model size x (1 / slower bandwidth - 1 / packed bandwidth) seconds per step,
  with the cluster's own bandwidths (`cluster.network`) and the model's approximate fp32 gradient
  size (MODEL_SIZE_MB). So spreading a job slows it, by more for the large models.

The curves ship inside the package (Apache-2.0, `dlsched/data/elasticflow/`), so the embedded
default workload runs on measured data on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import GPU, Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.throughput.base import ThroughputModel
from dlsched.throughput.topology import Span, bandwidth_mbs, span

#: Model keys of jobs on these curves: "elasticflow:<model>", with the global batch in `batch_size`.
PREFIX = "elasticflow:"
ATTRIBUTION = ("measured scaling curves from ElasticFlow (Gu et al., ASPLOS 2023), pkusys/ElasticFlow, "
               "Apache-2.0, shipped in dlsched/data/elasticflow")
#: The GPU type the shipped curves were measured on.
GPU_TYPE = "A100"

#: Approximate fp32 gradient size (MB) of the standard architecture behind each model name: what a
#: ring all-reduce moves per step. Parameter counts: BERT-base 110M, GPT-2 small 124M, VGG-16 138M,
#: ResNet-50 25.6M, Inception-v3 23.8M, DeepSpeech2 (2 conv + 5 bidirectional LSTM layers of 1024)
#: about 86M; x 4 bytes. Only the penalty for spreading a job uses them.
MODEL_SIZE_MB: dict[str, float] = {
    "bert": 440.0, "gpt2": 496.0, "vgg16": 553.0, "resnet50": 102.0, "resnet50_cifar10": 94.0,
    "inception3": 95.0, "deepspeech2": 344.0,
}


@dataclass(frozen=True)
class Curve:
    """One measured curve: whole-job iterations/s at each measured GPU count (0 = not measured)."""

    model: str
    batch: int
    sizes: tuple[int, ...]
    its: tuple[float, ...]

    @property
    def measured(self) -> tuple[tuple[int, float], ...]:
        return tuple((w, v) for w, v in zip(self.sizes, self.its) if v > 0)

    @property
    def max_size(self) -> int:
        """The largest measured GPU count."""
        return self.measured[-1][0]

    def at(self, workers: float) -> float:
        """Iterations/s at `workers` GPUs: linear between measured sizes, flat past the last."""
        ws, vs = zip(*self.measured)
        return float(np.interp(workers, ws, vs))

    def peak(self, at_least: int = 1) -> int:
        """The size where the curve stops improving: the smallest measured size >= `at_least`
        whose speed no larger measured size beats by more than 1% (at least `at_least`)."""
        pts = [(w, v) for w, v in self.measured if w >= at_least]
        if not pts:
            return at_least
        for i, (w, v) in enumerate(pts):
            if all(v2 <= v * 1.01 for _, v2 in pts[i + 1:]):
                return w
        return pts[-1][0]  # pragma: no cover - the last point always qualifies


def read_curves(folder: Path) -> dict[tuple[str, int], Curve]:
    """Every (model, global batch) curve in `folder` (one CSV per model:
    `global_batch_size,1,2,4,...`; an empty or 0 cell is 'not measured')."""
    out: dict[tuple[str, int], Curve] = {}
    files = sorted(Path(folder).glob("*.csv"))
    if not files:
        raise ConfigError(f"no measured curves (*.csv) in {folder}")
    for f in files:
        lines = [ln.strip() for ln in f.read_text().splitlines() if ln.strip()]
        head = lines[0].split(",")
        if head[0] != "global_batch_size":
            raise ConfigError(f"{f}: expected a 'global_batch_size,1,2,...' header, got {lines[0][:60]!r}")
        sizes = tuple(int(h) for h in head[1:])
        for row in lines[1:]:
            cells = row.split(",")
            vals = tuple(float(c) if c not in ("", "nan") else 0.0 for c in cells[1:])
            vals += (0.0,) * (len(sizes) - len(vals))
            curve = Curve(f.stem, int(float(cells[0])), sizes, vals)
            if not curve.measured:
                raise ConfigError(f"{f}: batch {cells[0]} has no measured point")
            out[(curve.model, curve.batch)] = curve
    return out


def shipped_folder() -> Path:
    return Path(str(resources.files("dlsched") / "data" / "elasticflow" / GPU_TYPE))


@lru_cache(maxsize=1)
def shipped_curves() -> dict[tuple[str, int], Curve]:
    """The curves that ship with the package (read once)."""
    return read_curves(shipped_folder())


def curve_key(spec: JobSpec) -> tuple[str, int] | None:
    """(model, batch) of a job on measured curves, None for any other job."""
    if not spec.model.startswith(PREFIX) or spec.batch_size is None:
        return None
    return spec.model[len(PREFIX):], int(spec.batch_size)


def profile_name(model: str, batch: int) -> str:
    """How reports name a curve: 'bert@64'."""
    return f"{model}@{batch}"


class MeasuredCurves(ThroughputModel):
    """Rates from ElasticFlow's measured curves for "elasticflow:<model>" jobs (see module doc)."""

    name = "elasticflow-curves"

    def __init__(self, curves: dict[tuple[str, int], Curve] | None = None):
        self.curves = shipped_curves() if curves is None else curves
        self._cache: dict[tuple, float] = {}

    def curve(self, spec: JobSpec) -> Curve:
        key = curve_key(spec)
        c = self.curves.get(key) if key is not None else None
        if c is None:
            raise ConfigError(f"job {spec.job_id!r}: no measured curve for {spec.model!r} at batch {spec.batch_size}")
        return c

    def supports(self, spec: JobSpec) -> bool:
        key = curve_key(spec)
        return key is not None and key in self.curves

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        w = alloc.num_workers
        if w == 0:
            return 0.0
        where = span(alloc, cluster)
        key = (spec.model, spec.batch_size, spec.num_workers, w, where, cluster.network, _node_gpus(cluster))
        v = self._cache.get(key)
        if v is None:
            c = self.curve(spec)
            step = 1.0 / c.at(w) + self.spread_penalty(c.model, w, where, cluster)
            v = (1.0 / step) / c.at(spec.num_workers)
            self._cache[key] = v
        return v

    @staticmethod
    def spread_penalty(model: str, workers: int, where: Span, cluster: Cluster) -> float:
        """Extra seconds per step when `workers` GPUs sit wider than packed (see module doc)."""
        packed = Span.NODE if workers <= _node_gpus(cluster) else Span.RACK
        if where <= packed or workers < 2:
            return 0.0
        size = MODEL_SIZE_MB.get(model, 0.0)
        slow, fast = bandwidth_mbs(cluster.network, where), bandwidth_mbs(cluster.network, packed)
        return 2.0 * (workers - 1) / workers * size * (1.0 / slow - 1.0 / fast)


def _node_gpus(cluster: Cluster) -> int:
    """GPUs of the cluster's largest node: what 'packed' means for a job's size."""
    memo = cluster.memo
    g = memo.get("max_node_gpus")
    if g is None:
        g = memo["max_node_gpus"] = int(cluster.capacity[:, GPU].max()) if cluster.num_nodes else 0
    return g
