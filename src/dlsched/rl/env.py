"""A Gymnasium environment over the dlsched simulator, for any RL scheduler that decides a slot
one task at a time (DL2's encoding is the default configuration, not baked into the simulator).

- Observation: `Box(shape=(6, window))`, float32: `SlotBuilder.state()` (see its docstring for the
  rows). Flatten it if your agent wants a vector.
- Action: `Discrete(3 * window + 1)`: one more worker / PS / bundle for window job i, or end the
  slot (the last action). `info["action_mask"]` marks the valid actions; an invalid action raises
  ValueError rather than being silently ignored.
- Reward: 0 for task actions; when a slot ends, DL2's reward: the sum over jobs of the fraction of
  their total work done during the slot (`info["slot_reward"]` too; `info["job_rewards"]` has
  each job's part, for agents that credit an action to the job it touched). The fraction uses the true
  total, which the simulator knows; it trains the agent and is never part of the observation.
- Episode: a workload drawn by `workload(seed, **options)` for the seed given to `reset` (or the next
  seed of the environment's own generator; `options`, e.g. `{"num_jobs": 20}` for a curriculum over
  workload sizes, are passed on to the workload function), run until every job ended (`terminated`) or `max_slots`
  (`truncated`). `info["result"]` holds the SimResult at the end.

The simulator owns time: the environment drives `Simulator.steps`, which yields a Snapshot at the
start of every slot and waits for the plan the agent's actions built.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.plan import Plan
from dlsched.core.policy import Policy
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.estimators.progress_predictor import RemainingWork
from dlsched.models.slot_builder import ROWS, SlotBuilder, action_dim
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import Simulator
from dlsched.throughput.base import ThroughputModel


class SlotClock(Policy):
    """Tells the engine to ask at slot boundaries only; the environment answers for it."""

    name = "rl-agent"
    on_events = False

    def __init__(self, slot_seconds: float):
        self.interval = slot_seconds

    def schedule(self, snap: Snapshot) -> Plan:  # pragma: no cover - the environment answers
        raise RuntimeError("SlotClock is driven by SchedulingEnv, not asked directly")


def job_rewards(jobs: list[JobState], before: dict[str, float]) -> dict[str, float]:
    """Per job: (progress made since `before` was taken) / total work."""
    return {j.job_id: (j.progress - before[j.job_id]) / j.spec.iterations for j in jobs if j.job_id in before}


class SchedulingEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(
        self,
        workload: Callable[[int], list[JobSpec]],
        cluster: Cluster,
        throughput: ThroughputModel,
        *,
        window: int = 20,
        slot_seconds: float = 1200.0,
        config: SimConfig | None = None,
        max_slots: int = 2000,
    ):
        if window < 1 or slot_seconds <= 0 or max_slots < 1:
            raise ValueError("window, slot_seconds and max_slots must be positive")
        self.workload = workload
        self.cluster = cluster
        self.throughput = throughput
        self.window = window
        self.slot_seconds = slot_seconds
        self.config = config or SimConfig()
        self.max_slots = max_slots
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(ROWS, window), dtype=np.float32)
        self.action_space = spaces.Discrete(action_dim(window))
        self._steps = None
        self.builder: SlotBuilder | None = None

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        wl_seed = int(seed) if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        jobs = self.workload(wl_seed, **options) if options else self.workload(wl_seed)
        sim = Simulator(self.cluster, self.throughput, SlotClock(self.slot_seconds),
                        self.config.model_copy(update={"seed": wl_seed}))
        self._steps = sim.steps(jobs)
        self._remaining = RemainingWork()
        self.slots = 0
        self.episode_steps = 0  # actions taken in this episode (what "env steps" counts)
        self.result = None
        snap = next(self._steps)  # every workload has at least one job, so a decision is due
        self._begin_slot(snap)
        return self.builder.state(), self._info()

    def step(self, action: int):
        if self.builder is None:
            raise RuntimeError("call reset() first (the episode ended)")
        self.episode_steps += 1
        if self.builder.apply(int(action)):
            return self.builder.state(), 0.0, False, False, self._info()
        return self._end_slot()

    def action_masks(self) -> np.ndarray:
        """The valid actions now (the name sb3-contrib's MaskablePPO looks for)."""
        return self.builder.mask() if self.builder is not None else np.zeros(self.action_space.n, dtype=bool)

    # ------------------------------------------------------------------ slots
    def _begin_slot(self, snap: Snapshot) -> None:
        self._remaining.observe(snap.running + snap.pending)
        self.builder = SlotBuilder(snap, self.window, self.slot_seconds, self._remaining)
        self._jobs = self.builder.jobs
        self._before = {j.job_id: j.progress for j in self._jobs}

    def _end_slot(self):
        plan = self.builder.plan()
        self.slots += 1
        try:
            snap = self._steps.send(plan)
        except StopIteration as done:
            snap, self.result = None, done.value
        per_job = job_rewards(self._jobs, self._before)  # progress made during the slot just run
        reward = float(sum(per_job.values()))
        empty = np.zeros(self.observation_space.shape, dtype=np.float32)
        if snap is None:
            self.builder = None
            info = {"action_mask": np.zeros(self.action_space.n, dtype=bool), "slot_reward": reward,
                    "job_rewards": per_job, "slot_end": True, "result": self.result}
            return empty, reward, True, False, info
        self._begin_slot(snap)
        truncated = self.slots >= self.max_slots
        info = self._info()
        info.update(slot_reward=reward, job_rewards=per_job, slot_end=True)
        if truncated:
            self._steps.close()
            self.builder = None
        return (empty if truncated else self.builder.state()), reward, False, truncated, info

    def _info(self) -> dict[str, Any]:
        return {"action_mask": self.builder.mask(), "slot_end": False, "now": self.builder.snap.now}
