"""OASiS' best-schedule subroutine (Alg. 2): outer loop over the completion slot, DP over work units,
and the greedy COST_t that fills the cheapest servers with workers, then PSs.

Why this shape: at fixed prices, the cheapest way to get `n` workers in one slot is to take them
from the servers with the lowest per-worker price first (each server's price is linear in the
number of workers up to its residual capacity), and likewise for the PSs that carry their
bandwidth: Theorem 1. Splitting the job's work over slots is then a min-plus convolution per slot
(the DP), and the outer loop trades the utility lost by finishing later against the cost saved.

All functions are pure NumPy over arrays the policy prepares, so they can be tested against
brute force on small cases and timed in the benchmark.

The work unit: the paper's DP runs over data chunks (d in [0, E N]). E N reaches 20,000, so the
policy groups chunks into at most `max_units` units (exact when E N <= max_units); a unit of g
chunks needs ceil(d g M t / S) workers in a slot. Rounding the last unit up only ever plans a
little more work than needed, never less.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INF = np.inf


@dataclass(frozen=True)
class Market:
    """One job's view of the prices and room in each slot of its window (T slots).

    - `wprice[t, h]`: cost of one of this job's workers on worker server h (sum_r p_h^r(t) w^r);
      `wcap[t, h]`: how many of its workers still fit there.
    - `pprice`, `pcap`: the same for its PSs on PS servers.
    - `shared`: workers and PSs draw on the same servers (Kubernetes); then `pcap` is the room
      before workers, and `wuse`/`puse`/`pres` (per resource) turn placed workers into lost PS room.
    """

    wprice: np.ndarray
    wcap: np.ndarray
    pprice: np.ndarray
    pcap: np.ndarray
    shared: bool = False
    pres: np.ndarray | None = None  # (T, H, R) residual capacity, shared pools only
    wuse: np.ndarray | None = None  # (R,) one worker's demand
    puse: np.ndarray | None = None  # (R,) one PS's demand

    @property
    def slots(self) -> int:
        return self.wprice.shape[0]


def _fill(need: np.ndarray, cap_sorted: np.ndarray) -> np.ndarray:
    """Greedy fill: tasks per (candidate, server in price order); cap_sorted is (H,) or (K, H)."""
    cum = np.cumsum(cap_sorted, axis=-1)
    before = cum - cap_sorted
    return np.clip(need[:, None] - before, 0, cap_sorted)


def _fits(res: np.ndarray, use: np.ndarray) -> np.ndarray:
    """How many tasks of demand `use` fit in residual `res` (last axis = resources)."""
    pos = use > 0
    if not pos.any():
        return np.full(res.shape[:-1], 10**9, dtype=np.int64)
    return np.floor(np.min(res[..., pos] / use[pos] + 1e-9, axis=-1)).clip(0).astype(np.int64)


def slot_costs(m: Market, t: int, workers: np.ndarray, ps: np.ndarray) -> np.ndarray:
    """COST_t for each candidate (workers[k], ps[k]) in slot t; +inf where it does not fit."""
    wo = np.argsort(m.wprice[t], kind="stable")
    X = _fill(workers, m.wcap[t, wo])
    cost = X @ m.wprice[t, wo]
    ok = X.sum(axis=1) == workers
    po = np.argsort(m.pprice[t], kind="stable")
    if m.shared:
        placed = np.zeros((len(workers), m.wcap.shape[1]))
        placed[:, wo] = X
        res = m.pres[t][None, :, :] - placed[:, :, None] * m.wuse[None, None, :]
        pcap = _fits(res, m.puse)[:, po]
    else:
        pcap = m.pcap[t, po]
    Z = _fill(ps, pcap)
    cost = cost + Z @ m.pprice[t, po]
    ok &= Z.sum(axis=1) == ps
    return np.where(ok, cost, INF)


def _order(price: np.ndarray, prefer: np.ndarray | None) -> np.ndarray:
    """Servers cheapest first; among equal prices, the preferred ones (where the job already is) first."""
    if prefer is None:
        return np.argsort(price, kind="stable")
    return np.lexsort((~prefer, price))


def place_slot(
    m: Market, t: int, workers: int, ps: int, prefer_w: np.ndarray | None = None, prefer_p: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The greedy placement behind `slot_costs` for one candidate: (workers per server, PSs per server).

    `prefer_*` (bool masks) only break ties between equally priced servers, so the cost is the one
    `slot_costs` computed; they keep a job on the servers of its previous slot, which avoids a
    restart at the slot boundary when nothing is gained by moving.
    """
    wo = _order(m.wprice[t], prefer_w)
    x = np.zeros(m.wcap.shape[1], dtype=np.int64)
    x[wo] = _fill(np.array([workers]), m.wcap[t, wo])[0]
    po = _order(m.pprice[t], prefer_p)
    if m.shared:
        res = m.pres[t] - x[:, None] * m.wuse[None, :]
        pcap = _fits(res, m.puse)[po]
    else:
        pcap = m.pcap[t, po]
    z = np.zeros(m.pcap.shape[1], dtype=np.int64)
    z[po] = _fill(np.array([ps]), pcap)[0]
    if z.sum() != ps and prefer_w is not None:  # shared pool: the tie-break changed the PS room
        return place_slot(m, t, workers, ps)
    return x, z


def place_plan(m: Market, units: np.ndarray, last: int, workers_for: np.ndarray, ps_for: np.ndarray) -> tuple[list, list]:
    """Per slot up to `last`: the greedy placement of that slot's work, sticky across slots."""
    xs, zs = [], []
    px = pz = None
    for t in range(last + 1):
        if units[t]:
            x, z = place_slot(m, t, int(workers_for[units[t]]), int(ps_for[units[t]]), px, pz)
            px, pz = x > 0, z > 0
        else:
            x = z = None
        xs.append(x)
        zs.append(z)
    return xs, zs


@dataclass(frozen=True)
class Schedule:
    """The best schedule found: payoff mu = f - cost, and per slot of the window the units, workers, PSs."""

    payoff: float
    utility: float
    cost: float
    last_slot: int  # index into the window, -1 if no feasible schedule
    units: np.ndarray  # (T,) work units per slot
    workers: list[np.ndarray]  # per slot: workers per worker server (only slots with work)
    ps: list[np.ndarray]

    @property
    def feasible(self) -> bool:
        return self.last_slot >= 0


def best_schedule(m: Market, utilities: np.ndarray, workers_for: np.ndarray, ps_for: np.ndarray) -> Schedule:
    """Alg. 2. `utilities[t]`: f if the job completes in window slot t (non-increasing in t).

    `workers_for[d]`, `ps_for[d]`: tasks needed in a slot to do d work units (d = 0..K); a count
    the job can never have (over its concurrency cap) must already be marked with -1.
    """
    K = len(workers_for) - 1
    valid = workers_for >= 0
    w = np.where(valid, workers_for, 0)
    p = np.where(valid, ps_for, 0)
    Di, di = np.tril_indices(K + 1)
    F = np.full(K + 1, INF)
    F[0] = 0.0
    args: list[np.ndarray] = []
    best_payoff, best_t, best_cost = -INF, -1, INF
    for t in range(m.slots):
        if best_t >= 0 and utilities[t] <= best_payoff:
            break  # f is non-increasing and costs are >= 0: no later completion can pay more
        c = np.where(valid, slot_costs(m, t, w, p), INF)
        M = np.full((K + 1, K + 1), INF)
        M[Di, di] = c[di] + F[Di - di]
        arg = np.argmin(M, axis=1)
        F = M[np.arange(K + 1), arg]
        args.append(arg)
        if np.isfinite(F[K]) and utilities[t] - F[K] > best_payoff:
            best_payoff, best_t, best_cost = utilities[t] - F[K], t, F[K]
    units = np.zeros(m.slots, dtype=np.int64)
    if best_t < 0:
        return Schedule(-INF, 0.0, INF, -1, units, [], [])
    D = K
    for t in range(best_t, -1, -1):
        d = int(args[t][D])
        units[t] = d
        D -= d
    xs, zs = place_plan(m, units, best_t, w, p)
    return Schedule(float(best_payoff), float(utilities[best_t]), float(best_cost), best_t, units, xs, zs)
