"""`core.compiled.kernel`: a missing Numba means "run the NumPy path" (the same results), any
other import failure is a bug and is raised."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from dlsched.core import compiled
from dlsched.estimators import convergence_fit as cf


def _missing(name: str):
    def fail(module: str):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    return fail


def test_a_missing_numba_gives_no_kernel_and_any_other_missing_module_raises(monkeypatch):
    monkeypatch.setattr(compiled, "_loaded", {})
    monkeypatch.setattr(importlib, "import_module", _missing("numba"))
    assert compiled.kernel("dlsched.estimators.convergence_search", "search") is None
    monkeypatch.setattr(compiled, "_loaded", {})
    monkeypatch.setattr(importlib, "import_module", _missing("dlsched.estimators.not_there"))
    with pytest.raises(ModuleNotFoundError):
        compiled.kernel("dlsched.estimators.not_there", "search")


def test_fits_without_numba_are_the_compiled_fits(monkeypatch):
    rng = np.random.default_rng(3)
    rows = []
    for i in range(40):
        k = np.linspace(100.0, 10_000.0 * (1 + i % 5), 50)
        loss = (1.0 / (10 ** -(3 + i % 3) * k + 1.0) + 0.05 * (i % 4)) * (1 + rng.normal(0, 0.01, 50))
        rows.append((k, loss))
    with_numba = cf.fit_arrays(rows)
    monkeypatch.setattr(cf, "kernel", lambda module, name: None)
    without = cf.fit_arrays(rows)
    assert sum(f is not None for f in with_numba) > 30
    def key(fits):
        return [f and (f.b0, f.b1, f.b2, f.total) for f in fits]

    assert key(with_numba) == key(without)
