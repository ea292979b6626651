"""DL2's reinforcement-learning phase: actor-critic with prioritised experience replay.

Per DL2's code (`train.py`, default settings):
- every action of slot t is stored with the same target, the slot's reward r_t (no discounting
  across slots: `LT_REWARD_IN_TS=False`);
- advantage A = r − V(s), weighted by the replay's importance weights;
- policy loss −mean(w · log π(a|s) · A) − β · entropy, β = 0.1; critic loss mean(w · (V(s) − r)²);
- Adam, lr 1e-4, batch 256, one update per slot once the buffer holds a batch;
- job-aware exploration while collecting (`rl.exploration`).
DL2 trains with up to 28 A3C agents on a GPU; here one agent on the CPU, with validation on
held-out workloads every `validate_every` episodes, and the best validated network kept.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from dlsched.rl.dl2_network import DL2Net, choose_action
from dlsched.rl.env import SchedulingEnv
from dlsched.rl.exploration import explore
from dlsched.rl.replay import PrioritizedReplay


@dataclass
class RLConfig:
    episodes: int = 200
    lr: float = 1e-4
    entropy: float = 0.1
    batch: int = 256
    replay: int = 8192
    explore_rate: float = 0.2
    reward: str = "slot"  # "slot": DL2's default; "job": an action earns the progress of the job it touched
    validate_every: int = 10
    seed: int = 0


@dataclass
class RLHistory:
    rows: list[dict] = field(default_factory=list)  # one per validation
    best_jct: float = float("inf")
    best_state: dict | None = None

    def write_csv(self, path: Path) -> None:
        if not self.rows:
            return
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(self.rows[0]))
            w.writeheader()
            w.writerows(self.rows)


def update(net: DL2Net, opt: torch.optim.Optimizer, replay: PrioritizedReplay, cfg: RLConfig) -> tuple[float, float]:
    idx, s, m, a, r, w = replay.sample(cfg.batch)
    if len(idx) < 2:
        return 0.0, 0.0
    net.train()
    s_t, m_t = torch.from_numpy(s), torch.from_numpy(m)
    r_t, w_t, a_t = torch.from_numpy(r), torch.from_numpy(w), torch.from_numpy(a)
    logits = net.logits(s_t, m_t)
    logp = torch.log_softmax(logits, 1)
    probs = logp.exp()
    value = net.value(s_t)
    adv = (r_t - value).detach()
    policy_loss = -(w_t * logp.gather(1, a_t[:, None]).squeeze(1) * adv).mean()
    entropy = -(probs * logp.masked_fill(~m_t, 0.0)).sum(1).mean()
    critic_loss = (w_t * (value - r_t) ** 2).mean()
    loss = policy_loss - cfg.entropy * entropy + critic_loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    net.eval()
    replay.update(idx, (r_t - value.detach()).numpy())
    return float(policy_loss.detach()), float(critic_loss.detach())


def run_episode(net: DL2Net, env: SchedulingEnv, seed: int, rng: np.random.Generator, cfg: RLConfig,
                replay: PrioritizedReplay | None = None, opt: torch.optim.Optimizer | None = None) -> float:
    """One training episode; returns the mean JCT of the workload in seconds."""
    obs, info = env.reset(seed=seed)
    slot: list[tuple[np.ndarray, np.ndarray, int, str | None]] = []
    while True:
        mask = info["action_mask"]
        action = choose_action(net, obs, mask, rng)
        action = explore(env.builder, action, rng, cfg.explore_rate)
        jobs = env.builder.window_jobs()
        slot.append((obs, mask, action, jobs[action // 3].job_id if action // 3 < len(jobs) else None))
        obs, reward, term, trunc, info = env.step(action)
        if info["slot_end"]:
            if replay is not None:
                per_job = info["job_rewards"]
                for s, m, a, jid in slot:
                    r = reward if cfg.reward == "slot" or jid is None else per_job.get(jid, 0.0)
                    replay.add(s, m, a, r)
                if opt is not None and len(replay) >= cfg.batch:
                    update(net, opt, replay, cfg)
            slot = []
        if term or trunc:
            return float(env.result.summary["mean_jct"]) if env.result is not None else float("nan")


def train_rl(net: DL2Net, env: SchedulingEnv, train_seeds: Sequence[int], validate: Callable[[DL2Net], float],
             cfg: RLConfig, on_episode: Callable[[int, float, dict | None], None] | None = None,
             history: RLHistory | None = None, start_episode: int = 0,
             checkpoint: Callable[[int, RLHistory], None] | None = None) -> RLHistory:
    """Fine-tune `net` in place; `validate(net)` returns the held-out mean JCT (lower is better)."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed + start_episode)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    replay = PrioritizedReplay(cfg.replay, env.observation_space.shape, env.action_space.n, seed=cfg.seed)
    hist = history or RLHistory()
    if start_episode == 0 and not hist.rows:
        jct = validate(net)
        hist.rows.append({"episode": 0, "train_jct_s": float("nan"), "validation_jct_s": jct})
        hist.best_jct, hist.best_state = jct, {k: v.clone() for k, v in net.state_dict().items()}
    for ep in range(start_episode, cfg.episodes):
        train_jct = run_episode(net, env, int(train_seeds[ep % len(train_seeds)]), rng, cfg, replay, opt)
        row = None
        if (ep + 1) % cfg.validate_every == 0 or ep + 1 == cfg.episodes:
            jct = validate(net)
            row = {"episode": ep + 1, "train_jct_s": train_jct, "validation_jct_s": jct}
            hist.rows.append(row)
            if jct < hist.best_jct:
                hist.best_jct, hist.best_state = jct, {k: v.clone() for k, v in net.state_dict().items()}
            if checkpoint is not None:
                checkpoint(ep + 1, hist)
        if on_episode:
            on_episode(ep + 1, train_jct, row)
    return hist
