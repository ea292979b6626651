"""Per-machine speed factors: a static spread between machines and its change over time.

Why: on a public cloud two machines with the same GPU model do not run a job equally fast, and a
machine's speed drifts (thermals, clocks, co-located tenants) and sometimes collapses (a straggler).
No public trace gives per-machine speed of the same job over time (docs/HETERO.md), so both are
synthesised here and calibrated to the two published measurements that exist:

- static spread: Sinha et al., "Not All GPUs Are Created Equal" (SC'22, arXiv 2208.11035 v3):
  about 8% average and up to 22% performance variation among identical-SKU GPUs, outliers up to
  1.5x slower than the median GPU.
- fluctuation: Alibaba PAI 2020 `mini-batch-time/coefficient_variation.csv` (Weng et al.,
  NSDI'22; CC BY 4.0): the per-iteration coefficient of variation across the 10 workers of a
  distributed job is 0.02-0.12 (mostly 0.03-0.08), with stragglers that emerge mid-training.

Model (log-space, one value per node): log f_m(t) = z_m + x_m(t) - s_m(t) - c_m(t), with
- z_m = g_family(m) + u_m (+ log(1/outlier_slowdown) for an outlier): the static factor
  (`static_factors`), family = the node's rack (machines bought and racked together share a batch);
- x_m(t): an Ornstein-Uhlenbeck process sampled every `step_s`;
- s_m(t): the log slowdown of a straggler episode, c_m(t) = log(1 + sum of kappa) of the
  co-located-tenant contention episodes active at t.
The simulator applies f_m(t) through `NodeEvent(kind="speed")` (a distributed job runs at its
slowest node's speed); the static factor is the cluster's own `speed` at t = 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.sim.engine import NodeEvent

DAY_S = 86_400.0


def static_factors(
    cluster: Cluster,
    rng: np.random.Generator,
    *,
    spread: float = 0.06,
    family_spread: float = 0.05,
    outlier_prob: float = 0.02,
    outlier_slowdown: float = 1.5,
) -> np.ndarray:
    """One speed factor per node, around 1: exp(g_rack + u_node), an outlier 1/outlier_slowdown.

    Defaults (SC'22, v3): sd 0.05 per family and 0.06 per machine give a total log-sd of 0.078,
    so the mean |deviation| from the median is about 6-7% and the 1st/99th percentiles about
    17-20% off it (the paper's "8% average, 22% max"); 2% of the machines are outliers 1.5x slower
    ("up to 1.5x slower than the median"). All zero: every factor is exactly 1.0."""
    _check_nonneg(spread=spread, family_spread=family_spread)
    if not 0 <= outlier_prob <= 1 or not outlier_slowdown >= 1:
        raise ConfigError(f"outlier_prob must be in [0, 1] and outlier_slowdown >= 1, got {outlier_prob}, {outlier_slowdown}")
    n = cluster.num_nodes
    if spread == family_spread == outlier_prob == 0:
        return np.ones(n)
    racks, family = np.unique(cluster.rack, return_inverse=True)
    g = rng.normal(0.0, family_spread, len(racks))
    u = rng.normal(0.0, spread, n)
    outlier = rng.random(n) < outlier_prob
    log_z = g[family] + u - outlier * math.log(outlier_slowdown)
    return np.exp(log_z)


def _check_nonneg(**values: float) -> None:
    for k, v in values.items():
        if not (math.isfinite(v) and v >= 0):
            raise ConfigError(f"{k} must be a finite number >= 0, got {v!r}")


def _check_range(name: str, lo_hi: tuple[float, float], low: float) -> None:
    lo, hi = lo_hi
    if not (math.isfinite(lo) and math.isfinite(hi) and low <= lo <= hi):
        raise ConfigError(f"{name} must be (low, high) with {low:g} <= low <= high, got {lo_hi!r}")


def _episodes(rng: np.random.Generator, n: int, horizon_s: float, rate_per_day: float,
              duration_s: tuple[float, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Poisson episode onsets per node over the horizon: (node, start, end), durations log-uniform."""
    counts = rng.poisson(rate_per_day * horizon_s / DAY_S, n) if rate_per_day > 0 else np.zeros(n, dtype=int)
    node = np.repeat(np.arange(n), counts)
    start = rng.uniform(0.0, horizon_s, len(node))
    lo, hi = duration_s
    dur = np.exp(rng.uniform(math.log(lo), math.log(hi), len(node)))
    return node, start, start + dur


def fluctuation_events(
    cluster: Cluster,
    static: np.ndarray,
    horizon_s: float,
    rng: np.random.Generator,
    *,
    ou_sd: float = 0.05,
    ou_tau_s: float = 2700.0,
    step_s: float = 600.0,
    straggler_rate_per_day: float = 1.0,
    straggler_slowdown: tuple[float, float] = (1.3, 2.0),
    straggler_duration_s: tuple[float, float] = (1800.0, 14400.0),
    contention_rate_per_day: float = 2.0,
    contention_kappa: tuple[float, float] = (0.1, 0.3),
    contention_duration_s: tuple[float, float] = (600.0, 7200.0),
    min_change: float = 0.01,
) -> list[NodeEvent]:
    """Speed-change events over (0, horizon_s), sorted by time (then node).

    Per node, the factor is static * exp(x(t)) / straggler(t) / (1 + sum kappa(t)) (module doc):
    - x: Ornstein-Uhlenbeck, sampled exactly at t = k*step_s (k >= 1) with
      x_k = a x_{k-1} + ou_sd sqrt(1 - a^2) N(0, 1), a = exp(-step_s/ou_tau_s), x_0 from the
      stationary law N(0, ou_sd^2); it takes effect at the first grid point, so on [0, step_s) a
      node runs at its static factor (the cluster's own speed). ou_sd 0.05 with tau 45 min: the
      PAI 2020 mini-batch CoV across workers, 0.02-0.12, with the static spread on top.
    - stragglers: Poisson onsets (`straggler_rate_per_day` per node; "about 1/day", dualagent.md
      §4.1), each slowing the node by U(straggler_slowdown) for a log-uniform duration in
      `straggler_duration_s`; overlapping ones: the worst counts. The PAI job_*_norm.csv mini-batch
      series show stragglers that appear mid-training and recover.
    - contention: Poisson episodes of a co-located tenant (PAI machines host several workers, which
      request 20-50% of a GPU), each adding kappa ~ U(contention_kappa) to the load term, factor
      1 / (1 + sum kappa): the "1/(1 + kappa load), kappa 0.1-0.3" of dualagent.md §4.1.
    An event is emitted only when the factor moves by more than `min_change` (relative) from the
    node's last emitted factor, which keeps event counts small; `factor_at` reads the result back.
    """
    static = np.asarray(static, dtype=float)
    n = cluster.num_nodes
    if static.shape != (n,) or not (static > 0).all():
        raise ConfigError(f"static factors must be {n} values > 0, got shape {static.shape}")
    _check_nonneg(horizon_s=horizon_s, ou_sd=ou_sd, straggler_rate_per_day=straggler_rate_per_day,
                  contention_rate_per_day=contention_rate_per_day, min_change=min_change)
    if not (ou_tau_s > 0 and step_s > 0):
        raise ConfigError(f"ou_tau_s and step_s must be > 0, got {ou_tau_s}, {step_s}")
    _check_range("straggler_slowdown", straggler_slowdown, 1.0)
    _check_range("straggler_duration_s", straggler_duration_s, 1e-9)
    _check_range("contention_kappa", contention_kappa, 0.0)
    _check_range("contention_duration_s", contention_duration_s, 1e-9)
    if horizon_s == 0:
        return []

    # OU on the grid, vectorised over nodes: x[k] is the value on [grid[k], grid[k+1])
    grid = np.arange(1, int(math.ceil(horizon_s / step_s))) * step_s
    grid = grid[grid < horizon_s]
    x = np.zeros((len(grid), n))
    if ou_sd > 0 and len(grid):
        a = math.exp(-step_s / ou_tau_s)
        noise = rng.normal(0.0, ou_sd * math.sqrt(1 - a * a), (len(grid), n))
        prev = rng.normal(0.0, ou_sd, n)
        for k in range(len(grid)):
            prev = x[k] = a * prev + noise[k]

    s_node, s_start, s_end = _episodes(rng, n, horizon_s, straggler_rate_per_day, straggler_duration_s)
    s_log = np.log(rng.uniform(*straggler_slowdown, len(s_node)))
    c_node, c_start, c_end = _episodes(rng, n, horizon_s, contention_rate_per_day, contention_duration_s)
    c_kappa = rng.uniform(*contention_kappa, len(c_node))

    events: list[NodeEvent] = []
    for m in range(n):
        sm, cm = s_node == m, c_node == m
        bounds = np.concatenate([s_start[sm], s_end[sm], c_start[cm], c_end[cm]])
        t = np.unique(np.concatenate([grid, bounds[(bounds > 0) & (bounds < horizon_s)]]))
        k = np.searchsorted(grid, t, side="right") - 1
        logf = np.where(k >= 0, x[np.maximum(k, 0), m], 0.0)
        if sm.any():
            on = (s_start[sm][None, :] <= t[:, None]) & (t[:, None] < s_end[sm][None, :])
            logf -= np.max(np.where(on, s_log[sm][None, :], 0.0), axis=1)
        if cm.any():
            on = (c_start[cm][None, :] <= t[:, None]) & (t[:, None] < c_end[cm][None, :])
            logf -= np.log1p((on * c_kappa[cm][None, :]).sum(axis=1))
        f = static[m] * np.exp(logf)
        last = float(static[m])
        for ti, fi in zip(t.tolist(), f.tolist()):
            if abs(fi / last - 1.0) > min_change:
                events.append(NodeEvent(ti, m, "speed", fi))
                last = fi
    events.sort(key=lambda e: (e.time, e.node))
    return events


def factor_at(events: list[NodeEvent], static: np.ndarray, node: int, t: float) -> float:
    """The factor node `node` runs at, at time t, under `events` (the last speed event at or before
    t; its static factor before any): what the simulator applies, for tests and predictor scoring."""
    f = float(np.asarray(static, dtype=float)[node])
    for ev in events:
        if ev.time > t:
            break
        if ev.node == node and ev.kind == "speed":
            f = float(ev.speed)
    return f


def factors_at(events: list[NodeEvent], static: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Every node's factor at each of `times`: a (len(times), N) array (vectorised `factor_at`;
    `events` sorted by time, as `fluctuation_events` returns them)."""
    static = np.asarray(static, dtype=float)
    times = np.asarray(times, dtype=float)
    out = np.tile(static, (len(times), 1))
    speed = [e for e in events if e.kind == "speed"]
    if not speed:
        return out
    node = np.array([e.node for e in speed])
    when = np.array([e.time for e in speed])
    value = np.array([e.speed for e in speed], dtype=float)
    for m in np.unique(node).tolist():
        sel = node == m
        tm, vm = when[sel], value[sel]
        k = np.searchsorted(tm, times, side="right") - 1
        out[:, m] = np.where(k >= 0, vm[np.maximum(k, 0)], static[m])
    return out


@dataclass(frozen=True)
class Variability:
    """The parameters of `static_factors` and `fluctuation_events` in one value (see VARIABILITY
    for the named presets and docs/HETERO.md for what calibrates each number)."""

    spread: float = 0.06
    family_spread: float = 0.05
    outlier_prob: float = 0.02
    outlier_slowdown: float = 1.5
    ou_sd: float = 0.0
    ou_tau_s: float = 2700.0
    step_s: float = 600.0
    straggler_rate_per_day: float = 0.0
    straggler_slowdown: tuple[float, float] = (1.3, 2.0)
    straggler_duration_s: tuple[float, float] = (1800.0, 14400.0)
    contention_rate_per_day: float = 0.0
    contention_kappa: tuple[float, float] = (0.1, 0.3)
    contention_duration_s: tuple[float, float] = (600.0, 7200.0)
    min_change: float = 0.01

    @property
    def fluctuates(self) -> bool:
        return self.ou_sd > 0 or self.straggler_rate_per_day > 0 or self.contention_rate_per_day > 0

    def static_factors(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        return static_factors(cluster, rng, spread=self.spread, family_spread=self.family_spread,
                              outlier_prob=self.outlier_prob, outlier_slowdown=self.outlier_slowdown)

    def events(self, cluster: Cluster, static: np.ndarray, horizon_s: float,
               rng: np.random.Generator) -> list[NodeEvent]:
        if not self.fluctuates:
            return []
        return fluctuation_events(
            cluster, static, horizon_s, rng, ou_sd=self.ou_sd, ou_tau_s=self.ou_tau_s, step_s=self.step_s,
            straggler_rate_per_day=self.straggler_rate_per_day, straggler_slowdown=self.straggler_slowdown,
            straggler_duration_s=self.straggler_duration_s, contention_rate_per_day=self.contention_rate_per_day,
            contention_kappa=self.contention_kappa, contention_duration_s=self.contention_duration_s,
            min_change=self.min_change)


_NO_SPREAD = dict(spread=0.0, family_spread=0.0, outlier_prob=0.0)

#: Named levels, from none to strong (docs/HETERO.md has the table).
VARIABILITY: dict[str, Variability] = {
    "steady": Variability(**_NO_SPREAD),
    "static": Variability(),
    "fluctuating": Variability(ou_sd=0.05, straggler_rate_per_day=1.0, contention_rate_per_day=2.0),
    "strong": Variability(outlier_prob=0.05, ou_sd=0.08, straggler_rate_per_day=3.0, contention_rate_per_day=6.0),
}
