"""Compiled (Numba) kernels, imported on first use, and nothing without Numba.

A module of kernels imports Numba at its top (~0.5 s, and seconds to compile on a machine's first
call, cached after that: Numba's `cache=True`); a run that never reaches a kernel should not pay
for it. Callers ask `kernel(module, name)` where the work is, and run their NumPy path when it
returns None (Numba not installed): every kernel here gives its NumPy path's results bit for bit,
which its tests check.
"""

from __future__ import annotations

import importlib
from typing import Callable

_loaded: dict[tuple[str, str], Callable | bool] = {}


def kernel(module: str, name: str) -> Callable | None:
    """`module.name`, imported on the first ask; None when Numba (or llvmlite) is missing."""
    got = _loaded.get((module, name))
    if got is None:
        try:
            got = getattr(importlib.import_module(module), name)
        except ModuleNotFoundError as e:  # only a missing Numba means "no kernel": anything else is a bug
            if (e.name or "").split(".")[0] not in ("numba", "llvmlite"):
                raise
            got = False
        _loaded[(module, name)] = got
    return got or None
