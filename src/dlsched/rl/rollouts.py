"""Rollout workers: play episodes of a Gymnasium scheduling environment with weights the learner
sends, away from the learner (a Ray actor or an OS process), and return the transitions.

Why this shape: DL2 trained with up to 28 A3C agents; one agent here got 150 episodes in half an
hour. A worker is built from a picklable `WorkerSpec` — an environment factory, a network factory
and, for validation, an evaluation function — so it builds its own simulator (a live simulator is
never pickled) and knows nothing of DL2 beyond the `(obs, mask) -> logits` network and the slot
builder the environment exposes; any later learned policy with that shape reuses it.

A task carries the learner's current weights (NumPy arrays: cheap to pickle, and no torch shared
memory handles through a process pipe), a workload seed and the seed of the action generator, so
the same task gives the same transitions wherever it runs (`collect_rollout` in-process is the
reference).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from dlsched.rl.actor_critic import REWARD_MODES, credit, play_slots
from dlsched.rl.env import SchedulingEnv


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker builds once, where it runs. Every field must pickle (module-level functions,
    `functools.partial` of them, pydantic configs)."""

    make_env: Callable[[], SchedulingEnv]
    make_net: Callable[[], nn.Module]
    explore_rate: float = 0.2
    evaluate: Callable[[nn.Module, int], float] | None = None  # (network, validation seed) -> mean JCT (s)


@dataclass(frozen=True)
class Task:
    """One unit of work: an episode (`kind="episode"`) or one validation workload (`"evaluate"`)."""

    kind: str
    weights: dict[str, np.ndarray]
    seed: int  # the workload seed
    rng_seed: Any = 0  # seeds the action choice and exploration (episodes only)
    options: dict | None = None  # workload options, e.g. {"num_jobs": 20} (a curriculum stage)


@dataclass
class Rollout:
    """One episode's transitions, with every credit (`REWARD_MODES`) so the learner picks the reward mode."""

    states: np.ndarray  # (N, *obs) float32
    masks: np.ndarray  # (N, actions) bool
    actions: np.ndarray  # (N,) int64
    credits: dict[str, np.ndarray]  # reward mode -> (N,) float64: each action's target (`actor_critic.credit`)
    slot_sizes: list[int] = field(default_factory=list)  # transitions per slot, in order
    train_jct: float = float("nan")
    seconds: float = 0.0

    @property
    def steps(self) -> int:
        return len(self.actions)

    def rewards(self, mode: str) -> np.ndarray:
        return self.credits[mode]


def weights_of(net: nn.Module) -> dict[str, np.ndarray]:
    """The network's state as NumPy arrays (what a Task carries)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in net.state_dict().items()}


def load_weights(net: nn.Module, weights: dict[str, np.ndarray]) -> None:
    net.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in weights.items()})


def collect_rollout(net: nn.Module, env: SchedulingEnv, seed: int, rng: np.random.Generator, explore_rate: float,
                    options: dict | None = None) -> Rollout:
    """Play one whole episode with a fixed network (the same draws as `run_episode` without updates)."""
    started = time.perf_counter()
    states, masks, actions, sizes = [], [], [], []
    credits: dict[str, list[float]] = {mode: [] for mode in REWARD_MODES}
    episode = play_slots(net, env, seed, rng, explore_rate, options)
    while True:
        try:
            slot, reward, per_job = next(episode)
        except StopIteration as end:
            jct = end.value
            break
        for s, m, a, _ in slot:
            states.append(s)
            masks.append(m)
            actions.append(a)
        for mode, targets in credits.items():
            targets.extend(credit(slot, reward, per_job, mode))
        sizes.append(len(slot))
    shape = env.observation_space.shape
    return Rollout(np.asarray(states, np.float32).reshape(-1, *shape), np.asarray(masks, bool).reshape(-1, env.action_space.n),
                   np.asarray(actions, np.int64), {mode: np.asarray(t, np.float64) for mode, t in credits.items()},
                   sizes, jct, time.perf_counter() - started)


class RolloutWorker:
    """Builds its environment and network once, then runs tasks (`run`). Used as is in-process,
    in a worker process, or as a Ray actor."""

    def __init__(self, spec: WorkerSpec):
        torch.set_num_threads(1)  # one core per worker; tiny networks gain nothing from threads
        self.spec = spec
        self.env = spec.make_env()
        self.net = spec.make_net().eval()

    def run(self, task: Task) -> Rollout | float:
        load_weights(self.net, task.weights)
        self.net.eval()
        if task.kind == "evaluate":
            if self.spec.evaluate is None:
                raise ValueError("this worker has no evaluation function (WorkerSpec.evaluate)")
            return float(self.spec.evaluate(self.net, task.seed))
        rng = np.random.default_rng(task.rng_seed)
        return collect_rollout(self.net, self.env, task.seed, rng, self.spec.explore_rate, task.options)

    def ping(self) -> bool:
        """True once built (lets a caller wait until every worker is warm)."""
        return True
