"""What `dlsched train dl2` does (`DL2TrainConfig`), and the pieces a rollout worker builds from it.

Everything here pickles (a pydantic config, module-level functions, `functools.partial`), because
parallel training sends it to worker processes and Ray actors, which build their own simulator
from it rather than receive a live one.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dlsched.config import Seed
from dlsched.core.errors import ConfigError
from dlsched.presets import load_cluster
from dlsched.rl.actor_critic import REWARD_MODES
from dlsched.models.dl2_network import DL2Net
from dlsched.rl.env import SchedulingEnv
from dlsched.rl.rollouts import WorkerSpec
from dlsched.rl.trace_workloads import TraceWindows, itp_windows, resolve_trace_files
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.registry import default_throughput
from dlsched.traces.dl2 import dl2_workload

#: Keys that say where training runs, not what it learns: `--resume` accepts a change of these.
EXECUTION_KEYS = ("rollout_workers", "rollout_backend", "ray_address")
#: How long RL runs: `--resume` accepts a larger value, which extends a training (also a finished one).
BUDGET_KEYS = ("rl_episodes",)
#: Every key a resumed training may differ in (what a checkpoint is compared without).
RESUME_MAY_CHANGE = frozenset((*EXECUTION_KEYS, *BUDGET_KEYS))


class DL2TrainConfig(BaseModel):
    """Everything `dlsched train dl2` does, with DL2's defaults where the paper gives them."""

    model_config = ConfigDict(extra="forbid")

    workloads: str = Field("dl2", pattern="^(dl2|itp|trace)$", description="dl2: DL2's Alibaba-pattern generator; "
                           "itp: windows of the ITP deadline traces on measured curves (`rl.trace_workloads`); "
                           "trace: windows of `trace_files` (any trace load_trace reads) on measured curves")
    itp_train: tuple[str, ...] = ("cluster01.csv", "cluster04.csv", "cluster05.csv")
    itp_validation: tuple[str, ...] = ("cluster02.csv",)
    itp_first_row: int = Field(600, ge=0, description="skip rows before it (cluster04's embedded slice is rows 201-500)")
    trace_files: tuple[str, ...] = Field((), description="workloads: trace: the training traces (paths, or relative to the traces root)")
    trace_validation: tuple[str, ...] = Field((), description="validation traces; none: the last trace_holdout of each training file")
    trace_holdout: float = Field(0.2, gt=0, lt=1, description="share of each training trace's jobs kept for validation")
    num_jobs: int = Field(60, ge=1, description="jobs per workload (DL2: 60)")
    curriculum: tuple[tuple[int, int], ...] = Field((), description="[[episodes, num_jobs], ...]: RL episodes before "
                                                    "`episodes` use `num_jobs` jobs (small first); later ones num_jobs")
    max_arrivals_per_slot: int = Field(3, ge=1, description="DL2's arrival cap per slot")
    pattern: str = "ali"
    cluster: str = "dl2"
    window: int = Field(20, ge=1, description="J: jobs the network sees")
    stay_cap: float | None = Field(None, ge=0, description="the network sees row 1 of the state (slots in the "
                                   "system / 10) saturated at this value (0: not at all); None: as is, DL2's state")
    slot_seconds: float = Field(1200.0, gt=0)
    teacher: str = "drf"
    warmup_traces: int = Field(30, ge=0, description="teacher workloads recorded for the warm-up (0: no warm-up)")
    warmup_epochs: int = Field(30, ge=0)
    warmup_lr: float = Field(0.005, gt=0)
    rl_episodes: int = Field(200, ge=0, description="0: no RL")
    rl_lr: float = Field(1e-4, gt=0)
    entropy: float = Field(0.1, ge=0, description="β on DL2's entropy term (averaged over states and actions: `entropy_bonus`)")
    batch: int = Field(256, ge=2)
    replay: int = Field(8192, ge=2)
    explore_rate: float = Field(0.2, ge=0, le=1)
    reward: str = Field("slot", description="one of REWARD_MODES: slot: DL2's reward; job: credit each task action with its "
                        "job's progress, ending the slot with the slot's; job-mean: ending the slot with the mean job's "
                        "(`actor_critic.credit`)")
    validate_every: int = Field(10, ge=1)
    validation_traces: int = Field(3, ge=1)
    train_seeds: tuple[Seed, Seed] = (1000, 100000)
    validation_seeds: tuple[Seed, Seed] = (500, 600)
    test_seeds: tuple[Seed, Seed] = (0, 100)
    seed: Seed = 0
    restart_overhead: float = Field(10.0, ge=0)
    rollout_workers: int = Field(1, ge=1, description="agents playing RL episodes at once (1 without ray_address: "
                                 "the serial learner, updating within the episode)")
    rollout_backend: str = Field("ray", pattern="^(ray|process)$", description="where parallel rollouts run: Ray actors "
                                 "(a private local Ray, or ray_address) or OS processes")
    ray_address: str | None = Field(None, description="join this Ray cluster (auto, host:port, ray://host:port) instead of a local one")

    @field_validator("reward")
    @classmethod
    def _reward_mode(cls, mode: str) -> str:
        if mode not in REWARD_MODES:
            raise ValueError(f"reward {mode!r}: expected one of {', '.join(REWARD_MODES)}")
        return mode

    @field_validator("curriculum")
    @classmethod
    def _stages(cls, stages: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        last = 0
        for episodes, jobs in stages:
            if jobs < 1:
                raise ValueError(f"curriculum stage [{episodes}, {jobs}]: num_jobs must be positive")
            if episodes <= last:
                raise ValueError(f"curriculum stage [{episodes}, {jobs}]: episodes must be positive and increasing")
            last = episodes
        return stages

    @model_validator(mode="after")
    def _where(self) -> DL2TrainConfig:
        if self.ray_address is not None and self.rollout_backend != "ray":
            raise ValueError(f"ray_address needs rollout_backend: ray, not {self.rollout_backend}")
        if self.workloads == "trace" and not self.trace_files:
            raise ValueError("workloads: trace needs trace_files (or --trace FILE)")
        return self

    @property
    def parallel(self) -> bool:
        """Whether RL episodes are played by rollout workers (else the serial learner)."""
        return self.rollout_workers > 1 or self.ray_address is not None

    def num_jobs_at(self, episode: int) -> int:
        """Jobs per workload in RL episode `episode` (0-based), by the curriculum."""
        return next((jobs for until, jobs in self.curriculum if episode < until), self.num_jobs)

    def workload_options(self, episode: int) -> dict | None:
        """The environment's reset options for episode `episode` (None without a curriculum)."""
        return {"num_jobs": self.num_jobs_at(episode)} if self.curriculum else None

    def learning_config(self) -> dict:
        """The config without where it runs and how long: what a checkpoint must match to be resumed."""
        return self.model_dump(exclude=set(RESUME_MAY_CHANGE))

    def workload(self, seed: int, num_jobs: int | None = None):
        """A DL2 workload (`workloads: dl2`); trace windows come from `workload_source`."""
        return dl2_workload(num_jobs or self.num_jobs, self.max_arrivals_per_slot, seed, pattern=self.pattern,
                            slot_seconds=self.slot_seconds).jobs

    def workload_source(self, split: str, traces: Path | None) -> Callable[..., list]:
        """(seed, num_jobs=None) -> jobs for `split` ("train" or "validation"): DL2's generator (its
        seed ranges keep the splits apart), or windows of the split's own trace files or part."""
        if self.workloads == "dl2":
            return self.workload
        if self.workloads == "itp":
            return itp_windows(traces, self.itp_train if split == "train" else self.itp_validation, self.num_jobs, self.itp_first_row)
        held = 1.0 - self.trace_holdout
        if split == "train":
            files, part = self.trace_files, ((0.0, held) if not self.trace_validation else (0.0, 1.0))
        else:
            files, part = (self.trace_validation, (0.0, 1.0)) if self.trace_validation else (self.trace_files, (held, 1.0))
        return TraceWindows(resolve_trace_files(files, traces), self.num_jobs, 0, part, profiles="measured", seed=self.seed)

    def check_workloads(self, traces: Path | None) -> None:
        """Fail now, in one line, if a trace is missing or too small for the largest workload."""
        if self.workloads == "dl2":
            return
        largest = max([self.num_jobs, *(jobs for _, jobs in self.curriculum)])
        for split in ("train", "validation"):
            source = self.workload_source(split, traces)
            if isinstance(source, TraceWindows):
                source.check(largest if split == "train" else self.num_jobs)

    def seeds(self, which: str, n: int) -> list[int]:
        lo, hi = getattr(self, f"{which}_seeds")
        if hi - lo < n:
            raise ConfigError(f"{which}_seeds {lo}..{hi} has fewer than {n} seeds")
        return list(range(lo, lo + n))


def new_net(cfg: DL2TrainConfig) -> DL2Net:
    """A fresh DL2 network of the config's shape and inputs (the learner's and every worker's)."""
    return DL2Net(cfg.window, stay_cap=cfg.stay_cap)


def make_env(cfg: DL2TrainConfig, traces: Path | None) -> SchedulingEnv:
    """The training environment; `traces`: the traces root of the measured DL2 speeds (None: analytic)."""
    return SchedulingEnv(cfg.workload_source("train", traces), load_cluster(cfg.cluster), default_throughput(traces), window=cfg.window,
                         slot_seconds=cfg.slot_seconds, config=SimConfig(restart_overhead=cfg.restart_overhead))


class Validation:
    """(network, validation seed) -> mean JCT (s) of the student policy around the network on that
    seed's validation workload. Builds the cluster, throughput model and workloads on first use, so
    it pickles small and each worker builds its own."""

    def __init__(self, cfg: DL2TrainConfig, student: Callable, traces: Path | None):
        self.cfg, self.student, self.traces = cfg, student, traces
        self._built: tuple | None = None
        self._workloads: dict[int, list] = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_built": None, "_workloads": {}}

    def __call__(self, net: DL2Net, seed: int) -> float:
        cfg = self.cfg
        if self._built is None:
            self._built = (load_cluster(cfg.cluster), default_throughput(self.traces), SimConfig(restart_overhead=cfg.restart_overhead),
                           cfg.workload_source("validation", self.traces))
        cluster, tp, sim_cfg, source = self._built
        if seed not in self._workloads:
            self._workloads[seed] = source(seed)
        return float(simulate(self._workloads[seed], cluster, self.student(net, cfg.slot_seconds), tp, sim_cfg).summary["mean_jct"])

    def mean(self, net: DL2Net) -> float:
        """The validation JCT: the mean over the config's validation workloads."""
        return float(np.mean([self(net, s) for s in self.cfg.seeds("validation", self.cfg.validation_traces)]))


def worker_spec(cfg: DL2TrainConfig, student: Callable, traces: Path | None) -> WorkerSpec:
    """What each rollout worker builds: the training environment, a DL2 network, the validation."""
    return WorkerSpec(make_env=partial(make_env, cfg, traces), make_net=partial(new_net, cfg),
                      explore_rate=cfg.explore_rate, evaluate=Validation(cfg, student, traces))
