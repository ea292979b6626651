"""`LossCurve.sample_many` compiled with Numba: the same numbers as its NumPy pass.

Why: Optimus samples every due job's simulated loss curve at 50 points per refit; the NumPy pass
(a CRC table look-up per decimal digit, over the whole batch) was ~3% of a full-Philly run. The
CRC is integer arithmetic (exact either way) and the loss is the same IEEE expression in the same
order, so the samples are the NumPy pass's bits (`tests/test_convergence_compiled.py`).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy", nogil=True)
def sample_many(b0, floor, noise, prefix, ks, table, out):
    """out[i, j] = curve i at ks[i, j] (`LossCurve.__call__`); b0, floor, noise, prefix: one per
    curve; table: zlib's CRC-32 byte table as int64."""
    digits = np.empty(24, dtype=np.int64)
    for b in range(ks.shape[0]):
        for j in range(ks.shape[1]):
            k = ks[b, j]
            m = np.int64(k)  # as `astype(np.int64)`: toward zero (k >= 0)
            nd = 0
            while True:  # the decimal digits of m, least significant first
                digits[nd] = m % 10
                nd += 1
                m //= 10
                if m == 0:
                    break
            crc = prefix[b] ^ 0xFFFFFFFF
            for d in range(nd - 1, -1, -1):  # zlib.crc32(b"%d" % m, prefix): most significant first
                crc = table[(crc ^ (0x30 | digits[d])) & 0xFF] ^ (crc >> 8)
            crc ^= 0xFFFFFFFF
            jitter = ((crc % 2001) / 1000.0 - 1.0) * noise[b]
            out[b, j] = (1.0 / (b0[b] * k + 1.0) + floor[b]) * (1.0 + jitter)
