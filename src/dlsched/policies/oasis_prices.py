"""OASiS' resource prices: eq. (22)-(26), the constants U, L, eta, and the usage tables they price.

Why prices: the dual variables of the capacity constraints are unit prices that start at L (every
job is admitted into an empty cluster) and rise exponentially with usage to U at full capacity (no
job's utility can pay for the last unit). That exponential shape is what makes OASiS 2*alpha-
competitive (Theorem 4, alpha = max(1, ln(U/L))).

U and L depend on every job of the run, which an online scheduler does not know. The paper
estimates them "based on past experience"; `OnlineConstants` does so from the jobs seen so far
(the arriving one included), and `scale` multiplies both, as the paper's sensitivity study does
(Fig. 6: estimates at 20%..1000% of the true values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dlsched.core.errors import ConfigError

#: The smallest L we allow: f_i(T - a_i) of a time-critical job underflows to 0, and eq. (22) needs L > 0.
L_FLOOR = 1e-300


@dataclass(frozen=True)
class JobTerms:
    """What eq. (23)-(26) need of one job (times in slots, demands per resource)."""

    fastest_utility: float  # f_i(ceil(E_i M_i t_i)): utility of the fastest possible schedule
    horizon_utility: float  # f_i(T - a_i): utility of finishing at the end of the horizon
    work: float  # ceil(E_i N_i M_i t_i): worker-slots the job needs
    worker_demand: np.ndarray  # w_i^r
    ps_demand: np.ndarray  # s_i^r
    peak_utility: float | None = None  # f_i(0), the most the job can ever be worth (default: fastest_utility)


@dataclass(frozen=True)
class PriceConstants:
    """U1^r, L1 (worker servers) and U2^r, L2 (PS servers), eq. (23)-(26), with eta1, eta2."""

    U1: np.ndarray
    L1: float
    U2: np.ndarray
    L2: float
    eta1: float = 1.0
    eta2: float = 1.0

    def scaled(self, factor: float) -> "PriceConstants":
        if not factor > 0:
            raise ConfigError(f"the U/L scale must be > 0, got {factor}")
        return PriceConstants(self.U1 * factor, self.L1 * factor, self.U2 * factor, self.L2 * factor, self.eta1, self.eta2)

    @property
    def alpha(self) -> float:
        """Theorem 4's alpha = max(1, ln(U1^r/L1), ln(U2^r/L2)): OASiS is 2*alpha-competitive."""
        vals = [1.0]
        vals += [math.log(u / self.L1) for u in self.U1 if u > 0]
        vals += [math.log(u / self.L2) for u in self.U2 if u > 0]
        return max(vals)


def _upper(terms: list[JobTerms], demand: str) -> np.ndarray:
    """Eq. (23)/(24): max over jobs of fastest utility per unit of resource r (0 if no job uses r)."""
    R = len(getattr(terms[0], demand))
    out = np.zeros(R)
    for t in terms:
        d = getattr(t, demand)
        for r in range(R):
            if d[r] > 0:
                out[r] = max(out[r], t.fastest_utility / d[r])
    return out


def _eta(terms: list[JobTerms], demand: str, horizon: int, total_capacity: float) -> float:
    """The smallest eta with 1/eta <= ceil(work_i) sum_r d_i^r / (T sum_h sum_r c_h^r) for all i."""
    ratios = [t.work * float(np.sum(getattr(t, demand))) / (horizon * total_capacity) for t in terms]
    ratios = [x for x in ratios if x > 0]
    return 1.0 / min(ratios) if ratios and total_capacity > 0 else 1.0


def _peak(t: JobTerms) -> float:
    return t.peak_utility if t.peak_utility is not None else t.fastest_utility


def _lower(terms: list[JobTerms], demand: str, eta: float, min_fraction: float = 0.0) -> float:
    """Eq. (25)/(26): (1/(4 eta)) min over jobs of f_i(T - a_i) / (ceil(work_i) sum_r d_i^r).

    `min_fraction` > 0 leaves out of the min the jobs whose utility at T is below that fraction of
    their peak utility f_i(0): a time-critical sigmoid is ~1e-300 at T, which would put L (the price of an
    idle cluster) at the float floor and let OASiS admit jobs worth 1e-100. 0 is the literal formula.
    When no job's utility lasts to T (a rolling horizon set by the longest job, with utilities that
    decay on each job's own duration: every ITP job with the default utility), each job counts as
    worth `min_fraction` of its peak at T instead of leaving L at the floor: without that, prices
    were ~1e-39 on the embedded ITP slice and admission and sizing ignored them.
    """
    usable = [t for t in terms if np.sum(getattr(t, demand)) > 0 and t.work > 0]
    kept = [
        t for t in usable
        if t.horizon_utility > 0 and t.horizon_utility >= min_fraction * _peak(t)
    ]
    if kept or min_fraction <= 0:
        vals = [t.horizon_utility / (t.work * float(np.sum(getattr(t, demand)))) for t in (kept or usable)]
    else:  # no job's utility lasts to T (a long rolling horizon): each counts as worth min_fraction of its peak there
        vals = [min_fraction * _peak(t) / (t.work * float(np.sum(getattr(t, demand)))) for t in usable]
    if not vals:
        return L_FLOOR
    return max(L_FLOOR, min(vals) / (4.0 * eta))


def constants_from(
    terms: list[JobTerms], horizon: int, worker_capacity: float, ps_capacity: float, min_fraction: float = 0.0
) -> PriceConstants:
    """U, L and eta as eq. (23)-(26) define them, over `terms` (all jobs, or those seen so far);
    `min_fraction` as in `_lower` (0 = the literal formula)."""
    if not terms:
        raise ConfigError("U and L need at least one job")
    eta1 = _eta(terms, "worker_demand", horizon, worker_capacity)
    eta2 = _eta(terms, "ps_demand", horizon, ps_capacity)
    U1, U2 = _upper(terms, "worker_demand"), _upper(terms, "ps_demand")
    L1 = _lower(terms, "worker_demand", eta1, min_fraction)
    L2 = _lower(terms, "ps_demand", eta2, min_fraction)
    # A price must rise with usage: never let L exceed U (only possible with a degenerate job set)
    U1 = np.where(U1 > 0, np.maximum(U1, L1), 0.0)
    U2 = np.where(U2 > 0, np.maximum(U2, L2), 0.0)
    return PriceConstants(U1, L1, U2, L2, eta1, eta2)


def density_constants(terms: list[JobTerms], min_fraction: float = 0.0) -> PriceConstants:
    """U and L on the scale of value per unit of resource per slot, for jobs that hold a constant
    size for many short slots (trace jobs); eta is 1.

    U^r = max_i f_i(fastest) / (work_i w_i^r): the densest job's utility per worker-slot per unit
    of r (eq. (23)/(24) divide by the demand only, i.e. assume a job that ends in one slot).
    L = (1/4) min_i f_i(0) / (work_i sum_r d_i^r): a quarter of the sparsest job's density (the
    paper's 1/4; eq. (25)/(26)'s eta and f_i(T) put L ~1e-13 on a trace, where prices stay
    negligible until a server is nearly full and then jump past anything a long job can pay).
    Why: with the paper's bounds on 180 s slots (ITP cluster05 at load 0.8) a 90-slot job could not
    afford the last GPUs of any server, and below that every slot was free, so OASiS reserved
    FIFO-like and admitted plans worth 0.3% of a job; at this scale a resource at usage u costs
    what a job of that density can pay, so as servers fill only denser (shorter) jobs get in.
    `min_fraction` is unused (kept for the same signature as `constants_from`).
    """
    if not terms:
        raise ConfigError("U and L need at least one job")

    def upper(demand: str) -> np.ndarray:
        out = np.zeros(len(getattr(terms[0], demand)))
        for t in terms:
            d = getattr(t, demand)
            if t.work > 0:
                out = np.where(d > 0, np.maximum(out, t.fastest_utility / (t.work * np.where(d > 0, d, 1.0))), out)
        return out

    def lower(demand: str) -> float:
        vals = [_peak(t) / (t.work * float(np.sum(getattr(t, demand))))
                for t in terms if np.sum(getattr(t, demand)) > 0 and t.work > 0]
        return max(L_FLOOR, min(vals) / 4.0) if vals else L_FLOOR

    U1, U2, L1, L2 = upper("worker_demand"), upper("ps_demand"), lower("worker_demand"), lower("ps_demand")
    U1 = np.where(U1 > 0, np.maximum(U1, L1), 0.0)
    U2 = np.where(U2 > 0, np.maximum(U2, L2), 0.0)
    return PriceConstants(U1, L1, U2, L2)


def price(usage: np.ndarray, capacity: np.ndarray, U: np.ndarray, L: float) -> np.ndarray:
    """Eq. (22): L (U^r / L)^(usage / capacity), per resource r (last axis), computed in log space.

    Resources with zero capacity on a node, or that no job uses (U^r = 0), get price L: no task
    that fits there can use them, so their price never enters a cost.
    """
    usage = np.asarray(usage, dtype=float)
    cap = np.broadcast_to(np.asarray(capacity, dtype=float), usage.shape)
    frac = np.divide(usage, cap, out=np.zeros_like(usage), where=cap > 0)
    lnL = math.log(L)
    lnU = np.log(np.where(U > 0, U, L))
    return np.exp(lnL + frac * (lnU - lnL))


@dataclass
class OnlineConstants:
    """U and L "from past experience": recomputed from every job that has arrived so far."""

    horizon: int
    worker_capacity: float
    ps_capacity: float
    scale: float = 1.0
    min_fraction: float = 0.0
    terms: list[JobTerms] = field(default_factory=list)
    density: bool = False  # `density_constants` instead of eq. (23)-(26)

    def observe(self, t: JobTerms) -> PriceConstants:
        self.terms.append(t)
        return self.current()

    def current(self) -> PriceConstants:
        if self.density:
            c = density_constants(self.terms, self.min_fraction)
        else:
            c = constants_from(self.terms, self.horizon, self.worker_capacity, self.ps_capacity, self.min_fraction)
        return c.scaled(self.scale) if self.scale != 1.0 else c


class UsageTable:
    """Committed use per (slot, node, resource), grown on demand: OASiS' g_h^r(t) and v_k^r(t)."""

    def __init__(self, nodes: int, resources: int, slots: int = 64):
        self.used = np.zeros((slots, nodes, resources))

    def ensure(self, slots: int) -> None:
        if slots > self.used.shape[0]:
            grow = max(slots, 2 * self.used.shape[0])
            extra = np.zeros((grow - self.used.shape[0],) + self.used.shape[1:])
            self.used = np.concatenate([self.used, extra])

    def window(self, start: int, stop: int) -> np.ndarray:
        self.ensure(stop)
        return self.used[start:stop]

    def add(self, slot: int, nodes: np.ndarray, use: np.ndarray, stop: int | None = None) -> None:
        """Add `use` (one row per node) on `nodes` in `slot`, or in every slot up to `stop` (the
        nodes of one allocation: each once)."""
        if stop is None or stop == slot + 1:
            self.ensure(slot + 1)
            np.add.at(self.used[slot], nodes, use)
            return
        self.ensure(stop)
        self.used[slot:stop, nodes] += use
