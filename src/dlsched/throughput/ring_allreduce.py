"""Analytic ring all-reduce model: data-parallel workers that average gradients in a ring.

Why: most traces (Philly, ITP, Gavel) are all-reduce jobs, and placement-aware policies need a model
in which packing a job onto fewer nodes and racks pays off. One step of a w-worker job takes

    compute + 2 · (w − 1) / w · model_size / bottleneck bandwidth

(the bandwidth-optimal ring all-reduce: each worker sends and receives 2(w−1)/w of the gradient).
The bottleneck is the slowest link the ring crosses: intra-node when the job sits on one node,
inter-node when it spans several nodes of one rack, inter-rack otherwise (`cluster.network`, GB/s).

Compute per step depends on what stays fixed when workers are added, stated per job:
- "global" (default; DL2-style, fixed global batch): each worker does 1/w of the step, compute = t1/w,
  and an iteration is one step of the global batch, rate = 1 / step time;
- "local" (Gavel's job types: the batch size is per GPU): compute = t1 per worker, and iterations
  count worker-steps as Gavel does, rate = w / step time.
Both count the same thing (samples / reference batch), so they agree at w = 1.

Parameters: `spec.extra` (`compute_s`, `model_size_mb`, optional `batch`), else the built-in table
(`ring_profiles`) for "ring:<job type>" / "gavel:<job type>", else DL2's constants for
"ring:<dl2 model>" when the shared DL2 constants file was given.
"""

from __future__ import annotations

from pathlib import Path

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.throughput.base import ThroughputModel
from dlsched.throughput.dl2_constants import DL2ModelConstants, load_dl2_constants
from dlsched.throughput.ring_profiles import RING_PROFILES, RingProfile
from dlsched.throughput.topology import bandwidth_mbs, extra_params, has_extra, span

PREFIXES = ("ring:", "gavel:")
BATCH_MODES = ("global", "local")


class RingAllReduceModel(ThroughputModel):
    name = "ring-allreduce"

    def __init__(
        self,
        dl2_constants: dict[str, DL2ModelConstants] | Path | str | None = None,
        *,
        batch: str = "global",
        profiles: dict[str, RingProfile] | None = None,
    ):
        if batch not in BATCH_MODES:
            raise ConfigError(f"ring all-reduce: batch must be one of {BATCH_MODES}, got {batch!r}")
        if isinstance(dl2_constants, (str, Path)):
            dl2_constants = load_dl2_constants(dl2_constants)
        self.batch = batch
        self.profiles = dict(RING_PROFILES if profiles is None else profiles)
        for name, c in (dl2_constants or {}).items():
            self.profiles.setdefault(name, RingProfile(c.model_size_mb, c.compute_s, "global"))
        self._params: dict[str, tuple[float, float, str]] = {}
        self._cache: dict[tuple, float] = {}

    def _split(self, model: str) -> str | None:
        for pre in PREFIXES:
            if model.startswith(pre):
                return model[len(pre):]
        return None

    def supports(self, spec: JobSpec) -> bool:
        name = self._split(spec.model)
        if name is None:
            return False
        if spec.model.startswith("ring:") and has_extra(spec):
            return True
        return name in self.profiles

    def params(self, spec: JobSpec) -> tuple[float, float, str]:
        """(compute_s, model_size_mb, batch mode) of a job."""
        ex = spec.extra
        if has_extra(spec):
            compute, size = extra_params(spec)
            mode = str(ex.get("batch", self.batch))
        else:
            cached = self._params.get(spec.model)
            if cached is not None and "batch" not in ex:
                return cached
            prof = self.profiles.get(self._split(spec.model) or "")
            if prof is None:
                raise ConfigError(
                    f"job {spec.job_id!r}: ring all-reduce model knows no profile {spec.model!r}; "
                    "give spec.extra 'compute_s' and 'model_size_mb'"
                )
            compute, size, mode = prof.compute_s, prof.model_size_mb, str(ex.get("batch", prof.batch))
        if mode not in BATCH_MODES:
            raise ConfigError(f"job {spec.job_id!r}: extra 'batch' must be one of {BATCH_MODES}, got {mode!r}")
        out = (compute, size, mode)
        if not has_extra(spec) and "batch" not in ex:
            self._params[spec.model] = out
        return out

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        w = alloc.num_workers
        if w == 0:
            return 0.0
        params = self.params(spec)
        where = span(alloc, cluster)
        key = (params, w, where, cluster.network)
        v = self._cache.get(key)
        if v is None:
            v = self.rate_for(params, w, bandwidth_mbs(cluster.network, where))
            self._cache[key] = v
        return v

    @staticmethod
    def step_time(compute_s: float, model_size_mb: float, mode: str, workers: int, bandwidth_mbs: float) -> float:
        """Seconds per step of each worker."""
        compute = compute_s / workers if mode == "global" else compute_s
        comm = 2.0 * (workers - 1) / workers * model_size_mb / bandwidth_mbs if workers > 1 else 0.0
        return compute + comm

    @classmethod
    def rate_for(cls, params: tuple[float, float, str], workers: int, bandwidth_mbs: float) -> float:
        compute, size, mode = params
        t = cls.step_time(compute, size, mode, workers, bandwidth_mbs)
        return (1.0 if mode == "global" else float(workers)) / t
