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

import torch

from dlsched.core.errors import ConfigError
from dlsched.core.policy import Policy
from dlsched.models.dl2_update import RLConfig
from dlsched.rl.actor_critic import RLHistory, train_rl
from dlsched.rl.dl2_config import RESUME_MAY_CHANGE, DL2TrainConfig, Validation, make_env, new_net, worker_spec
from dlsched.models.dl2_network import DL2Net
from dlsched.rl.learner import train_rl_parallel
from dlsched.models.model_io import save_model
from dlsched.rl.pools import open_pool
from dlsched.rl.threads import one_thread
from dlsched.rl.warmup import collect, train_supervised

__all__ = ["DL2TrainConfig", "Student", "Teacher", "make_env", "train_dl2"]

Teacher = Callable[[], Policy]
"""A fresh teacher policy, called once per recorded workload (policies keep state)."""
Student = Callable[[DL2Net, float], Policy]
"""The DL2 policy around a network, given its slot length in seconds: what validation simulates."""


@one_thread()  # tiny networks: threads cost more than they give
def train_dl2(cfg: DL2TrainConfig, out: Path, teacher: Teacher, student: Student, *, traces: Path | None,
              resume: bool = False, progress: Callable[[str, int, int, str], None] | None = None) -> dict:
    """Run (or resume) the whole pipeline; writes model.pt (the best validated network),
    warmup_model.pt (after the warm-up, before RL), checkpoint.pt and validation.csv in `out`.
    `teacher` builds the policy named by `cfg.teacher`; `student` wraps a network as the DL2 policy
    (it must pickle, e.g. a class, when `cfg.parallel`); `traces` is the traces root of the
    throughput model (`dlsched.paths.traces_dir`)."""
    cfg.check_workloads(traces)
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path = out / "checkpoint.pt"
    torch.manual_seed(cfg.seed)
    say = progress or (lambda phase, done, total, note: None)
    started = time.monotonic()
    env = make_env(cfg, traces)
    net = new_net(cfg)
    state = {"phase": "warmup", "episode": 0, "history": [], "seconds": 0.0, "warmup_loss": []}
    if resume and ckpt_path.exists():
        blob = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        if learned_with(blob["config"]) != cfg.learning_config():
            raise ConfigError(f"{ckpt_path} was made with another config; use the same config or a new --out "
                              "(only rollout_workers, rollout_backend and ray_address may change, and rl_episodes grow)")
        net.load_state_dict(blob["net"])
        state = blob["state"]
        if cfg.rl_episodes < state["episode"]:
            raise ConfigError(f"{ckpt_path} has trained {state['episode']} RL episodes already; to resume it, "
                              f"rl_episodes must be at least that, not {cfg.rl_episodes}")
        if state["phase"] == "done" and cfg.rl_episodes > state["episode"]:  # extend a finished training
            state["phase"] = "rl"
            if state.get("last_net") is not None:  # else (trained before extending existed): from its best network
                net.load_state_dict(state["last_net"])
        net.eval()  # as the warm-up leaves it: batch-norm in train mode cannot take the one state an action needs
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
    validation = Validation(cfg, student, traces)
    if state["phase"] == "rl" and cfg.rl_episodes:
        history = run_rl(cfg, net, env, validation, history, state, save, say, clock, traces)
        state["last_net"] = {k: v.clone() for k, v in net.state_dict().items()}  # where an extension goes on from
        if history.best_state is not None:
            net.load_state_dict(history.best_state)
    if not history.rows:  # no RL: still say how the warmed-up network does on validation
        jct = validation.mean(net)
        history.rows.append({"episode": 0, "train_jct_s": float("nan"), "validation_jct_s": jct})
        history.best_jct = jct
    state["phase"] = "done"
    save()
    meta = {"config": cfg.model_dump(), "training_seconds": state["seconds"], "best_validation_jct_s": history.best_jct,
            "warmup_samples": state.get("warmup_samples", 0)}
    save_model(net, out / "model.pt", meta)
    return meta


def learned_with(saved: dict) -> dict:
    """A checkpoint's config without where it ran; keys added since it was written take their
    defaults (what it was trained with)."""
    fields = DL2TrainConfig.model_fields
    return {k: saved.get(k, fields[k].default) for k in fields if k not in RESUME_MAY_CHANGE}


def run_rl(cfg: DL2TrainConfig, net: DL2Net, env, validation: Validation, history: RLHistory, state: dict,
           save: Callable[[], None], say: Callable[[str, int, int, str], None], clock: Callable[[], float],
           traces: Path | None) -> RLHistory:
    """The RL phase from `state["episode"]` on: the serial learner, or rollout workers
    (`cfg.parallel`) feeding `rl.learner`. Checkpoints at every validation row."""
    rl_cfg = RLConfig(episodes=cfg.rl_episodes, lr=cfg.rl_lr, entropy=cfg.entropy, batch=cfg.batch,
                      replay=cfg.replay, explore_rate=cfg.explore_rate, reward=cfg.reward, validate_every=cfg.validate_every, seed=cfg.seed)
    if state.get("best_state") is not None:
        history.best_state = state["best_state"]
        history.best_jct = state["best_jct"]
    workers = cfg.rollout_workers if cfg.parallel else 1
    phase = f"RL: actor-critic x{workers}" if cfg.parallel else "RL: actor-critic"
    since, steps_before = clock(), history.env_steps

    def checkpoint(ep: int, hist: RLHistory) -> None:
        state.update(episode=ep, history=hist.rows, best_state=hist.best_state, best_jct=hist.best_jct, env_steps=hist.env_steps)
        save()

    def on_episode(ep: int, jct: float, row: dict | None, steps: int) -> None:
        note = f"train JCT {jct / cfg.slot_seconds:.2f} slots"
        if row:
            note += f", validation {row['validation_jct_s'] / cfg.slot_seconds:.2f}"
        rate = (steps - steps_before) / max(clock() - since, 1e-9)
        say(phase, ep, cfg.rl_episodes, f"{note}, {rate:.0f} env steps/s")

    train_seeds = cfg.seeds("train", min(cfg.rl_episodes, cfg.train_seeds[1] - cfg.train_seeds[0]))
    common = dict(on_episode=on_episode, history=history, start_episode=state["episode"], checkpoint=checkpoint,
                  options_for=cfg.workload_options, clock=clock)
    if not cfg.parallel:
        return train_rl(net, env, train_seeds, validation.mean, rl_cfg, **common)
    with open_pool(worker_spec(cfg, validation.student, traces), cfg.rollout_backend, workers, cfg.ray_address) as pool:
        return train_rl_parallel(net, pool, train_seeds, cfg.seeds("validation", cfg.validation_traces), rl_cfg,
                                 env.observation_space.shape, env.action_space.n, **common)
