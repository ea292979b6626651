"""DL2's policy and value networks in PyTorch.

As in the authors' code (`network.py`): the 6 × J state flattened, 2 fully connected layers of
6·J·2/3 units (80 for J = 20), each with batch-norm and ReLU, then a softmax over the 3J + 1
actions; the value network has the same trunk and one linear output. Invalid actions get a
logit of -1e9 so the softmax renormalises over the valid ones (DL2's masking).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from dlsched.models.slot_builder import ROWS, action_dim

STAY_ROW = 1  # the state's row of slots spent in the system / 10 (`slot_builder`)


def _trunk(inputs: int, hidden: int, layers: int) -> nn.Sequential:
    mods: list[nn.Module] = []
    width = inputs
    for _ in range(layers):
        mods += [nn.Linear(width, hidden), nn.BatchNorm1d(hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*mods)


class DL2Net(nn.Module):
    """`stay_cap`: the network sees row 1 of the state (slots the job has spent in the system / 10)
    saturated at this value; None sees it as is (DL2's state). It belongs to the model, so training
    and scheduling see the same inputs, and a model file saved without it behaves as before."""

    def __init__(self, window: int = 20, hidden: int | None = None, layers: int = 2, stay_cap: float | None = None):
        super().__init__()
        self.window = window
        self.stay_cap = stay_cap
        self.hidden = hidden or max(16, (ROWS * window * 2) // 3)
        self.layers = layers
        inputs = ROWS * window
        self.actor = nn.Sequential(_trunk(inputs, self.hidden, layers), nn.Linear(self.hidden, action_dim(window)))
        self.critic = nn.Sequential(_trunk(inputs, self.hidden, layers), nn.Linear(self.hidden, 1))

    def _inputs(self, state: torch.Tensor) -> torch.Tensor:
        if self.stay_cap is not None:
            state = torch.cat([state[:, :STAY_ROW], state[:, STAY_ROW:STAY_ROW + 1].clamp(max=self.stay_cap),
                               state[:, STAY_ROW + 1:]], 1)
        return state.flatten(1)

    def logits(self, state: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Masked action logits for a batch of (B, 6, J) states and (B, 3J+1) boolean masks."""
        out = self.actor(self._inputs(state))
        return out.masked_fill(~mask, -1e9)

    def value(self, state: torch.Tensor) -> torch.Tensor:
        return self.critic(self._inputs(state)).squeeze(-1)

    def config(self) -> dict:
        config = {"window": self.window, "hidden": self.hidden, "layers": self.layers}
        return config if self.stay_cap is None else {**config, "stay_cap": self.stay_cap}


@torch.no_grad()
def choose_action(net: DL2Net, state: np.ndarray, mask: np.ndarray, rng: np.random.Generator, greedy: bool = False) -> int:
    """One action for one state: sampled from the masked softmax (DL2's inference), or its argmax."""
    logits = net.logits(torch.from_numpy(state)[None], torch.from_numpy(mask)[None])[0]
    if greedy:
        return int(torch.argmax(logits))
    p = torch.softmax(logits, 0).numpy().astype(float)
    return int(rng.choice(len(p), p=p / p.sum()))
