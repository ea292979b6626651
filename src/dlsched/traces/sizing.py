"""How a trace's GPU count becomes workers, architecture and (optionally) an elastic range.

One rule for every GPU-count trace keeps the adapters consistent:
- rigid (default): a 1-GPU job is `single`, a k-GPU job is `allreduce` with exactly k workers of
  one GPU each (data-parallel, the common case in Philly/ITP/Gavel).
- elastic: every job is `allreduce` with min_workers = 1 and max_workers = 2k (capped by `cap`,
  never below k). Doubling is a stated choice, not trace data: the traces record only the size a
  user asked for, and 2x gives elastic policies room to grow without inventing huge jobs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dlsched.core.job import JobSpec


def worker_columns(gpus: np.ndarray, elastic: bool, cap: np.ndarray | float | None = None) -> dict:
    """num_workers/arch/min_workers/max_workers columns for whole-GPU counts `gpus` (NaN-safe)."""
    n = np.nan_to_num(gpus, nan=1.0)
    if not elastic:
        arch = np.where(n == 1, "single", "allreduce").astype(object)
        return {"num_workers": n, "arch": arch, "min_workers": n, "max_workers": n}
    hi = 2 * n
    if cap is not None:
        hi = np.minimum(hi, cap)
    hi = np.maximum(hi, n)
    return {
        "num_workers": n,
        "arch": np.full(len(n), "allreduce", dtype=object),
        "min_workers": np.ones(len(n)),
        "max_workers": hi,
    }


def made_elastic(spec: "JobSpec") -> "JobSpec":
    """A loaded job with the elastic rule above applied (1..2k workers, all-reduce)."""
    from dataclasses import replace

    k = spec.num_workers
    return replace(spec, arch="allreduce", min_workers=1, max_workers=max(k, 2 * k))
