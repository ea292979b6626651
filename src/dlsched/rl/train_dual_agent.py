"""`dlsched train dual-agent`: supervised warm-up on the teachers, then MAPPO-style joint training.

1. Warm-up: episodes played by the teachers (`rl.dual_agent_features`: continuous Tiresias for
   the order, the GP's fastest machine for placement) are recorded; the ordering agent regresses
   the teacher's scores, the placement agent learns its picks (cross-entropy), the critic the
   returns. This is DL2's recipe (imitate, then improve), and it makes the RL start from a sane
   scheduler instead of a random one that never finishes an episode in reasonable time.
2. MAPPO (Yu et al. 2021): both actors sample (the ordering agent's scores with Gaussian noise, the
   placement agent from its softmax); one shared reward (`rl.dual_agent_trajectory`) and one
   centralised critic give one advantage (GAE, γ = 1: episodes end) per decision, and each actor
   takes PPO's clipped step on its own probability ratio for that decision. Only decisions where
   something started or stopped are actions; the reward of the others goes to the decision before.
3. Validation on held-out seeds after every `validate_every` iterations (greedy), as the mean
   per-episode ratio to the teachers' score on the same seed, keeping the best network: the
   result is never worse on validation than the warm-up.

Resumable: `checkpoint.pt` after the warm-up and every iteration (network, optimiser, history,
best network, wall time so far); a resume may raise `rl_iterations` to train further. The model file records its training time, which the issue's one
hour budget is checked against.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch.distributions import Normal

from dlsched.core.errors import ConfigError
from dlsched.policies.dual_agent import build, save
from dlsched.rl.dual_agent_config import DualAgentTrainConfig, episode
from dlsched.models.dual_agent_net import DualAgentNet
from dlsched.models.dual_agent_trajectory import Step, Trajectory
from dlsched.rl.threads import one_thread
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate

Progress = Callable[[str, int, int, str], None]
LEARNS_ORDER = {"full", "no-comm", "no-gp", "static-gp", "ordering-only"}
LEARNS_PLACEMENT = {"full", "no-comm", "no-gp", "static-gp", "placement-only"}


def new_net(cfg: DualAgentTrainConfig) -> DualAgentNet:
    torch.manual_seed(cfg.seed)
    return DualAgentNet(hidden=cfg.hidden, communicate=cfg.variant not in ("no-comm", "ordering-only"))


def play(cfg: DualAgentTrainConfig, net: DualAgentNet, scenario: str, seed: int, mode: str) -> tuple[Trajectory, dict]:
    """One episode; the trajectory (rewards filled) and the run's summary."""
    jobs, cluster, events, model = episode(scenario, seed, cfg.jobs)
    traj = Trajectory(cfg.fee_weight)
    policy = build(cfg.variant, net, mode, traj)
    res = simulate(jobs, cluster, policy, model, SimConfig(seed=seed), node_events=events)
    traj.close(float(res.jobs["end"].max()), res.summary["total_fee"])
    return traj, res.summary


def score(summary: dict, fee_weight: float) -> float:
    """What validation minimises: mean JCT in hours + fee_weight × fee per job (the reward per job)."""
    return summary["mean_jct"] / 3600.0 + fee_weight * summary["total_fee"] / max(summary["jobs"], 1)


def acted(traj: Trajectory) -> tuple[list[Step], np.ndarray]:
    """The decisions that acted, and each one's reward until the next one (the steps are not changed)."""
    steps: list[Step] = []
    rewards: list[float] = []
    for s in traj.steps:
        if s.acted:
            steps.append(s)
            rewards.append(s.reward)
        elif steps:
            rewards[-1] += s.reward
    return steps, np.array(rewards)


def _evaluate(net: DualAgentNet, step: Step, variant: str):
    """Log-probabilities (ordering, placement), placement entropy, value, and the warm-up losses."""
    h = net.hidden
    mf = torch.from_numpy(step.machines)
    menc, msg = net.machines(mf)
    ctx, hid = torch.zeros(2 * h), None
    logp_o = bc_o = torch.zeros(())
    if step.jobs is not None:
        scores, hid, ctx = net.order(torch.from_numpy(step.jobs), msg, torch.from_numpy(step.order_teacher).float())
        if variant in LEARNS_ORDER:
            logp_o = Normal(scores, net.log_std.exp()).log_prob(torch.from_numpy(step.order_action).float()).sum()
            bc_o = ((scores - torch.from_numpy(step.order_teacher).float()) ** 2).mean()
    logp_p = ent = bc_p = torch.zeros(())
    if variant in LEARNS_PLACEMENT:
        for pick in step.picks.values():
            jm = hid[pick.job_pos] if hid is not None and pick.job_pos >= 0 else torch.zeros(h)
            for pf, mask, a, t in zip(pick.features, pick.masks, pick.actions, pick.teacher):
                logits = net.pick_logits(torch.from_numpy(pf), mf, menc, jm, torch.from_numpy(mask), t)
                lp = torch.log_softmax(logits, 0)
                logp_p = logp_p + lp[a]
                bc_p = bc_p - lp[t]
                p = lp.exp()
                ent = ent - (p * lp.masked_fill(~torch.from_numpy(mask), 0.0)).sum()
    value = net.value(torch.from_numpy(step.glob), ctx, msg)
    return logp_o, logp_p, ent, value, bc_o, bc_p


def _returns(rewards: np.ndarray) -> np.ndarray:
    return np.cumsum(rewards[::-1])[::-1].copy()


def warmup(cfg: DualAgentTrainConfig, net: DualAgentNet, trajs: list[Trajectory], scale: float,
           progress: Progress) -> float:
    """Imitate the teachers; the critic fits the (scaled) returns. Returns the last epoch's loss."""
    data = []
    for t in trajs:
        steps, rewards = acted(t)
        data += list(zip(steps, _returns(rewards) / scale))
    opt = torch.optim.Adam(net.parameters(), lr=cfg.warmup_lr)
    rng = np.random.default_rng(cfg.seed)
    loss_v = 0.0
    for epoch in range(cfg.warmup_epochs):
        total = 0.0
        for batch in np.array_split(rng.permutation(len(data)), max(1, len(data) // 64)):
            loss = torch.zeros(())
            for i in batch:
                s, g = data[i]
                _, _, _, v, bc_o, bc_p = _evaluate(net, s, cfg.variant)
                loss = loss + bc_o + bc_p + 0.5 * (v - float(g)) ** 2
            loss = loss / max(len(batch), 1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(batch)
        loss_v = total / max(len(data), 1)
        progress("warm-up (imitate teachers)", epoch + 1, cfg.warmup_epochs, f"loss {loss_v:.4f}")
    return loss_v


def ppo_update(cfg: DualAgentTrainConfig, net: DualAgentNet, opt: torch.optim.Optimizer, trajs: list[Trajectory],
               scale: float) -> None:
    """One MAPPO update on a batch of episodes (shared advantage, one clipped ratio per actor)."""
    batch: list[tuple[Step, float, float, float, float]] = []
    with torch.no_grad():
        for t in trajs:
            steps, rew = acted(t)
            if not steps:
                continue
            vals, olds = [], []
            for s in steps:
                lo, lp, _, v, _, _ = _evaluate(net, s, cfg.variant)
                vals.append(float(v))
                olds.append((float(lo), float(lp)))
            rew = rew / scale
            vals_next = np.append(vals[1:], 0.0)
            delta = rew + vals_next - np.array(vals)
            adv = np.zeros(len(steps))
            acc = 0.0
            for i in range(len(steps) - 1, -1, -1):
                acc = delta[i] + cfg.gae_lambda * acc
                adv[i] = acc
            ret = adv + np.array(vals)
            batch += [(s, a, r, lo, lp) for s, a, r, (lo, lp) in zip(steps, adv, ret, olds)]
    if not batch:
        return
    advs = np.array([b[1] for b in batch])
    advs = (advs - advs.mean()) / (advs.std() + 1e-8)
    rng = np.random.default_rng(len(batch))
    for _ in range(cfg.ppo_epochs):
        for idx in np.array_split(rng.permutation(len(batch)), max(1, len(batch) // 64)):
            loss = torch.zeros(())
            for i in idx:
                s, _, ret, old_o, old_p = batch[i]
                a = float(advs[i])
                lo, lp, ent, v, _, _ = _evaluate(net, s, cfg.variant)
                for new, old in ((lo, old_o), (lp, old_p)):
                    if new.requires_grad:
                        ratio = torch.exp(torch.clamp(new - old, -20.0, 20.0))
                        loss = loss - torch.min(ratio * a, torch.clamp(ratio, 1 - cfg.clip, 1 + cfg.clip) * a)
                loss = loss + 0.5 * (v - float(ret)) ** 2 - cfg.entropy * ent
            opt.zero_grad()
            (loss / len(idx)).backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()


def validation_scores(cfg: DualAgentTrainConfig, net: DualAgentNet, mode: str = "greedy") -> list[float]:
    """`score` of each validation episode (held-out seeds), the network playing in `mode`."""
    lo, hi = cfg.validation_seeds
    net.eval()
    return [score(play(cfg, net, cfg.validation_scenario, s, mode)[1], cfg.fee_weight)
            for s in range(lo, min(hi, lo + cfg.validation_episodes))]


def validate(cfg: DualAgentTrainConfig, net: DualAgentNet, teachers: list[float]) -> float:
    """The mean over the validation episodes of the network's score over its teachers' score on
    the same seed (below 1: better than the teachers). A ratio per episode, so the one heavily
    loaded episode whose JCT is several times the others' does not decide which network is kept."""
    return float(np.mean(np.asarray(validation_scores(cfg, net)) / np.asarray(teachers)))


@one_thread()
def train(cfg: DualAgentTrainConfig, out: Path, resume: bool = False,
          progress: Progress = lambda *a: None) -> dict:
    """Train one variant into `out` (model.pt, checkpoint.pt, validation.csv); returns the model's meta."""
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path = out / "checkpoint.pt"
    net = new_net(cfg)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    state = {"iteration": 0, "seconds": 0.0, "history": [], "best": None, "best_score": float("inf"),
             "scale": 1.0, "warm": False}
    if resume and ckpt_path.exists():
        blob = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        was, now = dict(blob["config"]), cfg.model_dump(mode="json")
        was.pop("rl_iterations", None)
        if was != {k: v for k, v in now.items() if k != "rl_iterations"}:
            raise ConfigError(f"{ckpt_path} was written with another config: resume with the same one "
                              "(only rl_iterations may grow, to train further)")
        if "teachers" not in blob["state"]:
            raise ConfigError(f"{ckpt_path} was written by an older dlsched (validation in other units): train anew")
        net.load_state_dict(blob["net"])
        opt.load_state_dict(blob["opt"])
        state = blob["state"]
    started = time.monotonic() - state["seconds"]
    lo, hi = cfg.train_seeds
    rng = np.random.default_rng(cfg.seed)  # which scenario each RL episode plays
    if "rng" in state:  # a resumed run draws on where it stopped
        rng.bit_generator.state = state["rng"]

    def save_checkpoint() -> None:
        state["seconds"] = time.monotonic() - started
        state["rng"] = rng.bit_generator.state
        tmp = ckpt_path.with_suffix(".tmp")
        torch.save({"config": cfg.model_dump(mode="json"), "net": net.state_dict(), "opt": opt.state_dict(),
                    "state": state}, tmp)
        tmp.replace(ckpt_path)

    def seed_of(k: int) -> int:
        return lo + (k * 7919 + cfg.seed) % (hi - lo)

    if "teachers" not in state:  # what validation compares with: the teachers on the validation seeds
        state["teachers"] = validation_scores(cfg, net, "teacher")
        progress("validation", 1, 1, f"teachers {np.mean(state['teachers']):.3f}")
    if not state["warm"]:
        trajs = []
        for k in range(cfg.warmup_episodes):
            sc = cfg.scenarios[k % len(cfg.scenarios)]
            trajs.append(play(cfg, net, sc, seed_of(k), "teacher")[0])
            progress("warm-up episodes (teachers)", k + 1, cfg.warmup_episodes, sc)
        rets = [abs(t.total_reward) / max(len(acted(t)[0]), 1) for t in trajs]
        state["scale"] = float(np.mean(rets)) if rets else 1.0
        if trajs:
            warmup(cfg, net, trajs, state["scale"], progress)
        net.eval()
        v = validate(cfg, net, state["teachers"])
        state["history"].append({"iteration": 0, "validation": v, "seconds": time.monotonic() - started})
        state["best"], state["best_score"], state["warm"] = {k: t.clone() for k, t in net.state_dict().items()}, v, True
        progress("validation", 1, 1, f"warm-up {v:.3f}")
        save_checkpoint()
    k = cfg.warmup_episodes + state["iteration"] * cfg.episodes_per_iteration
    while state["iteration"] < cfg.rl_iterations:
        trajs = []
        for e in range(cfg.episodes_per_iteration):
            sc = cfg.scenarios[int(rng.integers(len(cfg.scenarios)))]
            trajs.append(play(cfg, net, sc, seed_of(k), "sample")[0])
            k += 1
        net.train()
        ppo_update(cfg, net, opt, trajs, state["scale"])
        net.eval()
        state["iteration"] += 1
        note = f"return/job {np.mean([t.total_reward for t in trajs]) / cfg.jobs:.3f}"
        if state["iteration"] % cfg.validate_every == 0 or state["iteration"] == cfg.rl_iterations:
            v = validate(cfg, net, state["teachers"])
            state["history"].append({"iteration": state["iteration"], "validation": v,
                                     "seconds": time.monotonic() - started})
            if v < state["best_score"]:
                state["best"], state["best_score"] = {k2: t.clone() for k2, t in net.state_dict().items()}, v
            note += f", validation {v:.3f} (best {state['best_score']:.3f})"
        progress("MAPPO iterations", state["iteration"], cfg.rl_iterations, note)
        save_checkpoint()
    net.load_state_dict(state["best"])
    seconds = time.monotonic() - started
    meta = {"variant": cfg.variant, "training_seconds": seconds, "best_validation": state["best_score"],
            "warmup_validation": state["history"][0]["validation"], "iterations": state["iteration"],
            "config": cfg.model_dump(mode="json")}
    save(net, out / "model.pt", meta)
    with (out / "validation.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["iteration", "validation", "seconds"])
        w.writeheader()
        w.writerows(state["history"])
    return meta
