"""Ground-truth training-loss curves, so estimators (Optimus) fit observations, not the answer.

Each job's loss follows Optimus' model l(k) = 1/(b0*k + b1) + b2 with b1 = 1, a per-job floor b2,
and b0 chosen so that the job's true total work W is where the loss has come within EPSILON of its
floor: 1/(b0*W + 1) = EPSILON. An estimator that fits (b0, b1, b2) from the samples seen so far
predicts W = (1/EPSILON - b1)/b0. Noise is deterministic per (job, iteration).
"""

from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np

from dlsched.core.compiled import kernel

EPSILON = 0.05


class LossCurve:
    """The job's loss at iteration k; the noise at k is crc32(f"{h}:{int(k)}") of the job's hash h.

    Evaluated 50 times per loss-curve fit (Optimus refits every running job as it progresses), so
    the CRC of the fixed prefix f"{h}:" is computed once and continued over the digits of int(k)
    (zlib's running CRC: the same value), and k is a Python float (NumPy scalars are slower).
    `sample_many` evaluates many curves at many points in one NumPy pass (the same numbers).
    """

    __slots__ = ("b0", "floor", "prefix", "noise")

    def __init__(self, job_id: str, iterations: float, seed: int, noise: float):
        h = zlib.crc32(f"{seed}:{job_id}".encode())
        self.floor = 0.05 + (h % 1000) / 1000 * 0.45
        self.b0 = (1.0 / EPSILON - 1.0) / iterations
        self.prefix = zlib.crc32(f"{h}:".encode())
        self.noise = noise

    def __call__(self, k: float) -> float:
        k = float(k)
        jitter = ((zlib.crc32(b"%d" % int(k), self.prefix) % 2001) / 1000.0 - 1.0) * self.noise
        return (1.0 / (self.b0 * k + 1.0) + self.floor) * (1.0 + jitter)

    @staticmethod
    def sample_many(curves: Sequence["LossCurve"], ks: np.ndarray) -> np.ndarray:
        """Row i: curve i at the iterations ks[i] (k ≥ 0, below 1e18), as `__call__` gives them."""
        ks = np.asarray(ks, dtype=float)
        col = np.array([[c.b0, c.floor, c.noise] for c in curves]).reshape(-1, 3, 1)
        prefix = np.array([c.prefix for c in curves], dtype=np.int64)  # CRC-32s: below 2**32
        compiled = kernel("dlsched.sim.convergence_compiled", "sample_many") if ks.ndim == 2 else None
        if compiled is not None:  # the same numbers (None without Numba)
            out = np.empty(ks.shape)
            compiled(col[:, 0, 0], col[:, 1, 0], col[:, 2, 0], prefix, ks, _CRC_TABLE_INT, out)
            return out
        crc = _crc_decimal(ks.astype(np.int64), prefix.astype(np.uint32)[:, None])
        jitter = ((crc % 2001) / 1000.0 - 1.0) * col[:, 2]
        return (1.0 / (col[:, 0] * ks + 1.0) + col[:, 1]) * (1.0 + jitter)


def _crc_table() -> np.ndarray:
    """zlib's CRC-32 byte table (reflected polynomial 0xEDB88320)."""
    c = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        c = np.where(c & 1, np.uint32(0xEDB88320) ^ (c >> 1), c >> 1)
    return c


_CRC_TABLE = _crc_table()
_CRC_TABLE_INT = _CRC_TABLE.astype(np.int64)  # the compiled sampler's copy


def _crc_decimal(n: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """zlib.crc32(b"%d" % n, prefix) of every n ≥ 0 (prefix broadcast against n): the CRC is
    continued over the decimal digits, most significant first, each number over its own digits."""
    digits = []  # (byte of digit j counted from the right, whether the number has one), j = 0, 1, ...
    rest, has = n, None
    while True:
        quot = rest // 10
        digits.append(((rest - quot * 10).astype(np.uint32) | np.uint32(0x30), has))
        if not quot.any():
            break
        rest, has = quot, quot > 0
    crc = np.broadcast_to(prefix ^ np.uint32(0xFFFFFFFF), n.shape).copy()  # contiguous: faster
    for byte, has in reversed(digits):
        nxt = np.take(_CRC_TABLE, (crc ^ byte) & np.uint32(0xFF)) ^ (crc >> np.uint32(8))
        crc = nxt if has is None else np.where(has, nxt, crc)
    return crc ^ np.uint32(0xFFFFFFFF)


def loss_curve(job_id: str, iterations: float, seed: int, noise: float) -> LossCurve:
    """The job's ground-truth loss curve (see `LossCurve`)."""
    return LossCurve(job_id, iterations, seed, noise)


def predicted_total(b0: float, b1: float) -> float:
    """Total iterations implied by fitted curve parameters under the same convergence rule."""
    return (1.0 / EPSILON - b1) / b0 if b0 > 0 else float("inf")
