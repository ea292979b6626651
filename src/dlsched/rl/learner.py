"""The parallel learner: actor-critic on episodes that rollout workers play (A3C-style).

`pool.workers` episodes are in flight at once. When one returns, its transitions go into the
prioritised replay with the credit `cfg.reward` asks for, the learner makes one update per slot of
that episode (DL2's update-per-slot ratio, as the serial `train_rl` does), and that worker gets the
next episode with the current weights. So an episode is played with weights up to `workers - 1`
episodes old, as A3C's agents play with the global network of when they last synchronised.

Validation points come every `validate_every` episodes learned from: the weights of that moment
are sent out as one task per validation workload, evaluated in parallel by the same workers while
training goes on, and the row (with that moment's seconds and env steps) is recorded when the last
one returns. A checkpoint is written with each recorded row; validations still out when a run is
interrupted are lost, and the episodes in flight are played again after `--resume`.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
import torch

from dlsched.models.dl2_update import RLConfig, update
from dlsched.rl.actor_critic import EpisodeHook, RLHistory
from dlsched.rl.pools import Pool
from dlsched.models.replay import PrioritizedReplay
from dlsched.rl.rollouts import Rollout, Task, weights_of


def episode_task(ep: int, weights: dict, train_seeds: Sequence[int], cfg: RLConfig,
                 options_for: Callable[[int], dict | None]) -> Task:
    """Episode `ep`'s task: its workload seed as in `train_rl`, and an action generator of its own
    (seeded by the run's seed and the episode) so the episode is the same on any worker."""
    return Task("episode", weights, int(train_seeds[ep % len(train_seeds)]), rng_seed=[cfg.seed, ep], options=options_for(ep))


def learn_from(rollout: Rollout, net: torch.nn.Module, opt: torch.optim.Optimizer, replay: PrioritizedReplay,
               cfg: RLConfig) -> None:
    """Add the episode to the replay slot by slot, with one update after each slot once the
    replay holds a batch: the order in which the serial learner stores and updates."""
    rewards = rollout.rewards(cfg.reward)
    i = 0
    for size in rollout.slot_sizes:
        for k in range(i, i + size):
            replay.add(rollout.states[k], rollout.masks[k], int(rollout.actions[k]), float(rewards[k]))
        i += size
        if len(replay) >= cfg.batch:
            update(net, opt, replay, cfg)


def train_rl_parallel(net: torch.nn.Module, pool: Pool, train_seeds: Sequence[int], validation_seeds: Sequence[int],
                      cfg: RLConfig, obs_shape: tuple[int, ...], actions: int, *, on_episode: EpisodeHook | None = None,
                      history: RLHistory | None = None, start_episode: int = 0,
                      checkpoint: Callable[[int, RLHistory], None] | None = None,
                      options_for: Callable[[int], dict | None] = lambda ep: None,
                      clock: Callable[[], float] = time.monotonic) -> RLHistory:
    """Fine-tune `net` in place on episodes played by `pool`'s workers (module doc); the
    validation JCT is the mean over `validation_seeds` of the workers' evaluation function."""
    torch.manual_seed(cfg.seed)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    replay = PrioritizedReplay(cfg.replay, obs_shape, actions, seed=cfg.seed)
    hist = history or RLHistory()
    points: dict[int, dict] = {}  # validation point (episodes done) -> row, weights, JCTs so far

    def validate(done: int, train_jct: float) -> None:
        weights = weights_of(net)
        points[done] = {"row": hist.point(done, train_jct, clock()), "weights": weights, "jcts": {}}
        for i, seed in enumerate(validation_seeds):
            pool.submit(("evaluate", done, i), Task("evaluate", weights, int(seed)))

    if start_episode == 0 and not hist.rows:
        validate(0, float("nan"))
    done = next_ep = start_episode
    while next_ep < cfg.episodes and next_ep - done < pool.workers:
        pool.submit(("episode", next_ep), episode_task(next_ep, weights_of(net), train_seeds, cfg, options_for))
        next_ep += 1
    last_jct = float("nan")
    while done < cfg.episodes or points:
        tag, result = pool.next_result()
        if tag[0] == "evaluate":
            _, point, i = tag
            p = points[point]
            p["jcts"][i] = result
            if len(p["jcts"]) == len(validation_seeds):
                del points[point]
                jct = float(np.mean([p["jcts"][k] for k in range(len(validation_seeds))]))
                hist.record(p["row"], jct, {k: torch.from_numpy(v) for k, v in p["weights"].items()})
                if checkpoint is not None:
                    checkpoint(done, hist)
                if on_episode:
                    on_episode(done, last_jct, p["row"], hist.env_steps)
            continue
        learn_from(result, net, opt, replay, cfg)
        done += 1
        last_jct = result.train_jct
        hist.episode_done(result.train_jct, result.steps)
        if done % cfg.validate_every == 0 or done == cfg.episodes:
            validate(done, result.train_jct)
        if next_ep < cfg.episodes:
            pool.submit(("episode", next_ep), episode_task(next_ep, weights_of(net), train_seeds, cfg, options_for))
            next_ep += 1
        if on_episode:
            on_episode(done, result.train_jct, None, hist.env_steps)
    return hist
