"""Prioritised experience replay (Schaul et al. 2016) with DL2's constants.

DL2 (`prioritized_memory.py`): capacity 8,192, α = 0.9, importance-sampling β from 0.1 towards 1
by 1e-4 per sampled batch, ε = 0.01 added to every priority, |TD error| clipped at 1. A new sample
gets priority max(1, r − mean of stored rewards) so fresh experience is seen at least once soon.

Sampling is proportional to priority^α. A flat NumPy array with a cumulative sum per batch is
simpler than a sum tree and, at 8,192 entries, as fast in NumPy.
"""

from __future__ import annotations

import numpy as np


class PrioritizedReplay:
    def __init__(self, capacity: int, state_shape: tuple[int, ...], actions: int, *, alpha: float = 0.9,
                 beta: float = 0.1, beta_step: float = 1e-4, eps: float = 0.01, clip: float = 1.0, seed: int = 0):
        if capacity < 1:
            raise ValueError("replay capacity must be >= 1")
        self.capacity, self.alpha, self.beta, self.beta_step, self.eps, self.clip = capacity, alpha, beta, beta_step, eps, clip
        self.states = np.zeros((capacity, *state_shape), np.float32)
        self.masks = np.zeros((capacity, actions), bool)
        self.actions = np.zeros(capacity, np.int64)
        self.rewards = np.zeros(capacity, np.float32)
        self.priority = np.zeros(capacity, np.float64)
        self.size = 0
        self.next = 0
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, state: np.ndarray, mask: np.ndarray, action: int, reward: float) -> None:
        mean = float(self.rewards[: self.size].mean()) if self.size else 0.0
        i = self.next
        self.states[i], self.masks[i], self.actions[i], self.rewards[i] = state, mask, action, reward
        self.priority[i] = (max(1.0, reward - mean) + self.eps) ** self.alpha
        self.next = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch: int) -> tuple[np.ndarray, ...]:
        """(indices, states, masks, actions, rewards, importance weights normalised to max 1)."""
        p = self.priority[: self.size]
        probs = p / p.sum()
        idx = self.rng.choice(self.size, size=batch, p=probs)  # with replacement, as proportional PER does
        weights = (self.size * probs[idx]) ** (-self.beta)
        weights /= weights.max()
        self.beta = min(1.0, self.beta + self.beta_step)
        return idx, self.states[idx], self.masks[idx], self.actions[idx], self.rewards[idx], weights.astype(np.float32)

    def update(self, idx: np.ndarray, td_error: np.ndarray) -> None:
        err = np.minimum(np.abs(td_error), self.clip)
        self.priority[idx] = (err + self.eps) ** self.alpha
