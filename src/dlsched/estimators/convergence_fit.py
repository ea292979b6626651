"""Optimus' convergence model: fit the training-loss curve, read off the total work.

Loss after k iterations is modelled as l(k) = 1/(β0·k + β1) + β2 with β ≥ 0 (Optimus, EuroSys'18).
We fit it as Optimus' code does — weighted least squares with bounds β ≥ 0, the samples split
into 3 segments and later segments weighted more (Optimus calls `scipy.optimize.curve_fit`; our
solver is below) — and convert the fitted curve to a total
iteration count with a convergence rule: a job is done when its loss is within `epsilon` of its
floor, 1/(β0·k + β1) = epsilon, so total = (1/epsilon − β1)/β0.

`epsilon` is a parameter, default `EPSILON`. The default is an *assumption about real training
curves*, not a measured fact: it equals the value the simulator's synthetic ground truth uses
(`sim.convergence`), so in simulation the estimator shares the generator's definition of "done";
on a real trainer it is only as good as that assumption. This module imports nothing of the
simulator (a test checks the two values agree).

Decisions where Optimus is silent or that we changed (checked on 60 synthetic curves from
`sim.convergence.loss_curve`, 50 samples each):
- sigma is divided by 2 per segment, not Optimus' 4: with 4 the oldest third barely counts and the
  floor β2 is poorly pinned; 30% into a job (1% noise) the worst error was 7% with 4 vs 4% with 2.
- k is rescaled to [0, 1] before fitting (β0 ~ 1e-5 per iteration is badly conditioned otherwise).
- The solver (ours, not Optimus'): with s = 1/β1 and r = β0/β1 the curve is s/(1 + r·k) + β2,
  linear in s and β2, so for each r the best (s, β2) ≥ 0 is a 2×2 weighted least squares in
  closed form and only r is searched (variable projection): a vectorised grid over log r, a finer
  grid around the best point, then four bracketed steps on the profile's analytic derivative
  (which also try the point where the bound β2 ≥ 0 starts to bind). It finds the same minimum
  as the bounded `scipy.optimize.curve_fit` Optimus used (which needed a starting point and a
  previous fit to restart from) at 4-5× less cost per fit and from no starting point. On 1,200
  synthetic curves (0-3% noise, 0.1-100% progress) the totals agreed to a median 4e-9, worst 1.3e-4;
  on 2,312 fits from a 20,000-job Philly run to a median 6e-9, worst 6e-4 (a flat valley), and the
  weighted error was never higher, in 99 fits lower (the bounded solver had stopped short).
  The covariance is curve_fit's (pseudo-inverse of JᵀJ scaled by the residual variance).
- Many fits are solved together (`fit_many`: every step on a (fits, r, samples) array), each with
  row-wise sums only, so a fit's numbers do not depend on its batch; the range below is computed
  on first use of `low`/`high`. Against the one-at-a-time solver (BLAS dot products) totals agree
  to a median 1e-12 (rounding of the sums), worst 5e-4 (a flat valley); jobs.csv of Optimus on
  2k/5k/10k Philly jobs is byte-identical.
- A refit starts from the job's last fit (`fit_arrays(previous=...)`, as Optimus' code restarts
  `curve_fit` from it): the old curve says where the new error is lowest (r scales with the
  samples' k_max), and both grids are evaluated on 7 points around there instead of 45 and 17,
  the whole grid only when the window's best point is at its edge. A point's numbers are the
  same in a window as on the whole grid, so the fit is the whole grid's unless the error has a
  second valley, outside the window, at least as deep: on 42,939 refits of 20,000 Philly jobs
  the old curve's point was the best one in 93%, within 3 points in all but 72 (sent to the whole
  grid), and Optimus' jobs.csv is byte-identical on full Philly, ITP (raw, curves, elastic),
  drawn profiles and DL2's trace.
- The search runs compiled (`convergence_search`, Numba) for rows of up to 128 samples: the same
  operations in the same order, NumPy's pairwise sums written out and every 10**u computed by
  NumPy, so its fits are `_search_numpy`'s bit for bit (tests compare them on random and
  degenerate rows); 6-8x faster per batch, the NumPy search still serves longer rows and a
  machine without Numba.
- The uncertainty is a 99% interval of the total under the fit's parameter covariance (Monte Carlo
  draws, fixed seed, so it is deterministic), widened to at least ±1% of the estimate so that a
  noise-free curve does not get an interval of zero width. It held the truth in 60 of 60 curves at
  10%, 30%, 50% and 90% progress, with 1% noise (worst point error 9%, 4%, 3%, 4%) and with 3%
  noise (29%, 12%, 11%, 15%).
- A fit is refused (None) when the samples show no clear decrease (see `fit_convergence`): the
  caller then falls back, as Optimus' code does when its fit fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Sequence

import numpy as np

from dlsched.core.compiled import kernel

#: Assumed convergence threshold of real training curves: done when the loss is within EPSILON of
#: its floor. Same value as the simulator's ground truth, so simulated results match that rule.
EPSILON = 0.05
#: Fewer samples than this cannot pin three parameters against noise.
MIN_SAMPLES = 6
SEGMENTS = 3
SEGMENT_WEIGHT = 2.0  # each later segment's sigma is divided by this
LEVEL = 0.99
MIN_REL_HALF_WIDTH = 0.01
MIN_DROP_VS_NOISE = 10.0
MIN_DROP = 1e-3
_DRAWS = 400
#: log10 r searched: r = β0·k_max/β1 below 1e-4 is a curve flatter than MIN_DROP (refused anyway);
#: above 1e7, β1 is below 1e-7·β0·k_max, i.e. the bound β1 = 0 to within rounding of any total.
_LOG_R = np.linspace(-4.0, 7.0, 45)
_STEP = float(_LOG_R[1] - _LOG_R[0])
#: Grid points evaluated around a refit's expected best point (`_profile_near`): on 42,939 refits
#: of a 20,000-job Philly run the coarse grid's best point was the expected one in 93% and within
#: ±3 in all but 72 (0.2%, which the edge rule sends to the whole grid).
_WINDOW = 7
_FINE = 17  # points of the second grid, over the two coarse steps around the best one
_POLISH = 4  # bracketed derivative steps: totals to ~1e-9 of the exact minimum
#: Fits solved together at most: a (fits, 45, samples) array of many more rows outgrows the CPU
#: caches (2,000 fits asked 200 at a time: 0.23 CPU-s in one batch each, 0.155 in chunks of 64;
#: asked 64 at a time, chunks of 32 gained nothing).
_CHUNK = 64
_LN10 = math.log(10.0)
_normals_by_seed: dict[int, np.ndarray] = {}


@dataclass(frozen=True)
class ConvergenceFit:
    """A fitted loss curve (β0 per iteration) and the total iterations it implies, with a range.

    The range (`low`, `high`) is computed on first use: it costs a covariance and 400 draws, and a
    policy that only ranks jobs by their remaining work (Optimus) never reads it.
    """

    b0: float
    b1: float
    b2: float
    total: float
    samples: int
    _basis: tuple = field(repr=False, compare=False)  # what `_range` needs (see `_fit_group`)

    def loss(self, k: float) -> float:
        return 1.0 / (self.b0 * k + self.b1) + self.b2

    @property
    def low(self) -> float:
        return self._range[0]

    @property
    def high(self) -> float:
        return self._range[1]

    @cached_property
    def _range(self) -> tuple[float, float]:
        x, sigma, loss, fitted, popt, k_max, seed, epsilon = self._basis
        pcov = _covariance(x, sigma, popt, (fitted - loss) / sigma)
        return _interval(popt, pcov, k_max, self.total, seed, epsilon)


def _curve(x: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The curve at rescaled x, one row per fit (a, b, c: one value per row)."""
    return 1.0 / (a[:, None] * x + b[:, None]) + c[:, None]


def _totals(a: np.ndarray, b: np.ndarray, k_max: np.ndarray | float, epsilon: float) -> np.ndarray:
    """Vectorised total = (1/epsilon − β1)/β0 (β0 = a / k_max after the rescaling of k)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a > 0, (1.0 / epsilon - b) * k_max / a, np.inf)


def segment_sigma(n: int, segments: int = SEGMENTS, weight: float = SEGMENT_WEIGHT) -> np.ndarray:
    """Optimus' weighting: samples (in time order) split into segments, sigma /= weight**segment."""
    seg = np.minimum((np.arange(n) * segments) // max(n, 1), segments - 1)
    return 1.0 / weight**seg


def _rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise dot products over the last axis of a (B, R, n) with b (n,) or (B, n), as an
    elementwise product summed per row (NumPy's pairwise sum): a fit's numbers then depend neither
    on the other fits of its batch nor on where its arrays sit in memory (BLAS kernels may)."""
    return (a * (b if b.ndim == 1 else b[:, None, :])).sum(axis=-1)


def _profile(x: np.ndarray, y: np.ndarray, wt: np.ndarray, u: np.ndarray, grad: bool = True) -> tuple[np.ndarray, ...]:
    """For B fits (rows of x, y) and each of their log10 r (rows of u, shape (B, R)) at once: the
    best s, β2 ≥ 0 of y ≈ s/(1 + r·x) + β2 (weights `wt`), its weighted squared error, the error's
    derivative in u (None without `grad`: the coarse grid reads only the error), and β2 without
    its bound (whose sign change marks where the bound binds).

    The derivative needs no derivative of (s, β2): they minimise the error, so only r's own term
    is left (envelope theorem), on both sides of the bound. Every number is computed row by row
    (elementwise, then a sum along the samples), so computing some of them only where they are
    read (the bound's two candidates, only at points where the free solution is out of bounds)
    gives the same bits as computing them everywhere.
    """
    # the (B, R, n) products are written into reused buffers (`out=`, in place): the same
    # operations in the same order, so the same bits, with fewer large temporaries
    r = 10.0 ** u
    g = r[:, :, None] * x[:, None, :]
    g += 1.0
    np.divide(1.0, g, out=g)  # g = 1 / (1 + r·x)
    gw = g * wt
    y3 = y[:, None, :]
    sw, sy = wt.sum(), (y * wt).sum(axis=-1)[:, None]
    tmp = gw * g
    sg, sgg = gw.sum(axis=-1), tmp.sum(axis=-1)
    sgy = np.multiply(gw, y3, out=tmp).sum(axis=-1)  # `_rows(gw, y)`
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        det = sw * sgg - sg * sg
        s = (sw * sgy - sg * sy) / det
        c_free = (sgg * sy - sg * sgy) / det
        c = c_free
        out = ~((s >= 0) & (c >= 0) & (det > 0))
        if out.any():  # the best point is on a bound: β2 = 0, or s = 0 (a flat line, refused later)
            s0 = np.maximum(sgy / sgg, 0.0)
            c1 = np.maximum(sy / sw, 0.0)
            bi, ri = np.nonzero(out)  # only there: elsewhere the choice is not read
            yb = y[bi]
            use_s0 = np.zeros(out.shape, dtype=bool)
            use_s0[bi, ri] = (((g[bi, ri] * s0[bi, ri][:, None] - yb) ** 2) * wt).sum(axis=-1) \
                <= ((c1 - y) ** 2 * wt).sum(axis=-1)[bi]
            s = np.where(out, np.where(use_s0, s0, 0.0), s)
            c = np.where(out, np.where(use_s0, 0.0, c1), c)
    res = g * s[:, :, None]
    res += c[:, :, None]
    res -= y3  # g·s + β2 − y
    np.multiply(res, res, out=tmp)
    cost = np.multiply(tmp, wt, out=tmp).sum(axis=-1)  # `_rows(res * res, wt)`
    slope = None
    if grad:  # `_rows(res * g * g, wt * x)`
        np.multiply(res, g, out=tmp)
        tmp *= g
        tmp *= (wt * x)[:, None, :]
        slope = -2.0 * _LN10 * r * s * tmp.sum(axis=-1)
    return s, c, cost, slope, c_free


def _pick(arrays: tuple[np.ndarray, ...], j: np.ndarray) -> list[np.ndarray]:
    """Column j[i] of row i of each (B, R) array."""
    rows = np.arange(len(j))
    return [a[rows, j] for a in arrays]


def _profile_near(x: np.ndarray, y: np.ndarray, wt: np.ndarray, u: np.ndarray, centre: np.ndarray | None,
                  grad: bool) -> tuple[np.ndarray, ...]:
    """`_profile` on each row's grid u (B, R), where a row's best point is expected near column
    `centre` (fractional; NaN or None: unknown) evaluated only at the `_WINDOW` columns around it:
    the other columns get cost inf (never the best) and NaN. A row whose best evaluated point is
    at its window's edge (the valley may go on past it) is evaluated on its whole grid.

    Each point's numbers are computed row by row (`_profile`), so a point has the same bits in a
    window as on the whole grid, and a row's best point is the whole grid's unless a point outside
    its window is at least as low as the window's inner minimum: a second, deeper valley.
    """
    if centre is None or not np.isfinite(centre).any():
        return _profile(x, y, wt, u, grad)
    rows, width = u.shape
    out = [np.full((rows, width), np.inf if i == 2 else np.nan) for i in range(5)]
    hinted = np.flatnonzero(np.isfinite(centre))
    lo = np.clip(np.rint(centre[hinted]) - _WINDOW // 2, 0, width - _WINDOW).astype(np.intp)
    cols = lo[:, None] + np.arange(_WINDOW)
    got = _profile(x[hinted], y[hinted], wt, u[hinted[:, None], cols], grad)
    jl = np.argmin(got[2], axis=1)
    inside = ~(((jl == 0) & (lo > 0)) | ((jl == _WINDOW - 1) & (lo < width - _WINDOW)))
    at = (hinted[inside][:, None], cols[inside])
    for whole, part in zip(out, got):
        if part is not None:
            whole[at] = part[inside]
    rest = np.ones(rows, dtype=bool)
    rest[hinted[inside]] = False
    rest = np.flatnonzero(rest)
    if rest.size:
        for whole, part in zip(out, _profile(x[rest], y[rest], wt, u[rest], grad)):
            if part is not None:
                whole[rest] = part
    if not grad:
        out[3] = None
    return tuple(out)


def _search(x: np.ndarray, y: np.ndarray, wt: np.ndarray,
            near: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_search_numpy`, compiled (`convergence_search`: the same bits) where it can run."""
    compiled = kernel("dlsched.estimators.convergence_search", "search")  # None without Numba
    got = compiled(x, y, wt, near, _LOG_R, _FINE, _WINDOW, _POLISH) if compiled is not None else None
    return got if got is not None else _search_numpy(x, y, wt, near)


def _search_numpy(x: np.ndarray, y: np.ndarray, wt: np.ndarray,
                  near: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log10 r, s, β2) of each row's least-squares curve: grid, finer grid, then Illinois steps on
    the derivative within the bracket, each also trying the bound's kink when it lies in the bracket.
    All rows step together; a row whose search ends early keeps its result (masks, not branches).
    `near`: log10 r where a refit's best point is expected (NaN: unknown); both grids are then
    evaluated around it only (`_profile_near`)."""
    u = np.broadcast_to(_LOG_R, (len(x), len(_LOG_R)))
    centre = None if near is None else (near - _LOG_R[0]) / _STEP
    s, c, cost, _, _ = _profile_near(x, y, wt, u, centre, grad=False)
    j = np.argmin(cost, axis=1)
    best_u, best_s, best_c = _pick((u, s, c), j)
    inner = np.flatnonzero((j > 0) & (j < len(_LOG_R) - 1))  # else flat (refused) or β1 at its bound 0
    if not inner.size:
        return best_u, best_s, best_c
    x, y, j = x[inner], y[inner], j[inner]
    u = np.linspace(_LOG_R[j - 1], _LOG_R[j + 1], _FINE, axis=1)
    centre = None if near is None else (near[inner] - u[:, 0]) / (u[:, 1] - u[:, 0])
    s, c, cost, grad, cf = _profile_near(x, y, wt, u, centre, grad=True)
    j = np.argmin(cost, axis=1)
    cost_j, u_j, s_j, c_j, grad_j = _pick((cost, u, s, c, grad), j)
    lo = np.where(grad_j > 0, j - 1, j)
    hi = lo + 1
    ok = (lo >= 0) & (hi < _FINE)
    lo, hi = np.clip(lo, 0, _FINE - 1), np.clip(hi, 0, _FINE - 1)
    a, ga, ca = _pick((u, grad, cf), lo)
    b, gb, cb = _pick((u, grad, cf), hi)
    ok &= (ga <= 0) & (0 < gb)
    best = [cost_j, u_j, s_j, c_j]
    pol = np.flatnonzero(ok)
    if pol.size:
        best = [v.copy() for v in best]
        best[0][pol], best[1][pol], best[2][pol], best[3][pol] = _polish(
            x[pol], y[pol], wt, [v[pol] for v in best], a[pol], ga[pol], ca[pol], b[pol], gb[pol], cb[pol])
    best_u[inner], best_s[inner], best_c[inner] = best[1], best[2], best[3]
    return best_u, best_s, best_c


def _polish(x, y, wt, best, a, ga, ca, b, gb, cb) -> tuple[np.ndarray, ...]:
    """`_POLISH` bracketed steps: a secant (Illinois) point and, where β2's bound changes sides
    within the bracket, its kink; each point narrows the bracket; the lowest error seen wins."""
    cost_b, u_b, s_b, c_b = best
    side = np.zeros(len(a), dtype=int)
    rows = np.arange(len(a))
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(_POLISH):
            v1 = a - ga * (b - a) / (gb - ga)
            kink = (ca < 0) != (cb < 0)  # the kink: past it the profile is smooth again
            v = np.stack([v1, np.where(kink, a - ca * (b - a) / (cb - ca), v1)], axis=1)
            sv, cv, costv, gv, cfv = _profile(x, y, wt, v)
            i = np.argmin(costv, axis=1)  # a repeated v1 ties and loses to the first
            better = costv[rows, i] <= cost_b
            cost_b, u_b, s_b, c_b = (np.where(better, new[rows, i], old) for new, old in
                                     ((costv, cost_b), (v, u_b), (sv, s_b), (cv, c_b)))
            moved = np.zeros(len(a), dtype=int)
            for k in range(2):  # every point narrows the bracket (a repeated v1 changes nothing)
                vk, gk, ck = v[:, k], gv[:, k], cfv[:, k]
                to_b = (gk > 0) & (vk < b)
                to_a = ~to_b & (gk <= 0) & (vk > a)
                b, gb, cb = np.where(to_b, vk, b), np.where(to_b, gk, gb), np.where(to_b, ck, cb)
                a, ga, ca = np.where(to_a, vk, a), np.where(to_a, gk, ga), np.where(to_a, ck, ca)
                moved |= to_b * 1 | to_a * 2
            # Illinois: halve the stale end's value when the same end moves twice
            ga = np.where((moved == 1) & (side == 1), ga * 0.5, ga)
            gb = np.where((moved == 2) & (side == 2), gb * 0.5, gb)
            side = np.where(moved == 1, 1, np.where(moved == 2, 2, 0))
    return cost_b, u_b, s_b, c_b


def _covariance(x: np.ndarray, sigma: np.ndarray, popt: np.ndarray, residuals: np.ndarray) -> np.ndarray:
    """`curve_fit`'s covariance: pseudo-inverse of JᵀJ (SVD, tiny singular values dropped) times the
    residual variance; all inf when it cannot be estimated."""
    a, b, _ = popt
    d = -1.0 / (a * x + b) ** 2
    jac = np.stack([d * x, d, np.ones_like(x)], axis=1) / sigma[:, None]
    _, sv, vt = np.linalg.svd(jac, full_matrices=False)
    keep = sv > np.finfo(float).eps * max(jac.shape) * sv[0]
    sv, vt = sv[keep], vt[keep]
    pcov = (vt.T / sv**2) @ vt * (float(residuals @ residuals) / (len(x) - len(popt)))
    return np.full((3, 3), np.inf) if np.isnan(pcov).any() else pcov


def fit_convergence(
    samples: Sequence[tuple[float, float]], seed: int = 0, epsilon: float = EPSILON,
) -> ConvergenceFit | None:
    """Fit l(k) to (iteration, loss) samples; None when there are too few or the fit is useless.

    Useless means: the fitted curve is flat — β0 = 0 (it never converges) or β1 ≥ 1/epsilon
    (already within epsilon of its floor at k = 0, so total ≤ 0); or the loss has not clearly
    dropped over the samples (fitted drop < 10× the residual scatter, or < 0.1%), when any total
    would be an extrapolation from noise (e.g. 0.1% into a job with 1% noise).

    `epsilon`: the convergence threshold (see the module docstring), 0 < epsilon < 1.
    """
    return fit_many([samples], seed, epsilon)[0]


def fit_many(
    sample_sets: Sequence[Sequence[tuple[float, float]]], seed: int = 0, epsilon: float = EPSILON,
) -> list[ConvergenceFit | None]:
    """`fit_convergence` of each sample set, the sets with the same number of samples solved
    together (a scheduler refits many jobs at one slot: one NumPy pass instead of one per job).
    Each fit's numbers are the same as alone (row-wise arithmetic only)."""
    rows: list[tuple[np.ndarray, np.ndarray] | None] = []
    for samples in sample_sets:
        arr = np.asarray(sorted(samples), dtype=float) if len(samples) >= MIN_SAMPLES else None
        rows.append(None if arr is None else (arr[:, 0], arr[:, 1]))
    return fit_arrays(rows, seed, epsilon)


def fit_arrays(
    rows: Sequence[tuple[np.ndarray, np.ndarray] | None], seed: int = 0, epsilon: float = EPSILON,
    previous: Sequence[ConvergenceFit | None] | None = None,
) -> list[ConvergenceFit | None]:
    """`fit_many` of samples given as (iterations, losses) arrays (None: no samples), e.g.
    `observed_loss_arrays`: the same fits without building and sorting (iteration, loss) pairs.
    Rows whose iterations do not strictly ascend are sorted as `sorted` sorts the pairs.

    `previous`: each row's last fit of the same job (None if none), for a refit: its curve says
    where the new fit's coarse grid has its best point, and only the points around it are
    evaluated (`_profile_near`: the same fit unless the error has a second, deeper valley away from
    the old curve). Optimus' code, too, starts each refit from the previous fit."""
    if not 0.0 < epsilon < 1.0:
        raise ValueError(f"epsilon must be in (0, 1), got {epsilon}")
    out: list[ConvergenceFit | None] = [None] * len(rows)
    by_length: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        if row is not None and len(row[0]) >= MIN_SAMPLES:
            by_length.setdefault(len(row[0]), []).append(i)
    for idx in by_length.values():  # each check on all rows of a length at once (a slot's refits)
        k = np.stack([rows[i][0] for i in idx]).astype(float, copy=False)
        loss = np.stack([rows[i][1] for i in idx]).astype(float, copy=False)
        for r in np.flatnonzero(~(k[:, 1:] > k[:, :-1]).all(axis=1)).tolist():
            order = np.lexsort((loss[r], k[r]))  # as `sorted` sorts the (iteration, loss) pairs
            k[r], loss[r] = k[r][order], loss[r][order]
        keep = np.flatnonzero((k[:, -1] > 0) & np.isfinite(k).all(axis=1) & np.isfinite(loss).all(axis=1))
        if previous is None:
            near = np.full(len(keep), np.nan)
        else:
            near = np.array([_expected_log_r(previous[idx[r]], float(k[r, -1])) for r in keep.tolist()])
        for lo in range(0, len(keep), _CHUNK):
            part = keep[lo:lo + _CHUNK]
            fits = _fit_group(k[part], loss[part], seed, epsilon, near[lo:lo + _CHUNK])
            for r, fit in zip(part.tolist(), fits):
                out[idx[r]] = fit
    return out


def _expected_log_r(prev: ConvergenceFit | None, k_max: float) -> float:
    """log10 r of the previous fit's curve on samples rescaled by `k_max` (r = β0·k_max/β1),
    NaN without a usable previous fit."""
    if prev is None or not (prev.b0 > 0 and prev.b1 > 0):
        return math.nan
    r = prev.b0 * k_max / prev.b1
    return math.log10(r) if r > 0 and math.isfinite(r) else math.nan


def _fit_group(k: np.ndarray, loss: np.ndarray, seed: int, epsilon: float,
               near: np.ndarray | None = None) -> list[ConvergenceFit | None]:
    """Fits of B sample sets of n samples each (rows of k, loss; k ascending); `near`: see `_search`."""
    k_max = k[:, -1]
    x = k / k_max[:, None]
    sigma = segment_sigma(k.shape[1])
    log_r, s, c = _search(x, loss, 1.0 / sigma**2, near)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        b = 1.0 / s
        a = 10.0 ** log_r * b
        total = _totals(a, b, k_max, epsilon)
        fitted = _curve(x, a, b, c)
        drop = (fitted[:, 0] - fitted[:, -1]) / fitted[:, -1]
        scatter = np.std(loss / fitted - 1.0, axis=1)
    # refused: the best curve is a flat line (s = 0), or b1 ≥ 1/ε (flat from the start), or no
    # clear drop against the scatter
    good = (s > 0) & (a > 0) & np.isfinite(total) & (total > 0) & (drop > np.maximum(MIN_DROP_VS_NOISE * scatter, MIN_DROP))
    popt = np.stack([a, b, c], axis=1)
    b0, n = (a / k_max).tolist(), k.shape[1]
    b1, b2, tot, kmx = b.tolist(), c.tolist(), total.tolist(), k_max.tolist()
    return [ConvergenceFit(b0[i], b1[i], b2[i], tot[i], n,
                           (x[i], sigma, loss[i], fitted[i], popt[i], kmx[i], seed, epsilon))
            if ok else None for i, ok in enumerate(good.tolist())]


def _standard_normals(seed: int) -> np.ndarray:
    """The (_DRAWS, 3) standard normals `default_rng(seed)` draws first: the same for every fit,
    so drawn once per seed instead of once per fit."""
    z = _normals_by_seed.get(seed)
    if z is None:
        z = _normals_by_seed[seed] = np.random.default_rng(seed).standard_normal((_DRAWS, 3))
    return z


def _interval(popt: np.ndarray, pcov: np.ndarray, k_max: float, total: float, seed: int,
              epsilon: float) -> tuple[float, float]:
    """LEVEL interval of the implied total under the fit covariance (inf-high if it is unusable).

    The draws are bit-for-bit `default_rng(seed).multivariate_normal(popt, pcov, _DRAWS)`: NumPy's
    SVD factor u·sqrt(s) applied to the seed's standard normals.
    """
    pad = MIN_REL_HALF_WIDTH * total
    if not np.all(np.isfinite(pcov)):
        return max(0.0, total - pad), math.inf
    try:
        u, s, _ = np.linalg.svd(pcov)
    except np.linalg.LinAlgError:
        return max(0.0, total - pad), math.inf
    draws = np.clip(popt + _standard_normals(seed) @ (u * np.sqrt(s)).T, 0.0, None)
    tots = _totals(draws[:, 0], draws[:, 1], k_max, epsilon)
    tots = np.sort(np.where(np.isnan(tots), np.inf, tots))
    q = (1.0 - LEVEL) / 2.0
    lo = tots[int(math.floor(q * (len(tots) - 1)))]  # order statistics: no inf - inf interpolation
    hi = tots[int(math.ceil((1.0 - q) * (len(tots) - 1)))]
    return max(0.0, min(float(lo), total - pad)), max(float(hi), total + pad)
