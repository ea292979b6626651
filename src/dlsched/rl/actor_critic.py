"""DL2's reinforcement-learning phase: actor-critic with prioritised experience replay.

Per DL2's code (`train.py`, default settings):
- every action of slot t is stored with the same target, the slot's reward r_t (no discounting
  across slots: `LT_REWARD_IN_TS=False`);
- advantage A = r − V(s), weighted by the replay's importance weights;
- policy loss −mean(w · log π(a|s) · A) − β · H̄, β = 0.1, where H̄ is DL2's entropy term: the mean
  of −π log π over the batch *and the 3J + 1 actions* (`tf.reduce_mean` in its `network.py`), i.e.
  the per-state entropy divided by the number of actions (`entropy_bonus`); critic loss
  mean(w · (V(s) − r)²);
- Adam, lr 1e-4, batch 256, one update per slot once the buffer holds a batch;
- job-aware exploration while collecting (`rl.exploration`).
DL2 trains with up to 28 A3C agents on a GPU; `train_rl` here is one agent on the CPU (several:
`rl.learner`), with validation on held-out workloads every `validate_every` episodes, and the best
validated network kept.
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Generator, Sequence

import numpy as np
import torch

from dlsched.models.dl2_network import ActorInference, DL2Net
from dlsched.rl.env import SchedulingEnv
from dlsched.rl.exploration import explore
from dlsched.models.dl2_update import RLConfig, update
from dlsched.models.replay import PrioritizedReplay


@dataclass
class RLHistory:
    """The learning curve (one row per validation point) and the best validated network.

    A row has the episode, the last episode's train JCT, the validation JCT, and, so that variants
    (reward modes, worker counts) can be compared on the same axes, the mean train JCT since the
    previous point, the wall-clock seconds and the environment steps so far."""

    rows: list[dict] = field(default_factory=list)  # one per validation
    best_jct: float = float("inf")
    best_state: dict | None = None
    env_steps: int = 0  # actions taken in every episode learned from so far
    recent: list[float] = field(default_factory=list)  # train JCTs since the last point

    def episode_done(self, train_jct: float, steps: int) -> None:
        self.env_steps += steps
        self.recent.append(train_jct)

    def point(self, episode: int, train_jct: float, seconds: float) -> dict:
        """A validation row for now, its validation JCT still to come (`record`)."""
        mean = float(np.mean(self.recent)) if self.recent else float("nan")
        self.recent = []
        return {"episode": episode, "train_jct_s": train_jct, "validation_jct_s": float("nan"),
                "train_jct_mean_s": mean, "seconds": round(seconds, 3), "env_steps": self.env_steps}

    def record(self, row: dict, jct: float, state: dict[str, torch.Tensor]) -> None:
        """Add `row` with its validation JCT; keep `state` (the weights validated) if it is the best."""
        row["validation_jct_s"] = jct
        self.rows.append(row)
        self.rows.sort(key=lambda r: r["episode"])
        if jct < self.best_jct:
            self.best_jct, self.best_state = jct, {k: v.clone() for k, v in state.items()}

    def write_csv(self, path: Path) -> None:
        if not self.rows:
            return
        names = list(dict.fromkeys(k for row in self.rows for k in row))  # rows from before a resume may lack columns
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=names, restval="")
            w.writeheader()
            w.writerows(self.rows)


Transition = tuple[np.ndarray, np.ndarray, int, "str | None"]
"""(observation, action mask, action, id of the job the action touched or None)."""


def play_slots(net: DL2Net, env: SchedulingEnv, seed: int, rng: np.random.Generator, explore_rate: float,
               options: dict | None = None) -> Generator[tuple[list[Transition], float, dict[str, float]], None, float]:
    """Play one episode with DL2's action choice and job-aware exploration; yield each slot's
    transitions with its reward and per-job rewards when the slot ends, return the mean JCT (s).
    A generator, so the serial learner can update between slots and a rollout worker can collect
    the whole episode with the same draws."""
    obs, info = env.reset(seed=seed, options=options)
    slot: list[Transition] = []
    actor = ActorInference(net)
    while True:
        mask = info["action_mask"]
        action = actor.choose(obs, mask, rng)
        action = explore(env.builder, action, rng, explore_rate)
        jobs = env.builder.window_jobs()
        slot.append((obs, mask, action, jobs[action // 3].job_id if action // 3 < len(jobs) else None))
        obs, reward, term, trunc, info = env.step(action)
        if info["slot_end"]:
            yield slot, reward, info["job_rewards"]
            slot = []
            actor = ActorInference(net)  # the serial learner may have updated the weights between slots
        if term or trunc:
            return float(env.result.summary["mean_jct"]) if env.result is not None else float("nan")


#: How a slot's outcome is credited to its actions (`credit`); "slot" is DL2's.
REWARD_MODES = ("slot", "job", "job-mean")


def credit(slot: list[Transition], reward: float, per_job: dict[str, float], mode: str) -> list[float]:
    """Each action's target. `slot` (DL2): the slot's reward, Σ over jobs of the fraction of their
    work done in it, for every action. `job`: a task action earns its own job's fraction, and "end
    the slot" keeps the whole slot's reward — measured to collapse to ending every slot at once
    (docs/DL2.md), because ending then earns J jobs' worth while adding a task earns one job's.
    `job-mean`: as `job`, but "end the slot" earns the mean job's fraction, on the task actions' scale."""
    if mode not in REWARD_MODES:
        raise ValueError(f"reward mode {mode!r}: expected one of {', '.join(REWARD_MODES)}")
    if mode == "slot":
        return [reward] * len(slot)
    end = reward if mode == "job" else (reward / len(per_job) if per_job else 0.0)
    return [end if jid is None else per_job.get(jid, 0.0) for _, _, _, jid in slot]


def run_episode(net: DL2Net, env: SchedulingEnv, seed: int, rng: np.random.Generator, cfg: RLConfig,
                replay: PrioritizedReplay | None = None, opt: torch.optim.Optimizer | None = None,
                options: dict | None = None) -> float:
    """One training episode, updating after every slot; returns the mean JCT of the workload in seconds."""
    episode = play_slots(net, env, seed, rng, cfg.explore_rate, options)
    while True:
        try:
            slot, reward, per_job = next(episode)
        except StopIteration as end:
            return end.value
        if replay is not None:
            for (s, m, a, _), r in zip(slot, credit(slot, reward, per_job, cfg.reward)):
                replay.add(s, m, a, r)
            if opt is not None and len(replay) >= cfg.batch:
                update(net, opt, replay, cfg)


EpisodeHook = Callable[[int, float, "dict | None", int], None]
"""on_episode(episodes done, that episode's train JCT, the validation row completed or None, env steps so far)."""


def train_rl(net: DL2Net, env: SchedulingEnv, train_seeds: Sequence[int], validate: Callable[[DL2Net], float],
             cfg: RLConfig, on_episode: EpisodeHook | None = None,
             history: RLHistory | None = None, start_episode: int = 0,
             checkpoint: Callable[[int, RLHistory], None] | None = None,
             options_for: Callable[[int], dict | None] = lambda ep: None,
             clock: Callable[[], float] = time.monotonic) -> RLHistory:
    """Fine-tune `net` in place, one agent updating after every slot (`rl.learner` runs several
    agents); `validate(net)` returns the held-out mean JCT (lower is better). `options_for(ep)`: the
    workload options of episode `ep` (a curriculum); `clock()`: seconds of training so far."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed + start_episode)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    replay = PrioritizedReplay(cfg.replay, env.observation_space.shape, env.action_space.n, seed=cfg.seed)
    hist = history or RLHistory()
    if start_episode == 0 and not hist.rows:
        hist.record(hist.point(0, float("nan"), clock()), validate(net), net.state_dict())
    for ep in range(start_episode, cfg.episodes):
        train_jct = run_episode(net, env, int(train_seeds[ep % len(train_seeds)]), rng, cfg, replay, opt, options_for(ep))
        hist.episode_done(train_jct, env.episode_steps)
        row = None
        if (ep + 1) % cfg.validate_every == 0 or ep + 1 == cfg.episodes:
            row = hist.point(ep + 1, train_jct, clock())
            hist.record(row, validate(net), net.state_dict())
            if checkpoint is not None:
                checkpoint(ep + 1, hist)
        if on_episode:
            on_episode(ep + 1, train_jct, row, hist.env_steps)
    return hist
