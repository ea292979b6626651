"""Per-machine speed factors (dlsched.hetero.speeds) and GPU prices (dlsched.hetero.prices):
the static spread and the fluctuation are in the bands their calibration sources give, events are
sorted, sparse and read back exactly, and a seed decides everything."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.hetero.prices import DEFAULT_PRICE, PRICES, node_prices, price_of
from dlsched.hetero.speeds import VARIABILITY, factor_at, factors_at, fluctuation_events, static_factors

DAY = 86_400.0


def _cluster(n: int, per_rack: int = 4) -> Cluster:
    return Cluster.homogeneous("h", nodes=n, gpus=4, cpus=48, mem=256, gpu_type="V100", nodes_per_rack=per_rack)


def test_static_spread_matches_sc22_band() -> None:
    """1,000 nodes: mean |deviation from the median| 4-12% (SC'22: ~8% average), the spread of the
    non-outliers tens of percent (SC'22: max ~22%), ~2% outliers 1.5x slower."""
    z = static_factors(_cluster(1000), np.random.default_rng(7))
    dev = z / np.median(z) - 1
    mean_abs = float(np.abs(dev).mean())
    slow = dev < 1 / 1.4 - 1  # further than any non-outlier gets at these spreads (> 4 sd)
    inliers = np.abs(dev[~slow])
    print(f"mean |dev| {mean_abs:.3f}, p99 |dev| of inliers {np.percentile(inliers, 99):.3f}, "
          f"max {inliers.max():.3f}, outliers {slow.mean():.3f}, max/min {z.max() / z.min():.2f}")
    assert 0.04 <= mean_abs <= 0.12
    assert 0.12 <= np.percentile(inliers, 99) <= 0.30
    assert 0.15 <= inliers.max() <= 0.40
    assert 0.005 <= slow.mean() <= 0.04


def test_racks_share_a_correlated_component() -> None:
    """Machines of a rack are more alike than machines of different racks (the family term)."""
    c = _cluster(2000, per_rack=4)
    z = np.log(static_factors(c, np.random.default_rng(3), outlier_prob=0.0))
    by_rack = z.reshape(-1, 4)
    within = float(by_rack.var(axis=1, ddof=1).mean())
    assert within == pytest.approx(0.06 ** 2, rel=0.15)
    assert float(z.var()) == pytest.approx(0.05 ** 2 + 0.06 ** 2, rel=0.15)


def test_steady_is_exactly_nominal_and_static_spread_is_seeded() -> None:
    c = _cluster(64)
    assert (VARIABILITY["steady"].static_factors(c, np.random.default_rng(0)) == 1.0).all()
    a = VARIABILITY["static"].static_factors(c, np.random.default_rng(5))
    b = VARIABILITY["static"].static_factors(c, np.random.default_rng(5))
    d = VARIABILITY["static"].static_factors(c, np.random.default_rng(6))
    assert np.array_equal(a, b) and not np.array_equal(a, d)
    assert VARIABILITY["steady"].events(c, np.ones(64), DAY, np.random.default_rng(0)) == []


def test_ou_stationary_sd_and_correlation() -> None:
    """With no stragglers/contention and no event threshold, log(factor/static) on the grid is the
    OU chain: sd ou_sd, lag-1 correlation exp(-step/tau)."""
    c = _cluster(40)
    static = np.full(40, 1.0)
    horizon = 30 * DAY
    ev = fluctuation_events(c, static, horizon, np.random.default_rng(11), ou_sd=0.05, ou_tau_s=2700, step_s=600,
                            straggler_rate_per_day=0, contention_rate_per_day=0, min_change=0.0)
    grid = np.arange(1, int(horizon // 600)) * 600.0
    x = np.log(factors_at(ev, static, grid))
    sd = float(x.std())
    rho = float(np.corrcoef(x[:-1].ravel(), x[1:].ravel())[0, 1])
    print(f"OU sd {sd:.4f} (want 0.05), lag-1 corr {rho:.3f} (want {math.exp(-600 / 2700):.3f})")
    assert sd == pytest.approx(0.05, rel=0.05)
    assert rho == pytest.approx(math.exp(-600 / 2700), abs=0.02)
    assert abs(float(x.mean())) < 0.005


def test_events_sorted_sparse_and_read_back() -> None:
    c = _cluster(32)
    rng = np.random.default_rng(2)
    v = VARIABILITY["fluctuating"]
    static = v.static_factors(c, rng)
    horizon = 3 * DAY
    ev = v.events(c, static, horizon, rng)
    assert ev, "a fluctuating cluster changes speed"
    times = [e.time for e in ev]
    assert times == sorted(times) and 0 < times[0] and times[-1] < horizon
    assert all(e.kind == "speed" and e.speed > 0 for e in ev)
    # each event moves its node by more than min_change from the node's previous factor
    last = dict(enumerate(static.tolist()))
    for e in ev:
        assert abs(e.speed / last[e.node] - 1) > v.min_change
        last[e.node] = e.speed
    # factor_at and factors_at agree, and read the last event at or before t
    probe = np.array([0.0, times[0] - 1e-6, times[0], 0.5 * horizon, horizon])
    table = factors_at(ev, static, probe)
    for i, t in enumerate(probe.tolist()):
        for m in (0, ev[0].node, 31):
            assert factor_at(ev, static, m, t) == table[i, m]
    assert table[0] == pytest.approx(static)
    assert factor_at(ev, static, ev[0].node, times[0]) == ev[0].speed
    # far fewer events than one per node per grid step
    assert len(ev) < 32 * (horizon / v.step_s)


def test_stragglers_slow_nodes_by_their_band_and_recover() -> None:
    """Stragglers only (no OU, no contention): a node's factor is static or static / U(1.3, 2.0)."""
    c = _cluster(50)
    static = np.ones(50)
    ev = fluctuation_events(c, static, 10 * DAY, np.random.default_rng(4), ou_sd=0.0, straggler_rate_per_day=1.0,
                            contention_rate_per_day=0.0)
    slow = np.array([1 / e.speed for e in ev if e.speed < 1])
    assert len(slow) > 200  # ~500 onsets expected
    assert slow.min() >= 1.3 - 1e-9 and slow.max() <= 2.0 + 1e-9
    assert sum(1 for e in ev if e.speed == 1.0) > 0.8 * len(slow)  # they recover
    f = factors_at(ev, static, np.linspace(0, 10 * DAY, 2001))
    frac = float((f < 1).mean())
    # P(slowed) ~ 1 - exp(-rate x mean duration), mean duration (14400-1800)/ln 8 = 6,059 s: 0.068
    print(f"fraction of time a node straggles: {frac:.3f}")
    assert 0.045 < frac < 0.095, frac


def test_cov_across_workers_in_pai_band() -> None:
    """PAI 2020's mini-batch CoV across a job's 10 workers is 0.02-0.12: the CoV across 10 random
    machines of the time-varying part (factor / static) at an instant, median over groups and
    times, is in that band for `fluctuating` and larger for `strong`. The total (static spread
    included) is reported: SC'22's spread alone already gives about 0.08."""
    c = _cluster(320)
    med = {}
    for name in ("fluctuating", "strong"):
        rng = np.random.default_rng(9)
        v = VARIABILITY[name]
        static = v.static_factors(c, rng)
        ev = v.events(c, static, 2 * DAY, rng)
        f = factors_at(ev, static, np.linspace(3600, 2 * DAY, 48))  # (48, 320)
        groups = rng.permutation(320).reshape(32, 10)

        def cov(x: np.ndarray) -> float:
            return float(np.median([[row[g].std() / row[g].mean() for g in groups] for row in x]))

        med[name] = cov(f / static)
        print(f"{name}: CoV across 10 machines, median: time-varying part {med[name]:.3f}, total {cov(f):.3f}")
    assert 0.02 <= med["fluctuating"] <= 0.12
    assert med["strong"] > med["fluctuating"]


def test_events_are_seeded() -> None:
    c = _cluster(16)
    v = VARIABILITY["strong"]
    runs = []
    for seed in (1, 1, 2):
        rng = np.random.default_rng(seed)
        s = v.static_factors(c, rng)
        runs.append(v.events(c, s, DAY, rng))
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_bad_parameters_are_config_errors() -> None:
    c = _cluster(4)
    with pytest.raises(ConfigError):
        fluctuation_events(c, np.ones(3), DAY, np.random.default_rng(0))
    with pytest.raises(ConfigError):
        fluctuation_events(c, np.ones(4), DAY, np.random.default_rng(0), straggler_slowdown=(0.5, 2.0))
    with pytest.raises(ConfigError):
        static_factors(c, np.random.default_rng(0), spread=-0.1)


def test_prices() -> None:
    assert price_of("V100") == PRICES["V100"] == price_of("v100") == price_of(" V100 ")
    assert price_of("K80") < price_of("P100") < price_of("V100") < price_of("V100M32")
    assert price_of("G2") > 0 and price_of("t4") == PRICES["T4"]
    assert price_of("H200-unknown") == DEFAULT_PRICE == price_of("generic")
    assert price_of("K80", table={"k80": 9.0}) == 9.0
    c = Cluster(name="p", capacity=np.array([[4, 8, 64], [0, 8, 64], [2, 8, 64]], float),
                gpu_type=np.array(["K80", "", "T4"], dtype=object), rack=np.zeros(3, int), speed=np.ones(3),
                node_names=("a", "b", "c"))
    assert node_prices(c).tolist() == [PRICES["K80"], 0.0, PRICES["T4"]]
