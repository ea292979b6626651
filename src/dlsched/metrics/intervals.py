"""The 95% Student-t interval of a mean: how the sweep report, `--seeds N` tables and the
experiments' seed tables all state a figure measured over a few seeds (one definition, so an
interval means the same thing on every page)."""

from __future__ import annotations

import numpy as np
from scipy import stats


def t_interval(x: np.ndarray) -> tuple[float, float, float]:
    """(mean, low, high): the 95% Student-t interval of the mean of `x` (NaNs left out)."""
    x = x[~np.isnan(x)]
    if not len(x):
        return (float("nan"),) * 3
    mean = float(x.mean())
    if len(x) < 2:
        return mean, float("nan"), float("nan")
    sem = float(stats.sem(x))
    if sem == 0:
        return mean, mean, mean
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=mean, scale=sem)
    return mean, float(lo), float(hi)
