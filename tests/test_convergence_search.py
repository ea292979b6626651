"""The compiled loss-curve search (`convergence_search`) must be the NumPy search's bits: every
Optimus, DL2 and QoS figure in the docs was made with the NumPy one."""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.estimators import convergence_fit as cf
from dlsched.estimators import convergence_search as cs


def _rows(rng: np.random.Generator, rows: int, n: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    k = np.sort(rng.uniform(1.0, 1e5, (rows, n)), axis=1)
    b0, b1 = 10 ** rng.uniform(-7, -2, rows), 10 ** rng.uniform(-2, 1.5, rows)
    b2 = rng.uniform(0, 2, rows) * (rng.random(rows) < 0.8)  # some floors at 0: the bound binds
    noise = rng.normal(0, 10 ** rng.uniform(-4, -1), (rows, n))
    y = (1.0 / (b0[:, None] * k + b1[:, None]) + b2[:, None]) * (1 + noise)
    if kind == "noise":  # no curve at all: flat lines, the bound s = 0
        y = rng.uniform(0, 1, (rows, n))
    elif kind == "rising":
        y = y[:, ::-1].copy()
    return k / k[:, -1:], y


@pytest.mark.parametrize("kind", ["curve", "noise", "rising"])
def test_the_compiled_search_is_the_numpy_search_bit_for_bit(kind):
    rng = np.random.default_rng({"curve": 1, "noise": 2, "rising": 3}[kind])
    compared = 0
    for trial in range(40):
        n = int(rng.integers(cf.MIN_SAMPLES, cs.MAX_SAMPLES + 1))  # below 8, up to 128: each way NumPy sums
        x, y = _rows(rng, int(rng.integers(1, 30)), n, kind)
        wt = 1.0 / cf.segment_sigma(n) ** 2
        # refits' hints: near the answer, far off (the whole grid), none (NaN), or no previous fits
        truth = cf._search_numpy(x, y, wt)[0]
        near = np.where(rng.random(len(x)) < 0.5, truth + rng.normal(0, 0.3, len(x)), rng.uniform(-6, 9, len(x)))
        near[rng.random(len(x)) < 0.2] = np.nan
        for hint in (None, near):
            want = cf._search_numpy(x, y, wt, hint)
            got = cs.search(x, y, wt, hint, cf._LOG_R, cf._FINE, cf._WINDOW, cf._POLISH)
            for a, b in zip(want, got):
                assert np.array_equal(a, b, equal_nan=True), (trial, n)
            compared += len(x)
    assert compared > 500


def test_rows_longer_than_the_compiled_sums_go_to_numpy():
    rng = np.random.default_rng(4)
    x, y = _rows(rng, 3, cs.MAX_SAMPLES + 1, "curve")
    wt = 1.0 / cf.segment_sigma(x.shape[1]) ** 2
    assert cs.search(x, y, wt, None, cf._LOG_R, cf._FINE, cf._WINDOW, cf._POLISH) is None
    got, want = cf._search(x, y, wt), cf._search_numpy(x, y, wt)
    for a, b in zip(got, want):
        assert np.array_equal(a, b, equal_nan=True)
