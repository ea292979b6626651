"""Ground-truth training-loss curves, so estimators (Optimus) fit observations, not the answer.

Each job's loss follows Optimus' model l(k) = 1/(b0*k + b1) + b2 with b1 = 1, a per-job floor b2,
and b0 chosen so that the job's true total work W is where the loss has come within EPSILON of its
floor: 1/(b0*W + 1) = EPSILON. An estimator that fits (b0, b1, b2) from the samples seen so far
predicts W = (1/EPSILON - b1)/b0. Noise is deterministic per (job, iteration).
"""

from __future__ import annotations

import zlib
from typing import Callable

EPSILON = 0.05


def loss_curve(job_id: str, iterations: float, seed: int, noise: float) -> Callable[[float], float]:
    """The job's loss at iteration k; the noise at k is crc32(f"{h}:{int(k)}") of the job's hash h.

    Evaluated 50 times per loss-curve fit (Optimus refits every running job as it progresses), so
    the CRC of the fixed prefix f"{h}:" is computed once and continued over the digits of int(k)
    (zlib's running CRC: the same value), and k is a Python float (NumPy scalars are slower).
    """
    h = zlib.crc32(f"{seed}:{job_id}".encode())
    floor = 0.05 + (h % 1000) / 1000 * 0.45
    b0 = (1.0 / EPSILON - 1.0) / iterations
    prefix = zlib.crc32(f"{h}:".encode())
    crc32 = zlib.crc32

    def loss(k: float) -> float:
        k = float(k)
        jitter = ((crc32(b"%d" % int(k), prefix) % 2001) / 1000.0 - 1.0) * noise
        return (1.0 / (b0 * k + 1.0) + floor) * (1.0 + jitter)

    return loss


def predicted_total(b0: float, b1: float) -> float:
    """Total iterations implied by fitted curve parameters under the same convergence rule."""
    return (1.0 / EPSILON - b1) / b0 if b0 > 0 else float("inf")
