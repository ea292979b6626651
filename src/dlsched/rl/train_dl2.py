"""The DL2 training pipeline: supervised warm-up on a teacher's decisions, then actor-critic RL,
validated on held-out workloads, checkpointed so an interrupted run resumes where it stopped.

Workloads are DL2's Alibaba-pattern generator (`traces.dl2.dl2_workload`) or, with `workloads: itp`,
windows of the ITP deadline traces on measured curves (`rl.trace_workloads`). Training, validation
and the evaluation test set use disjoint seed ranges (`DL2TrainConfig.*_seeds`) and, for ITP,
disjoint trace files, so no evaluation workload is ever seen in training.

The policies it runs come from its caller (`cli_train.py`): the teacher whose decisions the
warm-up imitates, and the DL2 policy that wraps a network for validation. So `rl/` is a library
under the policies and never imports `dlsched.policies`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from dlsched.config import Seed
from dlsched.core.errors import ConfigError
from dlsched.core.policy import Policy
from dlsched.presets import load_cluster
from dlsched.rl.actor_critic import RLConfig, RLHistory, train_rl
from dlsched.rl.dl2_network import DL2Net
from dlsched.rl.env import SchedulingEnv
from dlsched.rl.model_io import save_model
from dlsched.rl.trace_workloads import TraceWindows
from dlsched.rl.warmup import collect, train_supervised
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.registry import default_throughput
from dlsched.traces.dl2 import dl2_workload

Teacher = Callable[[], Policy]
"""A fresh teacher policy, called once per recorded workload (policies keep state)."""
Student = Callable[[DL2Net, float], Policy]
"""The DL2 policy around a network, given its slot length in seconds: what validation simulates."""


class DL2TrainConfig(BaseModel):
    """Everything `dlsched train dl2` does, with DL2's defaults where the paper gives them."""

    model_config = ConfigDict(extra="forbid")

    workloads: str = Field("dl2", pattern="^(dl2|itp)$", description="dl2: DL2's Alibaba-pattern generator; "
                           "itp: windows of the ITP deadline traces on measured curves (`rl.trace_workloads`)")
    itp_train: tuple[str, ...] = ("cluster01.csv", "cluster04.csv", "cluster05.csv")
    itp_validation: tuple[str, ...] = ("cluster02.csv",)
    itp_first_row: int = Field(600, ge=0, description="skip rows before it (cluster04's embedded slice is rows 201-500)")
    num_jobs: int = Field(60, ge=1, description="jobs per workload (DL2: 60)")
    max_arrivals_per_slot: int = Field(3, ge=1, description="DL2's arrival cap per slot")
    pattern: str = "ali"
    cluster: str = "dl2"
    window: int = Field(20, ge=1, description="J: jobs the network sees")
    slot_seconds: float = Field(1200.0, gt=0)
    teacher: str = "drf"
    warmup_traces: int = Field(30, ge=0, description="teacher workloads recorded for the warm-up (0: no warm-up)")
    warmup_epochs: int = Field(30, ge=0)
    warmup_lr: float = Field(0.005, gt=0)
    rl_episodes: int = Field(200, ge=0, description="0: no RL")
    rl_lr: float = Field(1e-4, gt=0)
    entropy: float = Field(0.1, ge=0)
    batch: int = Field(256, ge=2)
    replay: int = Field(8192, ge=2)
    explore_rate: float = Field(0.2, ge=0, le=1)
    reward: str = Field("slot", pattern="^(slot|job)$", description="slot: DL2's reward; job: credit each action with its job's progress")
    validate_every: int = Field(10, ge=1)
    validation_traces: int = Field(3, ge=1)
    train_seeds: tuple[Seed, Seed] = (1000, 100000)
    validation_seeds: tuple[Seed, Seed] = (500, 600)
    test_seeds: tuple[Seed, Seed] = (0, 100)
    seed: Seed = 0
    restart_overhead: float = Field(10.0, ge=0)

    def workload(self, seed: int):
        """A DL2 workload (`workloads: dl2`); ITP windows come from `workload_source`."""
        return dl2_workload(self.num_jobs, self.max_arrivals_per_slot, seed, pattern=self.pattern,
                            slot_seconds=self.slot_seconds).jobs

    def workload_source(self, split: str, traces: Path | None) -> Callable[[int], list]:
        """seed -> jobs for `split` ("train" or "validation"): DL2's generator (its seed ranges keep
        the splits apart), or windows of the split's own ITP trace files."""
        if self.workloads == "dl2":
            return self.workload
        files = self.itp_train if split == "train" else self.itp_validation
        return TraceWindows(traces, files, self.num_jobs, self.itp_first_row)

    def seeds(self, which: str, n: int) -> list[int]:
        lo, hi = getattr(self, f"{which}_seeds")
        if hi - lo < n:
            raise ConfigError(f"{which}_seeds {lo}..{hi} has fewer than {n} seeds")
        return list(range(lo, lo + n))


def make_env(cfg: DL2TrainConfig, traces: Path | None) -> SchedulingEnv:
    """The training environment; `traces`: the traces root of the measured DL2 speeds (None: analytic)."""
    return SchedulingEnv(cfg.workload_source("train", traces), load_cluster(cfg.cluster), default_throughput(traces), window=cfg.window,
                         slot_seconds=cfg.slot_seconds, config=SimConfig(restart_overhead=cfg.restart_overhead))


def validator(cfg: DL2TrainConfig, student: Student, traces: Path | None) -> Callable[[DL2Net], float]:
    cluster, tp = load_cluster(cfg.cluster), default_throughput(traces)
    sim_cfg = SimConfig(restart_overhead=cfg.restart_overhead)
    source = cfg.workload_source("validation", traces)
    workloads = [source(s) for s in cfg.seeds("validation", cfg.validation_traces)]

    def validate(net: DL2Net) -> float:
        jcts = [simulate(w, cluster, student(net, cfg.slot_seconds), tp, sim_cfg).summary["mean_jct"] for w in workloads]
        return float(np.mean(jcts))

    return validate


def train_dl2(cfg: DL2TrainConfig, out: Path, teacher: Teacher, student: Student, *, traces: Path | None,
              resume: bool = False, progress: Callable[[str, int, int, str], None] | None = None) -> dict:
    """Run (or resume) the whole pipeline; writes model.pt (the best validated network),
    warmup_model.pt (after the warm-up, before RL), checkpoint.pt and validation.csv in `out`.
    `teacher` builds the policy named by `cfg.teacher`; `student` wraps a network as the DL2 policy;
    `traces` is the traces root of the throughput model (`dlsched.paths.traces_dir`)."""
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path = out / "checkpoint.pt"
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(1)  # tiny networks: threads cost more than they give
    say = progress or (lambda phase, done, total, note: None)
    started = time.monotonic()
    env = make_env(cfg, traces)
    net = DL2Net(cfg.window)
    state = {"phase": "warmup", "episode": 0, "history": [], "seconds": 0.0, "warmup_loss": []}
    if resume and ckpt_path.exists():
        blob = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        if blob["config"] != cfg.model_dump():
            raise ConfigError(f"{ckpt_path} was made with another config; use the same config or a new --out")
        net.load_state_dict(blob["net"])
        state = blob["state"]
    history = RLHistory(rows=list(state["history"]), env_steps=state.get("env_steps", 0))

    def save(best: dict | None = None) -> None:
        state["seconds"] = state.get("seconds_before", 0.0) + time.monotonic() - started
        torch.save({"config": cfg.model_dump(), "net": net.state_dict(), "state": state}, ckpt_path)
        history.write_csv(out / "validation.csv")

    state["seconds_before"] = state.get("seconds", 0.0)

    def clock() -> float:
        """Seconds of training so far, over every run of a resumed training."""
        return state["seconds_before"] + time.monotonic() - started

    if state["phase"] == "warmup":
        if cfg.warmup_traces and cfg.warmup_epochs:
            seeds = cfg.seeds("train", cfg.warmup_traces)
            done = {"n": 0}

            def on_trace(_: int) -> None:
                done["n"] += 1
                say("warm-up: recording " + cfg.teacher, done["n"], len(seeds), "")

            data = collect(env, teacher, seeds, on_trace)
            losses = train_supervised(
                net, data, cfg.warmup_epochs, cfg.warmup_lr, cfg.batch, cfg.seed,
                on_epoch=lambda e, loss, acc: say("warm-up: training", e + 1, cfg.warmup_epochs, f"loss {loss:.3f} acc {acc:.1%}"),
            )
            state["warmup_loss"] = losses
            state["warmup_samples"] = len(data)
            # the "warm-up without RL" ablation, kept as its own model
            save_model(net, out / "warmup_model.pt", {"config": cfg.model_dump(), "phase": "warm-up only"})
        state["phase"] = "rl"
        save()
    if state["phase"] == "rl" and cfg.rl_episodes:
        rl_cfg = RLConfig(episodes=cfg.rl_episodes, lr=cfg.rl_lr, entropy=cfg.entropy, batch=cfg.batch,
                          replay=cfg.replay, explore_rate=cfg.explore_rate, reward=cfg.reward, validate_every=cfg.validate_every, seed=cfg.seed)
        if state.get("best_state") is not None:
            history.best_state = state["best_state"]
            history.best_jct = state["best_jct"]

        def checkpoint(ep: int, hist: RLHistory) -> None:
            state.update(episode=ep, history=hist.rows, best_state=hist.best_state, best_jct=hist.best_jct, env_steps=hist.env_steps)
            save()

        def on_episode(ep: int, jct: float, row: dict | None, steps: int) -> None:
            note = f"train JCT {jct / cfg.slot_seconds:.2f} slots"
            if row:
                note += f", validation {row['validation_jct_s'] / cfg.slot_seconds:.2f}"
            say("RL: actor-critic", ep, cfg.rl_episodes, note + f", {steps / max(clock(), 1e-9):.0f} steps/s")

        history = train_rl(net, env, cfg.seeds("train", min(cfg.rl_episodes, cfg.train_seeds[1] - cfg.train_seeds[0])),
                           validator(cfg, student, traces), rl_cfg, on_episode, history, state["episode"], checkpoint, clock=clock)
        if history.best_state is not None:
            net.load_state_dict(history.best_state)
    if not history.rows:  # no RL: still say how the warmed-up network does on validation
        jct = validator(cfg, student, traces)(net)
        history.rows.append({"episode": 0, "train_jct_s": float("nan"), "validation_jct_s": jct})
        history.best_jct = jct
    state["phase"] = "done"
    save()
    meta = {"config": cfg.model_dump(), "training_seconds": state["seconds"], "best_validation_jct_s": history.best_jct,
            "warmup_samples": state.get("warmup_samples", 0)}
    save_model(net, out / "model.pt", meta)
    return meta


