"""What a user asks for: the job specification, immutable for the whole run."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

import numpy as np

from dlsched.core.errors import ConfigError


class Architecture(str, Enum):
    """How a job's tasks communicate: this decides which throughput model terms apply."""

    ALLREDUCE = "allreduce"  # data-parallel workers in a ring (DDP, Horovod)
    PS = "ps"  # workers push/pull through parameter servers
    SINGLE = "single"  # one worker, no communication


@dataclass(frozen=True, eq=False, slots=True, weakref_slot=True)
class JobSpec:
    """A training job as submitted.

    Slotted (no per-job `__dict__`: ~150 bytes less a job, which counts on million-job traces);
    weakly referenceable because the throughput router caches its choice per JobSpec object.

    Work is always counted in iterations. A duration-only trace has no iteration count, so its
    adapter sets `iterations = duration` and `model = "duration-only"`: one iteration is one
    second of work at the requested size (see `throughput.duration_only`).

    `work_known` says whether the user told the scheduler the total work. Most traces do not
    (Philly, ITP); policies that need it must estimate it (Optimus fits a convergence curve) unless
    they run as an oracle (SRTF).
    """

    job_id: str
    submit_time: float
    iterations: float
    num_workers: int = 1
    arch: Architecture = Architecture.ALLREDUCE
    model: str = "duration-only"
    worker_demand: tuple[float, float, float] = (1.0, 4.0, 16.0)  # gpu, cpu, mem GiB
    ps_demand: tuple[float, float, float] = (0.0, 2.0, 8.0)
    min_workers: int | None = None
    max_workers: int | None = None
    num_ps: int = 0
    min_ps: int | None = None
    max_ps: int | None = None
    duration: float | None = None  # trace duration at the requested size, when known
    work_known: bool = False
    deadline: float | None = None  # absolute time
    utility: Callable[[float], float] | None = None
    priority: int = 0
    queue: str = "default"
    user: str = "default"
    gpu_type: str | None = None
    batch_size: int | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        arch = Architecture(self.arch)
        object.__setattr__(self, "arch", arch)
        if self.min_workers is None:
            object.__setattr__(self, "min_workers", self.num_workers)
        if self.max_workers is None:
            object.__setattr__(self, "max_workers", self.num_workers)
        if arch is Architecture.PS:
            ps = max(self.num_ps, 1)
            object.__setattr__(self, "num_ps", ps)
            if self.min_ps is None:
                object.__setattr__(self, "min_ps", 1)
            if self.max_ps is None:
                object.__setattr__(self, "max_ps", max(ps, self.max_workers))
        else:
            object.__setattr__(self, "num_ps", 0)
            object.__setattr__(self, "min_ps", 0)
            object.__setattr__(self, "max_ps", 0)
        object.__setattr__(self, "worker_demand", demand_tuple(self.worker_demand))
        object.__setattr__(self, "ps_demand", demand_tuple(self.ps_demand))
        self._check()

    def _check(self) -> None:
        where = f"job {self.job_id!r}"
        if not self.iterations > 0:
            raise ConfigError(f"{where}: iterations must be > 0, got {self.iterations}")
        if not np.isfinite(self.submit_time) or self.submit_time < 0:
            raise ConfigError(f"{where}: submit_time must be a finite time >= 0")
        if not 1 <= self.min_workers <= self.num_workers <= self.max_workers:
            raise ConfigError(
                f"{where}: need 1 <= min_workers ({self.min_workers}) <= num_workers "
                f"({self.num_workers}) <= max_workers ({self.max_workers})"
            )
        if self.arch is Architecture.SINGLE and self.max_workers != 1:
            raise ConfigError(f"{where}: a 'single' job has exactly one worker")
        if self.arch is Architecture.PS and not 1 <= self.min_ps <= self.num_ps <= self.max_ps:
            raise ConfigError(f"{where}: need 1 <= min_ps <= num_ps <= max_ps for a PS job")
        if any(x < 0 for x in self.worker_demand + self.ps_demand):
            raise ConfigError(f"{where}: negative resource demand")
        if self.deadline is not None and self.deadline < self.submit_time:
            raise ConfigError(f"{where}: deadline {self.deadline} is before submit {self.submit_time}")

    @property
    def gpus_requested(self) -> float:
        return self.num_workers * self.worker_demand[0]

    @property
    def elastic(self) -> bool:
        return self.min_workers != self.max_workers or self.min_ps != self.max_ps

    def demand(self, workers: int, ps: int) -> np.ndarray:
        """Total resource vector of `workers` workers and `ps` parameter servers."""
        return workers * np.asarray(self.worker_demand) + ps * np.asarray(self.ps_demand)


_DEMANDS: dict[tuple[float, ...], tuple[float, ...]] = {}


def demand_tuple(values) -> tuple[float, ...]:
    """A resource demand as a tuple of floats, one shared tuple per distinct demand: jobs of a
    trace repeat a handful of demands, and a tuple of three floats is 136 bytes a job otherwise."""
    t = tuple(float(x) for x in values)
    if len(_DEMANDS) < 100_000:
        return _DEMANDS.setdefault(t, t)
    return t


def iterations_are_seconds(spec: JobSpec) -> bool:
    """Whether one of the job's iterations is one second of work at *its* requested size.

    True for duration-only jobs (`throughput.duration_only`) and for jobs on ElasticFlow's
    measured curves ("elasticflow:<model>", `throughput.elasticflow`: rate curve(w)/curve(requested)),
    whose trace gives a duration, not an iteration count. Why it matters: two such jobs' speeds
    (iterations/s) and totals are only comparable when they requested the same size; a 1-GPU and
    an 8-GPU bert job both run at 1 iteration/s at their requested sizes.
    """
    return spec.model == "duration-only" or spec.model.startswith("elasticflow:")
