"""torch on one thread for a training or an experiment cell, then back to what the caller had.

Why: the networks here are tiny, where intra-op threads cost more than they give, so trainings
and cells run torch on one thread. A library call must not change its caller's process for good:
a process that trained a model (a test worker, a notebook) used to keep running torch on one thread
afterwards, and a later computation's numerics then depended on what ran before it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch


@contextmanager
def one_thread() -> Iterator[None]:
    """A block (or, as `@one_thread()`, a function) with torch on one thread; restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
