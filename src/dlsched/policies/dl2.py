"""DL2 (Peng et al., IEEE TPDS 2021): a neural network decides every slot how many workers and
PSs each job gets, one task at a time.

Every `slot_seconds` (DL2: 20 minutes) the policy builds the slot from nothing: each job first
gets its minimum gang if it fits, then the network is called repeatedly on the 6 × J state and
picks one action — a worker, a PS or a bundle for one of the J window jobs, or "end the slot" —
among the valid ones; each task goes to the least-loaded node. It sees only what a live system
sees (progress, and the total work only when the job declared it), so the same object runs in
the live controller. Training is in `dlsched.rl` (`dlsched train dl2`).

Online fine-tuning (`online=True`, off by default): the policy keeps learning while it schedules,
as DL2 does on its live cluster. At each slot it scores the previous slot's actions with DL2's
reward computed from *measured* progress — Σ over jobs of progress made / total work, the total
being the declared work or, when unknown, the shared estimator's (progress + remaining) — stores
them in a prioritised replay and takes one actor-critic step (`rl.actor_critic.update`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.plan import Plan
from dlsched.core.policy import Policy
from dlsched.core.snapshot import Snapshot
from dlsched.estimators.progress_predictor import RemainingWork
from dlsched.rl.actor_critic import RLConfig, update
from dlsched.rl.dl2_network import DL2Net, choose_action
from dlsched.rl.model_io import load_model
from dlsched.rl.replay import PrioritizedReplay
from dlsched.rl.slot_builder import ROWS, SlotBuilder, action_dim

SHIPPED_MODEL = Path(__file__).resolve().parent.parent / "data" / "dl2_model.pt"
MAX_ACTIONS_PER_SLOT = 100_000  # a guard: every action adds a task, so capacity ends a slot first


class DL2Policy(Policy):
    on_events = False

    def __init__(self, net: DL2Net, slot_seconds: float = 1200.0, greedy: bool = False, name: str = "dl2",
                 online: bool = False, rl: RLConfig | None = None):
        self.net = net.eval()
        self.window = net.window
        self.interval = slot_seconds
        self.slot_seconds = slot_seconds
        self.greedy = greedy
        self.name = name
        self.online = online
        self.rl = rl or RLConfig()
        self.opt = torch.optim.Adam(net.parameters(), lr=self.rl.lr) if online else None
        self.updates = 0
        self.reset(None, 0)

    def reset(self, cluster: Cluster | None, seed: int) -> None:
        self._rng = np.random.default_rng(seed)
        self._remaining = RemainingWork()
        self._slot: list[tuple[np.ndarray, np.ndarray, int]] = []
        self._before: dict[str, tuple] = {}
        if self.online:
            self.replay = PrioritizedReplay(self.rl.replay, (ROWS, self.window), action_dim(self.window), seed=seed)

    @torch.no_grad()
    def schedule(self, snap: Snapshot) -> Plan:
        self._remaining.observe(snap.running + snap.pending)
        if self.online:
            self._learn_from_last_slot()
        builder = SlotBuilder(snap, self.window, self.slot_seconds, self._remaining)
        for _ in range(MAX_ACTIONS_PER_SLOT):
            mask = builder.mask()
            state = builder.state()
            if mask.sum() == 1:  # only "end the slot" is left
                action = len(mask) - 1
            else:
                action = choose_action(self.net, state, mask, self._rng, self.greedy)
            if self.online:
                self._slot.append((state, mask, action))
            if not builder.apply(action):
                break
        if self.online:
            self._before = {j.job_id: (j, j.progress, self._total(j)) for j in builder.jobs}
        return builder.plan()

    # ------------------------------------------------------------------ online fine-tuning
    def _total(self, job) -> float:
        if job.declared_work is not None:
            return job.declared_work
        est = self._remaining.estimate(job)
        return job.progress + est.remaining if np.isfinite(est.remaining) else float("inf")

    def _learn_from_last_slot(self) -> None:
        if not self._slot:
            return
        reward = sum((job.progress - done) / total for job, done, total in self._before.values()
                     if np.isfinite(total) and total > 0)
        for s, m, a in self._slot:
            self.replay.add(s, m, a, reward)
        self._slot = []
        if len(self.replay) >= self.rl.batch:
            with torch.enable_grad():
                update(self.net, self.opt, self.replay, self.rl)
            self.updates += 1


def dl2(model: str | None = None, greedy: bool = False, slot_seconds: float = 1200.0, online: bool = False) -> DL2Policy:
    """DL2 with a trained model: `model` is a file from `dlsched train dl2`; default: the shipped one.
    `online=True` keeps fine-tuning it from measured progress while it schedules."""
    path = Path(model) if model else SHIPPED_MODEL
    if not path.exists():
        raise ConfigError(
            f"no DL2 model at {path}: train one with `dlsched train dl2` and pass it as policy option model=PATH"
        )
    if slot_seconds <= 0:
        raise ConfigError("dl2: slot_seconds must be > 0")
    net, _ = load_model(path)
    return DL2Policy(net, slot_seconds=slot_seconds, greedy=greedy, online=online)
