"""OASiS' price functions (22) and constants (23)-(26) against values computed by hand."""

import math

import numpy as np
import pytest

from dlsched.core.errors import ConfigError
from dlsched.policies.oasis_prices import JobTerms, OnlineConstants, UsageTable, constants_from, price


def test_price_is_L_when_idle_U_when_full_and_geometric_between():
    U, L = np.array([100.0, 10.0]), 1.0
    cap = np.array([4.0, 8.0])
    assert price(np.zeros(2), cap, U, L) == pytest.approx([1.0, 1.0])
    assert price(cap, cap, U, L) == pytest.approx([100.0, 10.0])
    # half full: L (U/L)^(1/2)
    assert price(cap / 2, cap, U, L) == pytest.approx([10.0, math.sqrt(10.0)])
    # a quarter of resource 0: 100^(1/4)
    assert price(np.array([1.0, 0.0]), cap, U, L)[0] == pytest.approx(100 ** 0.25)


def test_zero_capacity_resource_is_priced_at_L_not_nan():
    p = price(np.array([0.0, 3.0]), np.array([0.0, 6.0]), np.array([50.0, 50.0]), 2.0)
    assert p[0] == pytest.approx(2.0)
    assert p[1] == pytest.approx(2.0 * (25.0 ** 0.5))


def _two_jobs():
    # job a: fastest utility 60, utility at T 12, work 10 worker-slots, w = (2 gpu, 4 cpu, 0 mem), s = (0, 1, 2)
    a = JobTerms(60.0, 12.0, 10.0, np.array([2.0, 4.0, 0.0]), np.array([0.0, 1.0, 2.0]))
    # job b: 30, 3, 5 worker-slots, w = (1, 1, 8), s = (0, 2, 2)
    b = JobTerms(30.0, 3.0, 5.0, np.array([1.0, 1.0, 8.0]), np.array([0.0, 2.0, 2.0]))
    return [a, b]


def test_constants_match_hand_computation():
    T, cw, cp = 10, 1000.0, 500.0
    c = constants_from(_two_jobs(), T, cw, cp)
    # (23): U1^r = max_i f_fast / w^r -> gpu max(60/2, 30/1) = 30, cpu max(15, 30) = 30, mem 30/8
    assert c.U1 == pytest.approx([30.0, 30.0, 3.75])
    # (24): U2^r over s: gpu unused -> 0, cpu max(60, 15) = 60, mem max(30, 15) = 30
    assert c.U2 == pytest.approx([0.0, 60.0, 30.0])
    # eta1 = 1 / min_i work_i sum_r w_i^r / (T cw) = 1 / min(60, 50)/10000 = 200
    assert c.eta1 == pytest.approx(200.0)
    # eta2 = 1 / min(10*3, 5*4)/(10*500) = 250
    assert c.eta2 == pytest.approx(250.0)
    # (25): L1 = 1/(4 eta1) min(12/60, 3/50) = 0.06/800
    assert c.L1 == pytest.approx(0.06 / 800)
    # (26): L2 = 1/(4 eta2) min(12/30, 3/20) = 0.15/1000
    assert c.L2 == pytest.approx(0.15 / 1000)
    assert c.alpha == pytest.approx(max(1.0, math.log(30 / c.L1), math.log(60 / c.L2)))


def test_min_fraction_leaves_out_jobs_worthless_at_the_horizon():
    jobs = _two_jobs() + [JobTerms(50.0, 1e-200, 4.0, np.array([1.0, 1.0, 1.0]), np.array([0.0, 1.0, 1.0]))]
    literal = constants_from(jobs, 10, 1000.0, 500.0)
    robust = constants_from(jobs, 10, 1000.0, 500.0, min_fraction=1e-3)
    assert literal.L1 < 1e-200
    assert robust.L1 == pytest.approx(0.06 / (4 * literal.eta1))


def test_online_estimate_moves_with_the_jobs_seen_and_scales():
    a, b = _two_jobs()
    est = OnlineConstants(10, 1000.0, 500.0, scale=0.5)
    first = est.observe(a)
    assert first.U1[0] == pytest.approx(0.5 * 30.0)
    second = est.observe(b)
    assert second.U1[2] == pytest.approx(0.5 * 3.75)
    with pytest.raises(ConfigError):
        constants_from([], 10, 1.0, 1.0)


def test_usage_table_grows_and_accumulates():
    t = UsageTable(nodes=3, resources=2, slots=2)
    t.add(5, np.array([0, 2, 0]), np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 1.0]]))
    assert t.used.shape[0] >= 6
    assert t.used[5, 0] == pytest.approx([2.0, 3.0])
    assert t.used[5, 2] == pytest.approx([3.0, 4.0])
    assert t.window(0, 5).sum() == 0
