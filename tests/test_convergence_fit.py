"""The convergence fit's own solver (variable projection over r = β0/β1): it recovers known curves,
finds the bound-constrained minimum (floor β2 = 0) the bounded solver found, keeps the covariance
draws identical to NumPy's multivariate normal, and refuses what it cannot fit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlsched.estimators import convergence_fit as cf
from dlsched.estimators.convergence_fit import fit_convergence, segment_sigma


def _samples(b0: float, b1: float, b2: float, k_max: float, noise: float = 0.0, n: int = 50,
             seed: int = 0) -> list[tuple[float, float]]:
    rng = np.random.default_rng(seed)
    ks = np.linspace(k_max / n, k_max, n)
    return [(float(k), (1.0 / (b0 * k + b1) + b2) * (1.0 + noise * rng.uniform(-1, 1))) for k in ks]


@pytest.mark.parametrize("b0, b1, b2, frac", [
    (19.0 / 1e4, 1.0, 0.3, 0.5),   # the simulator's curves: β1 = 1
    (1e-5, 0.5, 0.05, 0.2),        # early in a long job
    (2e-3, 3.0, 0.0, 0.9),         # floor at its bound 0
])
def test_recovers_known_parameters_of_a_noise_free_curve(b0, b1, b2, frac):
    total = (1.0 / cf.EPSILON - b1) / b0
    fit = fit_convergence(_samples(b0, b1, b2, frac * total))
    assert fit is not None
    assert fit.b0 == pytest.approx(b0, rel=1e-4)
    assert fit.b1 == pytest.approx(b1, rel=1e-4)
    assert fit.b2 == pytest.approx(b2, abs=1e-5)
    assert fit.total == pytest.approx(total, rel=1e-4)
    assert fit.low <= total <= fit.high


def test_is_a_least_squares_minimum_on_noisy_samples():
    # no nearby parameters do better on the weighted error (the bounds β ≥ 0 respected)
    samples = _samples(5e-4, 1.0, 0.2, 1.5e4, noise=0.02, seed=3)
    fit = fit_convergence(samples)
    assert fit is not None and min(fit.b0, fit.b1, fit.b2) >= 0.0
    k = np.array([s[0] for s in samples])
    y = np.array([s[1] for s in samples])
    w = 1.0 / segment_sigma(len(k)) ** 2

    def err(b0: float, b1: float, b2: float) -> float:
        return float(w @ (1.0 / (b0 * k + b1) + b2 - y) ** 2)

    best = err(fit.b0, fit.b1, fit.b2)
    for d in (1e-3, -1e-3):
        for i in range(3):
            p = [fit.b0, fit.b1, fit.b2]
            p[i] = max(p[i] * (1 + d), 0.0)
            assert err(*p) >= best * (1 - 1e-9)


def test_floor_bound_binds_where_the_free_floor_would_be_negative():
    # a curve that keeps falling past where a free floor would sit below 0: β2 stays at 0
    ks = np.linspace(100, 5000, 50)
    samples = [(float(k), 1.0 / (1e-3 * k + 1.0) - 0.02) for k in ks]
    fit = fit_convergence(samples)
    assert fit is not None
    assert fit.b2 == 0.0


def test_interval_draws_are_numpys_multivariate_normal():
    popt = np.array([2.0, 1.0, 0.3])
    a = np.random.default_rng(7).normal(size=(3, 3))
    pcov = a @ a.T * 1e-3
    u, s, _ = np.linalg.svd(pcov)
    ours = popt + cf._standard_normals(0) @ (u * np.sqrt(s)).T
    theirs = np.random.default_rng(0).multivariate_normal(popt, pcov, size=cf._DRAWS, check_valid="ignore")
    assert np.array_equal(ours, theirs)


def test_falls_back_with_too_few_points_flat_or_rising_loss():
    good = _samples(1e-3, 1.0, 0.1, 1e4)
    assert fit_convergence(good[: cf.MIN_SAMPLES - 1]) is None  # too few to pin three parameters
    assert fit_convergence(good[: cf.MIN_SAMPLES]) is not None
    assert fit_convergence([(float(k), 0.7) for k in range(1, 40)]) is None  # flat: never converges
    assert fit_convergence([(float(k), 0.5 + 1e-3 * k) for k in range(1, 40)]) is None  # rising
    assert fit_convergence([(0.0, 1.0)] * 10) is None  # no progress to scale by
    assert fit_convergence([(float(k), math.nan) for k in range(1, 40)]) is None


def test_batched_fits_are_the_single_fits_bit_for_bit():
    # a slot fits many jobs in one call; each fit must not depend on its batch (nor on order)
    sets = [_samples(10 ** -(3 + i % 3), 1.0, 0.05 * i, 10 ** (3 + i % 4), noise=0.01 * (i % 3), seed=i)
            for i in range(12)]
    sets += [sets[0][: cf.MIN_SAMPLES + 3], [(float(k), 0.7) for k in range(1, 40)], sets[1][:2]]
    batched = cf.fit_many(sets)
    alone = [fit_convergence(s) for s in sets]
    assert [f is None for f in batched] == [f is None for f in alone]
    assert sum(f is not None for f in alone) >= 10  # most fit; the flat and short ones do not
    for b, a in zip(batched, alone):
        if a is not None:
            assert (b.b0, b.b1, b.b2, b.total, b.low, b.high) == (a.b0, a.b1, a.b2, a.total, a.low, a.high)
    reversed_ = cf.fit_many(sets[::-1])[::-1]
    assert [f and f.total for f in reversed_] == [f and f.total for f in alone]


def test_array_input_and_chunked_batches_are_the_pair_fits_bit_for_bit():
    # a slot's fits arrive as the loss log's arrays, in batches larger than one chunk
    sets = [_samples(10 ** -(3 + i % 3), 1.0, 0.02 * (i % 7), 10 ** (2 + i % 5), noise=0.01 * (i % 4), seed=i)
            for i in range(2 * cf._CHUNK + 5)]
    rows = [(np.array([k for k, _ in s]), np.array([v for _, v in s])) for s in sets]
    shuffled = np.random.default_rng(0).permutation(50)  # unsorted iterations are sorted as pairs
    rows[3] = rows[3][0][shuffled], rows[3][1][shuffled]
    rows += [None, (np.arange(1.0, 4.0), np.ones(3))]  # no samples; too few
    alone = [fit_convergence(s) for s in sets] + [None, None]
    got = cf.fit_arrays(rows)
    assert [f is None for f in got] == [f is None for f in alone]
    for b, a in zip(got, alone):
        if a is not None:
            assert (b.b0, b.b1, b.b2, b.total, b.low, b.high) == (a.b0, a.b1, a.b2, a.total, a.low, a.high)


def test_a_refit_from_the_previous_fit_is_the_whole_grids_fit_bit_for_bit():
    """A refit evaluates only the coarse points around where the job's last fit says the best one
    is (`previous`); the result must be the whole grid's, also when that hint is far off (the
    window's best point is then at its edge, and the whole grid is searched)."""
    curves = [(10 ** -(3 + i % 3), 0.5 + i % 3, 0.04 * (i % 5), 0.01 * (i % 4)) for i in range(30)]
    rows, previous = [], []
    for i, (b0, b1, b2, noise) in enumerate(curves):
        total = (1.0 / cf.EPSILON - b1) / b0
        early, now = (_samples(b0, b1, b2, frac * total, noise=noise, seed=i) for frac in (0.2, 0.2 * 1.25 ** (1 + i % 4)))
        rows.append((np.array([k for k, _ in now]), np.array([v for _, v in now])))
        previous.append(fit_convergence(early))
    assert sum(p is not None for p in previous) >= 20
    wrong = previous[:]  # hints far from the truth: r a million times too large or too small
    for i, p in enumerate(wrong):
        if p is not None:
            wrong[i] = cf.ConvergenceFit(p.b0 * 10.0 ** (6 if i % 2 else -6), p.b1, p.b2, p.total, p.samples, p._basis)
    plain = cf.fit_arrays(rows)
    for hints in (previous, wrong):
        got = cf.fit_arrays(rows, previous=hints)
        assert [f is None for f in got] == [f is None for f in plain]
        for g, a in zip(got, plain):
            if a is not None:
                assert (g.b0, g.b1, g.b2, g.total) == (a.b0, a.b1, a.b2, a.total)


def test_the_coarse_grid_without_the_derivative_is_the_same_profile():
    sets = [_samples(10 ** -(3 + i % 3), 1.0, 0.05 * (i % 4), 10 ** (3 + i % 4), noise=0.01 * (i % 3), seed=i)
            for i in range(8)]
    k = np.array([[a for a, _ in s] for s in sets])
    y = np.array([[b for _, b in s] for s in sets])
    x, wt = k / k[:, -1:], 1.0 / segment_sigma(50) ** 2
    u = np.broadcast_to(cf._LOG_R, (len(sets), len(cf._LOG_R)))
    full, coarse = cf._profile(x, y, wt, u), cf._profile(x, y, wt, u, grad=False)
    assert coarse[3] is None
    for a, b in zip(full[:3] + full[4:], coarse[:3] + coarse[4:]):
        assert np.array_equal(a, b, equal_nan=True)


def test_the_profiles_in_place_products_are_the_plain_expressions_bit_for_bit():
    """`_profile` writes its (B, R, n) products into reused buffers; its error and derivative
    must be the written-out expressions' bits at its (s, β2) (where the bound binds too)."""
    sets = [_samples(10 ** -(3 + i % 3), 1.0, 0.05 * (i % 4) - 0.04, 10 ** (3 + i % 4), noise=0.02 * (i % 3), seed=i)
            for i in range(12)]
    k = np.array([[a for a, _ in s] for s in sets])
    y = np.array([[b for _, b in s] for s in sets])
    x, wt = k / k[:, -1:], 1.0 / segment_sigma(50) ** 2
    u = np.broadcast_to(cf._LOG_R, (len(sets), len(cf._LOG_R)))
    s, c, cost, slope, c_free = cf._profile(x, y, wt, u)
    r = 10.0 ** u
    g = 1.0 / (1.0 + r[:, :, None] * x[:, None, :])
    gw = g * wt
    sw, sy = wt.sum(), (y * wt).sum(axis=-1)[:, None]
    sg, sgg, sgy = gw.sum(axis=-1), (gw * g).sum(axis=-1), (gw * y[:, None, :]).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        det = sw * sgg - sg * sg
        assert np.array_equal(c_free, (sgg * sy - sg * sgy) / det, equal_nan=True)
    assert (c_free < 0).any()  # the bound binds somewhere
    res = g * s[:, :, None] + c[:, :, None] - y[:, None, :]
    assert np.array_equal(cost, ((res * res) * wt).sum(axis=-1))
    want = -2.0 * cf._LN10 * r * s * ((res * g * g) * (wt * x)[:, None, :]).sum(axis=-1)
    assert np.array_equal(slope, want)
