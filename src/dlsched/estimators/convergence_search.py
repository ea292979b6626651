"""The loss-curve fit's search (`convergence_fit._search`) compiled with Numba, bit for bit.

Why: a scheduler that refits every running job's loss curve each slot (Optimus on 20,000 Philly
jobs: over 40,000 fits in 2,021 batches) spent a quarter of its run fitting, most of it in this
search, and most of that in NumPy's orchestration of small arrays (several hundred NumPy calls
per batch of ~30 fits), not in arithmetic. Here each fit is one compiled loop over its grid
points and samples.

Same bits as the NumPy search, by construction (checked by tests on random rows, and by
Optimus' jobs.csv on real traces, docs/DECISIONS.md):
- every number is computed with the same IEEE operations in the same order as `_profile`;
- every row-wise sum is NumPy's pairwise sum (`np.add.reduce` over a contiguous axis: one running
  sum below 8 terms, eight interleaved ones up to 128, added to the identity 0.0), written out —
  rows of more than 128 samples are left to the NumPy search (`search` returns None);
- 10**u is never computed here: NumPy's `power` (SIMD on AVX-512 machines) and the C library's
  `pow`, which compiled code calls, differ in the last bit for ~5% of arguments. The grids' r
  are tables NumPy computes once (the fine grid has one row per coarse point), and each polish
  step's two points go back to NumPy for their r: four round trips per batch;
- `np.argmin`'s rule (the first NaN, else the first minimum) and `np.maximum`'s NaN.

This module imports Numba; `convergence_fit` imports it on its first fit, and without Numba (a
platform with no wheel) runs the NumPy search, which gives the same fits. The kernels are compiled
on first use and cached beside this file (Numba's `cache=True`): seconds once per machine.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

#: Longest row the compiled sums cover (NumPy's pairwise sum splits longer ones recursively).
MAX_SAMPLES = 128
_K2 = -2.0 * math.log(10.0)  # `_profile`'s slope factor, -2·ln 10, as NumPy's code computes it
_jit = njit(cache=True, error_model="numpy", nogil=True)


def search(x: np.ndarray, y: np.ndarray, wt: np.ndarray, near: np.ndarray | None, log_r: np.ndarray,
           fine: int, window: int, polish: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """`convergence_fit._search(x, y, wt, near)` (same arguments; the grid and its constants
    passed in), or None for rows longer than MAX_SAMPLES (the NumPy search's to do)."""
    if x.shape[1] > MAX_SAMPLES:
        return None
    x = np.ascontiguousarray(x, dtype=float)
    y = np.ascontiguousarray(y, dtype=float)
    wt = np.ascontiguousarray(wt, dtype=float)
    rows = len(x)
    near = np.full(rows, np.nan) if near is None else np.ascontiguousarray(near, dtype=float)
    r_coarse, u_fine, r_fine = _tables(log_r, fine)
    best = np.empty((4, rows))  # cost, log10 r, s, β2 of each row's best point so far
    bracket = np.empty((6, rows))  # a, g(a), β2-free(a), b, g(b), β2-free(b) of the polish
    side = np.zeros(rows, dtype=np.int64)
    ok = np.zeros(rows, dtype=np.bool_)
    _grids(x, y, wt, near, log_r, r_coarse, u_fine, r_fine, window, best, bracket, ok)
    if ok.any():
        v = np.empty((rows, 2))
        for _ in range(polish):
            _points(bracket, ok, v)
            _step(x, y, wt, v, 10.0 ** v, ok, best, bracket, side)
    return best[1], best[2], best[3]


_table_cache: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def _tables(log_r: np.ndarray, fine: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """10**u of the coarse grid, and the fine grid of each interior coarse point j (row j - 1:
    `np.linspace(log_r[j - 1], log_r[j + 1], fine)`, as `_search` builds it) with its 10**u."""
    key = (log_r.tobytes(), fine)
    got = _table_cache.get(key)
    if got is None:
        u_fine = np.linspace(log_r[:-2], log_r[2:], fine, axis=1)
        got = _table_cache[key] = (10.0 ** log_r, u_fine, 10.0 ** u_fine)
    return got


@_jit
def _psum(t, n):
    """NumPy's pairwise sum of t[:n], n <= 128, added to the identity as `np.add.reduce` does."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += t[i]
        return res
    r0, r1, r2, r3, r4, r5, r6, r7 = t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]
    i = 8
    end = n - n % 8
    while i < end:
        r0 += t[i]
        r1 += t[i + 1]
        r2 += t[i + 2]
        r3 += t[i + 3]
        r4 += t[i + 4]
        r5 += t[i + 5]
        r6 += t[i + 6]
        r7 += t[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += t[i]
        i += 1
    return 0.0 + res


@_jit
def _npmax(a, b):  # np.maximum: NaN wins
    return a if (a >= b or a != a) else b


@_jit
def _argmin(v, lo, hi):  # np.argmin over v[lo:hi]: the first NaN, else the first minimum
    best = lo
    for i in range(lo, hi):
        if v[i] != v[i]:
            return i
        if v[i] < v[best]:
            best = i
    return best


@_jit
def _point(x, y, wt, b, rr, sw, sy, grad, g, e, t, out, j):
    """`_profile` at one point (row b, r = rr) into out[:, j]: s, β2, cost, slope, β2 free."""
    n = x.shape[1]
    for i in range(n):
        g[i] = 1.0 / (rr * x[b, i] + 1.0)
    for i in range(n):
        t[i] = g[i] * wt[i]
    sg = _psum(t, n)
    for i in range(n):
        e[i] = (g[i] * wt[i]) * g[i]
    sgg = _psum(e, n)
    for i in range(n):
        e[i] = t[i] * y[b, i]
    sgy = _psum(e, n)
    det = sw * sgg - sg * sg
    s = (sw * sgy - sg * sy) / det
    cfree = (sgg * sy - sg * sgy) / det
    c = cfree
    if not ((s >= 0) and (c >= 0) and (det > 0)):
        s0 = _npmax(sgy / sgg, 0.0)
        c1 = _npmax(sy / sw, 0.0)
        for i in range(n):
            d = g[i] * s0 - y[b, i]
            e[i] = (d * d) * wt[i]
        e0 = _psum(e, n)
        for i in range(n):
            d = c1 - y[b, i]
            e[i] = (d * d) * wt[i]
        if e0 <= _psum(e, n):
            s, c = s0, 0.0
        else:
            s, c = 0.0, c1
    for i in range(n):
        d = g[i] * s
        d += c
        d -= y[b, i]
        t[i] = d  # the residual, kept for the slope
        e[i] = (d * d) * wt[i]
    out[0, j], out[1, j], out[2, j], out[4, j] = s, c, _psum(e, n), cfree
    out[3, j] = np.nan
    if grad:
        for i in range(n):
            e[i] = ((t[i] * g[i]) * g[i]) * (wt[i] * x[b, i])
        out[3, j] = ((_K2 * rr) * s) * _psum(e, n)


@_jit
def _near_grid(x, y, wt, b, rvals, centre, window, grad, sw, sy, g, e, t, out):
    """`_profile_near` of row b on a grid (r values `rvals`): the `window` points around
    `centre` (NaN: none), or the whole grid when the window's best is at its edge."""
    width = rvals.shape[0]
    for j in range(width):
        out[0, j], out[1, j], out[2, j], out[3, j], out[4, j] = np.nan, np.nan, np.inf, np.nan, np.nan
    if centre == centre and abs(centre) < np.inf:
        lo = int(min(max(np.rint(centre) - window // 2, 0.0), float(width - window)))
        for j in range(lo, lo + window):
            _point(x, y, wt, b, rvals[j], sw, sy, grad, g, e, t, out, j)
        jl = _argmin(out[2], lo, lo + window) - lo
        if not ((jl == 0 and lo > 0) or (jl == window - 1 and lo < width - window)):
            return
    for j in range(width):
        _point(x, y, wt, b, rvals[j], sw, sy, grad, g, e, t, out, j)


@_jit
def _grids(x, y, wt, near, log_r, r_coarse, u_fine, r_fine, window, best, bracket, ok):
    """`_search` up to the polish: the coarse grid, the fine grid, the polish's bracket."""
    rows, n = x.shape
    g, e, t = np.empty(n), np.empty(n), np.empty(n)
    coarse, nf = log_r.shape[0], u_fine.shape[1]
    out_c, out_f = np.empty((5, coarse)), np.empty((5, nf))
    sw = _psum(wt, n)
    step = log_r[1] - log_r[0]
    for b in range(rows):
        for i in range(n):
            e[i] = y[b, i] * wt[i]
        sy = _psum(e, n)
        centre = (near[b] - log_r[0]) / step
        _near_grid(x, y, wt, b, r_coarse, centre, window, False, sw, sy, g, e, t, out_c)
        j = _argmin(out_c[2], 0, coarse)
        best[0, b], best[1, b], best[2, b], best[3, b] = np.nan, log_r[j], out_c[0, j], out_c[1, j]
        ok[b] = False
        if not (0 < j < coarse - 1):
            continue
        u = u_fine[j - 1]
        centre = (near[b] - u[0]) / (u[1] - u[0])
        _near_grid(x, y, wt, b, r_fine[j - 1], centre, window, True, sw, sy, g, e, t, out_f)
        j = _argmin(out_f[2], 0, nf)
        best[0, b], best[1, b], best[2, b], best[3, b] = out_f[2, j], u[j], out_f[0, j], out_f[1, j]
        lo = j - 1 if out_f[3, j] > 0 else j
        hi = lo + 1
        if lo < 0 or hi >= nf:
            continue
        bracket[0, b], bracket[1, b], bracket[2, b] = u[lo], out_f[3, lo], out_f[4, lo]
        bracket[3, b], bracket[4, b], bracket[5, b] = u[hi], out_f[3, hi], out_f[4, hi]
        ok[b] = (bracket[1, b] <= 0) and (0 < bracket[4, b])


@_jit
def _points(bracket, ok, v):
    """The polish step's two points per row: the secant (Illinois) point and, where β2's bound
    changes sides within the bracket, its kink (else the secant point again)."""
    for b in range(bracket.shape[1]):
        if not ok[b]:
            v[b, 0] = v[b, 1] = 0.0
            continue
        a, ga, ca = bracket[0, b], bracket[1, b], bracket[2, b]
        bb, gb, cb = bracket[3, b], bracket[4, b], bracket[5, b]
        v1 = a - ga * (bb - a) / (gb - ga)
        v[b, 0] = v1
        v[b, 1] = a - ca * (bb - a) / (cb - ca) if (ca < 0) != (cb < 0) else v1


@_jit
def _step(x, y, wt, v, r, ok, best, bracket, side):
    """One `_polish` step of each row at its points v (r = 10**v): keep the lowest error,
    narrow the bracket by each point, Illinois-halve a stale end."""
    rows, n = x.shape
    g, e, t = np.empty(n), np.empty(n), np.empty(n)
    out = np.empty((5, 2))
    sw = _psum(wt, n)
    for b in range(rows):
        if not ok[b]:
            continue
        for i in range(n):
            e[i] = y[b, i] * wt[i]
        sy = _psum(e, n)
        for k in range(2):
            _point(x, y, wt, b, r[b, k], sw, sy, True, g, e, t, out, k)
        i = _argmin(out[2], 0, 2)
        if out[2, i] <= best[0, b]:
            best[0, b], best[1, b], best[2, b], best[3, b] = out[2, i], v[b, i], out[0, i], out[1, i]
        moved = 0
        for k in range(2):
            vk, gk, ck = v[b, k], out[3, k], out[4, k]
            to_b = gk > 0 and vk < bracket[3, b]
            to_a = (not to_b) and gk <= 0 and vk > bracket[0, b]
            if to_b:
                bracket[3, b], bracket[4, b], bracket[5, b] = vk, gk, ck
                moved |= 1
            if to_a:
                bracket[0, b], bracket[1, b], bracket[2, b] = vk, gk, ck
                moved |= 2
        if moved == 1 and side[b] == 1:
            bracket[1, b] = bracket[1, b] * 0.5
        if moved == 2 and side[b] == 2:
            bracket[4, b] = bracket[4, b] * 0.5
        side[b] = 1 if moved == 1 else (2 if moved == 2 else 0)

