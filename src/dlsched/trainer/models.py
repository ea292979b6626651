"""The three trainable models and their synthetic, download-free data.

Data for step `s` is a pure function of (seed, s): every world size sees the same global batch
for a step, which is what makes a resize lossless (only the split over workers changes).
The task structure (cluster centres, image patterns, Markov chain) is fixed by the seed alone.
"""

from __future__ import annotations

import math

import torch
from torch import nn

N_CLASSES = 10
MLP_IN = 32
IMG = 16
VOCAB = 32
SEQ = 32


class TinyLM(nn.Module):
    """A 2-layer causal transformer language model."""

    def __init__(self, d: int, layers: int = 2):
        super().__init__()
        heads = 4 if d % 4 == 0 else 1
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Parameter(torch.randn(SEQ, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=2 * d, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, VOCAB)
        self.register_buffer("mask", torch.triu(torch.full((SEQ, SEQ), float("-inf")), 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok(x) + self.pos[: x.shape[1]]
        h = self.body(h, mask=self.mask[: x.shape[1], : x.shape[1]], is_causal=True)
        return self.head(h)


def build_model(name: str, width: int, seed: int) -> nn.Module:
    """The same initial parameters for the same (name, width, seed) in every process."""
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        if name == "mlp":
            return nn.Sequential(nn.Linear(MLP_IN, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                 nn.Linear(width, N_CLASSES))
        if name == "cnn":
            c = width
            return nn.Sequential(nn.Conv2d(1, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Flatten(), nn.Linear(2 * c * (IMG // 4) ** 2, N_CLASSES))
        if name == "transformer":
            return TinyLM(width)
        raise ValueError(f"unknown model {name!r}")
    finally:
        torch.random.set_rng_state(state)


class Task:
    """Synthetic data with learnable structure, and the loss of a model on it.

    `loss` returns the SUM of per-sample losses divided by the GLOBAL batch size, so summing
    the workers' gradients gives exactly the mean-loss gradient of the global batch.
    """

    def __init__(self, name: str, seed: int):
        self.name = name
        self.seed = seed
        g = torch.Generator().manual_seed(seed * 7919 + 1)
        if name == "mlp":
            self.centres = torch.randn(N_CLASSES, MLP_IN, generator=g) * 1.0
        elif name == "cnn":
            self.patterns = torch.randn(N_CLASSES, 1, IMG, IMG, generator=g)
        else:
            self.next_tok = torch.randperm(VOCAB, generator=g)  # the chain's likely successor

    def batch(self, step: int, batch_size: int, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples lo..hi-1 of step `step`'s global batch."""
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + step) % (2**63 - 1))
        B = batch_size
        if self.name == "mlp":
            y = torch.randint(0, N_CLASSES, (B,), generator=g)
            x = self.centres[y] + 1.5 * torch.randn(B, MLP_IN, generator=g)
        elif self.name == "cnn":
            y = torch.randint(0, N_CLASSES, (B,), generator=g)
            x = 0.5 * self.patterns[y] + torch.randn(B, 1, IMG, IMG, generator=g)
        else:
            toks = torch.empty(B, SEQ + 1, dtype=torch.long)
            toks[:, 0] = torch.randint(0, VOCAB, (B,), generator=g)
            follow = torch.rand(B, SEQ, generator=g) < 0.8
            noise = torch.randint(0, VOCAB, (B, SEQ), generator=g)
            for t in range(SEQ):
                toks[:, t + 1] = torch.where(follow[:, t], self.next_tok[toks[:, t]], noise[:, t])
            x, y = toks[:, :-1], toks[:, 1:]
        return x[lo:hi], y[lo:hi]

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> torch.Tensor:
        out = model(x)
        if self.name == "transformer":
            return nn.functional.cross_entropy(out.reshape(-1, VOCAB), y.reshape(-1), reduction="sum") / (batch_size * SEQ)
        return nn.functional.cross_entropy(out, y, reduction="sum") / batch_size


def share(batch_size: int, workers: int, index: int) -> tuple[int, int]:
    """Worker `index`'s slice [lo, hi) of the global batch: ceil(B / workers) samples (the last may get fewer, or none)."""
    per = math.ceil(batch_size / workers)
    lo = min(batch_size, index * per)
    return lo, min(batch_size, lo + per)


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
