"""Alg. 2: the greedy COST_t and the DP are optimal, checked by brute force on small cases."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.policies.oasis_schedule import Market, best_schedule, place_slot, slot_costs


def _brute_slot(wprice, wcap, pprice, pcap, n, z):
    """Cheapest way to put n workers and z PSs on the servers, by enumerating every placement."""
    best = np.inf
    for ys in itertools.product(*[range(c + 1) for c in wcap]):
        if sum(ys) != n:
            continue
        for zs in itertools.product(*[range(c + 1) for c in pcap]):
            if sum(zs) != z:
                continue
            best = min(best, float(np.dot(ys, wprice) + np.dot(zs, pprice)))
    return best


small = st.lists(st.integers(0, 3), min_size=1, max_size=3)
prices = st.lists(st.floats(0.01, 10.0), min_size=3, max_size=3)


@settings(max_examples=60, deadline=None)
@given(wcap=small, pcap=small, wp=prices, pp=prices, n=st.integers(0, 6), ratio=st.sampled_from([0.2, 0.5, 1.0]))
def test_greedy_cost_t_equals_brute_force(wcap, pcap, wp, pp, n, ratio):
    H, K = len(wcap), len(pcap)
    m = Market(np.array([wp[:H]]), np.array([wcap]), np.array([pp[:K]]), np.array([pcap]))
    z = int(np.ceil(n * ratio - 1e-9)) if n else 0
    got = slot_costs(m, 0, np.array([n]), np.array([z]))[0]
    want = _brute_slot(wp[:H], wcap, pp[:K], pcap, n, z)
    if np.isinf(want):
        assert np.isinf(got)
    else:
        assert got == np.float64(got) and abs(got - want) < 1e-9
        x, zz = place_slot(m, 0, n, z)
        assert x.sum() == n and zz.sum() == z
        assert (x <= np.array(wcap)).all() and (zz <= np.array(pcap)).all()
        assert abs(float(x @ np.array(wp[:H]) + zz @ np.array(pp[:K])) - want) < 1e-9


def _brute_schedule(m, utilities, workers_for, ps_for):
    """Best payoff over every split of the K units over the window's slots."""
    K, T = len(workers_for) - 1, m.slots
    best = -np.inf
    for split in itertools.product(range(K + 1), repeat=T):
        if sum(split) != K:
            continue
        last = max(t for t in range(T) if split[t] > 0)
        cost = 0.0
        for t, d in enumerate(split):
            if d and workers_for[d] < 0:
                cost = np.inf
                break
            cost += slot_costs(m, t, np.array([max(workers_for[d], 0)]), np.array([ps_for[d]]))[0] if d else 0.0
        best = max(best, utilities[last] - cost)
    return best


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    T=st.integers(1, 3),
    K=st.integers(1, 4),
)
def test_dp_matches_brute_force_over_all_splits(seed, T, K):
    rng = np.random.default_rng(seed)
    H, P = 3, 2
    m = Market(
        wprice=rng.uniform(0.1, 5, (T, H)), wcap=rng.integers(0, 3, (T, H)),
        pprice=rng.uniform(0.1, 5, (T, P)), pcap=rng.integers(0, 3, (T, P)),
    )
    workers_for = np.ceil(np.arange(K + 1) * rng.uniform(0.5, 2.0)).astype(np.int64)
    ps_for = np.where(workers_for > 0, np.maximum(1, np.ceil(workers_for * 0.5)), 0).astype(np.int64)
    workers_for[workers_for > 4] = -1  # the job's concurrency cap
    utilities = np.sort(rng.uniform(0, 40, T))[::-1]
    got = best_schedule(m, utilities, workers_for, ps_for)
    want = _brute_schedule(m, utilities, workers_for, ps_for)
    if np.isinf(want):
        assert not got.feasible
    else:
        assert got.feasible and abs(got.payoff - want) < 1e-9
        assert got.units.sum() == K
        # the schedule it returns costs what it says
        cost = sum(
            float(x @ m.wprice[t] + z @ m.pprice[t]) for t, (x, z) in enumerate(zip(got.workers, got.ps)) if x is not None
        )
        assert abs(cost - got.cost) < 1e-9


def test_later_completion_chosen_when_early_slots_are_expensive():
    # 2 units; slot 0 costs 10 per worker, slot 1 costs 1; utility falls only from 20 to 18
    m = Market(np.array([[10.0], [1.0]]), np.array([[2], [2]]), np.array([[0.0], [0.0]]), np.array([[2], [2]]))
    s = best_schedule(m, np.array([20.0, 18.0]), np.array([0, 1, 2]), np.array([0, 1, 1]))
    assert s.last_slot == 1 and list(s.units) == [0, 2]
    assert s.payoff == 18.0 - 2.0


def test_shared_pool_ps_room_shrinks_with_workers_placed():
    # one node of 4 cpu; a worker and a PS use 2 cpu each: 2 workers leave no room for the PS
    res = np.array([[[4.0]]])
    m = Market(np.array([[1.0]]), np.array([[2]]), np.array([[1.0]]), np.array([[2]]), shared=True,
               pres=res, wuse=np.array([2.0]), puse=np.array([2.0]))
    c = slot_costs(m, 0, np.array([1, 2]), np.array([1, 1]))
    assert c[0] == 2.0 and np.isinf(c[1])


def test_placement_stays_on_the_same_servers_when_prices_tie():
    from dlsched.policies.oasis_schedule import place_plan

    # slot 0: server 0 is full, so the job lands on server 1; slot 1: all three servers are free and
    # equally priced. Without the tie-break the job would move to server 0 and restart.
    m = Market(np.ones((2, 3)), np.array([[0, 2, 2], [2, 2, 2]]), np.ones((2, 1)), np.array([[2], [2]]))
    xs, zs = place_plan(m, np.array([1, 1]), 1, np.array([0, 2]), np.array([0, 1]))
    assert list(xs[0]) == [0, 2, 0] and list(xs[1]) == [0, 2, 0]
    # ties only: a cheaper server still wins
    m2 = Market(np.array([[1.0, 1.0, 1.0], [0.5, 1.0, 1.0]]), m.wcap, m.pprice, m.pcap)
    xs, _ = place_plan(m2, np.array([1, 1]), 1, np.array([0, 2]), np.array([0, 1]))
    assert list(xs[1]) == [2, 0, 0]
