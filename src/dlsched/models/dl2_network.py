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


class ActorInference:
    """The actor's masked logits for one state at a time, in NumPy, from a snapshot of `net`'s
    weights (batch-norm with its running statistics, as in `eval()`).

    Why: a slot is built one action at a time, one forward pass each, and on a roomy cluster a slot
    takes hundreds of actions (every worker is one). Through PyTorch a batch-1 pass of this small
    network costs ~0.3 ms of per-operation overhead; the same arithmetic as NumPy float32 vectors
    costs a fraction. The numbers agree with `DL2Net.logits` to float32 rounding (a test compares
    them), not bit for bit. Take a new snapshot after the weights change (online updates).
    """

    def __init__(self, net: DL2Net):
        self.stay_cap = net.stay_cap
        self.layers: list[tuple] = []  # ("linear", W.T, b) | ("bn", scale, shift) | ("relu",)
        for mod in _flat(net.actor):
            if isinstance(mod, nn.Linear):
                self.layers.append(("linear", _np(mod.weight).T.copy(), _np(mod.bias)))
            elif isinstance(mod, nn.BatchNorm1d):
                scale = _np(mod.weight) / np.sqrt(_np(mod.running_var) + np.float32(mod.eps))
                self.layers.append(("bn", scale, _np(mod.bias) - _np(mod.running_mean) * scale))
            elif isinstance(mod, nn.ReLU):
                self.layers.append(("relu",))
            else:
                raise TypeError(f"ActorInference: unexpected layer {type(mod).__name__}")

    def logits(self, state: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """`DL2Net.logits` of one (6, J) state and its (3J+1,) mask, as a float32 vector."""
        x = np.asarray(state, dtype=np.float32)
        if self.stay_cap is not None:
            x = x.copy()
            x[STAY_ROW] = np.minimum(x[STAY_ROW], np.float32(self.stay_cap))
        x = x.reshape(-1)
        for layer in self.layers:
            if layer[0] == "linear":
                x = x @ layer[1] + layer[2]
            elif layer[0] == "bn":
                x = x * layer[1] + layer[2]
            else:
                x = np.maximum(x, np.float32(0.0))
        return np.where(mask, x, np.float32(-1e9))

    def choose(self, state: np.ndarray, mask: np.ndarray, rng: np.random.Generator, greedy: bool = False) -> int:
        """One action: drawn from the masked softmax with `rng` (DL2's inference), or its argmax."""
        logits = self.logits(state, mask)
        if greedy:
            return int(np.argmax(logits))
        e = np.exp(logits - logits.max()).astype(float)
        p = e / e.sum()
        # `rng.choice(len(p), p=p)`'s own draw without its checks of p (a third of this call):
        # NumPy's Generator.choice takes the cumulative sum, divides by its last value, draws one
        # uniform and searches it from the right (a test holds the two to the same draws)
        cdf = p.cumsum()
        cdf /= cdf[-1]
        return int(cdf.searchsorted(rng.random(), side="right"))


def _flat(mod: nn.Module) -> list[nn.Module]:
    """The leaf modules of nested Sequentials, in order."""
    return [m for m in mod.modules() if not isinstance(m, nn.Sequential)]


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float32)
