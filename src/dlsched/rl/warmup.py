"""Supervised warm-up: imitate an existing scheduler's decisions, as DL2 does before RL.

DL2 records every task its heuristic (DRF by default) grants as a (state, action) pair in its own
encoding and trains the policy network on them with cross-entropy. Here any dlsched policy can be
the teacher: at every slot the teacher is asked for its plan on the very Snapshot the agent sees,
its per-job worker and PS counts become targets, and the targets are replayed through the
`SlotBuilder` as actions in DRF's progressive-filling order (the job with the smallest dominant
share first; a bundle when it lacks both a worker and a PS), then "end of slot". The environment
advances on the plan those actions build, so the states are the teacher's own state distribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
import torch
from torch import nn

from dlsched.core.policy import Policy
from dlsched.models.dl2_network import DL2Net
from dlsched.rl.env import SchedulingEnv
from dlsched.models.slot_builder import BUNDLE, PS, WORKER, SlotBuilder


@dataclass
class Demonstrations:
    states: np.ndarray  # (N, 6, J) float32
    masks: np.ndarray  # (N, 3J+1) bool
    actions: np.ndarray  # (N,) int64

    def __len__(self) -> int:
        return len(self.actions)


def teacher_actions(builder: SlotBuilder, targets: dict[str, tuple[int, int]]) -> Iterable[int]:
    """Yield actions that grow the slot towards the teacher's counts; applies them to `builder`.

    The caller records `builder.state()` and `builder.mask()` before each action it receives.
    """
    stuck: set[str] = set()
    while True:
        best = None
        for job in builder.window_jobs():
            jid = job.job_id
            if jid in stuck or jid not in targets:
                continue
            w, p = targets[jid]
            dw, dp = w - builder.workers(job), p - builder.ps(job)
            if dw <= 0 and dp <= 0:
                continue
            kinds = ([BUNDLE] if dw > 0 and dp > 0 else []) + ([WORKER] if dw > 0 else []) + ([PS] if dp > 0 else [])
            action = next((a for a in (builder.action_for(job, k) for k in kinds) if a is not None), None)
            if action is None:
                stuck.add(jid)
                continue
            key = (builder.share(job), job.rank)
            if best is None or key < best[0]:
                best = (key, action)
        if best is None:
            yield len(builder.mask()) - 1  # end of slot
            return
        yield best[1]


def collect(env: SchedulingEnv, teacher: Callable[[], Policy], seeds: Iterable[int],
            on_episode: Callable[[int], None] | None = None) -> Demonstrations:
    """Run the teacher through the environment on each workload seed and record its actions."""
    states, masks, actions = [], [], []
    for seed in seeds:
        policy = teacher()
        policy.reset(env.cluster, seed)
        env.reset(seed=seed)
        done = False
        while not done:
            builder = env.builder
            plan = policy.schedule(builder.snap)
            targets = {jid: (a.num_workers, a.num_ps)
                       for jid, a in plan.running_after(builder.snap.running).items()}
            for action in teacher_actions(builder, targets):
                states.append(builder.state())
                masks.append(builder.mask())
                actions.append(action)
                if action == len(masks[-1]) - 1:
                    _, _, term, trunc, _ = env.step(action)
                    done = term or trunc
                else:
                    builder.apply(action)
        if on_episode:
            on_episode(seed)
    return Demonstrations(np.asarray(states, np.float32), np.asarray(masks, bool), np.asarray(actions, np.int64))


def train_supervised(net: DL2Net, data: Demonstrations, epochs: int = 10, lr: float = 0.005, batch: int = 256,
                     seed: int = 0, on_epoch: Callable[[int, float, float], None] | None = None) -> list[float]:
    """Cross-entropy on the teacher's actions (DL2: Adam, lr 0.005, batch 256). Returns per-epoch loss."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(net.actor.parameters(), lr=lr)
    x = torch.from_numpy(data.states)
    m = torch.from_numpy(data.masks)
    y = torch.from_numpy(data.actions)
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    net.train()
    for epoch in range(epochs):
        perm = torch.randperm(len(y), generator=gen)
        total, correct = 0.0, 0
        for i in range(0, len(y), batch):
            idx = perm[i:i + batch]
            if len(idx) < 2:  # batch-norm needs two samples
                continue
            logits = net.logits(x[idx], m[idx])
            loss = loss_fn(logits, y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
            correct += int((logits.argmax(1) == y[idx]).sum())
        losses.append(total / max(1, len(y)))
        if on_epoch:
            on_epoch(epoch, losses[-1], correct / max(1, len(y)))
    net.eval()
    return losses
