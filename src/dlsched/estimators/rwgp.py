"""RW-OU GP: a Gaussian-process estimate of every machine's speed, shared across similar machines
and tracking change over time. Our reconstruction of the Dual-Agent paper's "Random Walk Gaussian
Process" (KDD'23; only its abstract is public: research/dualagent.md §1.3, §4.3).

What is estimated: each machine's log speed factor s_m(t) (1.0 = the type-level profile's speed),
as the sum of
- a static part, the machine's own lasting deviation (same-model GPUs differ ~8%, SC'22), with a
  prior covariance `sd_static² · K_G`: K_G is the p-step random-walk kernel (a·I − L̃)^p on a
  machine-similarity graph (edges between machines of the same GPU type, twice as strong within one
  rack: machines bought and racked together perform alike), locally normalised to a unit diagonal
  (Urry & Sollich, JMLR 2013). One machine measured slow moves its rack-mates' estimates too.
- a fluctuating part per machine, an Ornstein-Uhlenbeck (mean-reverting random walk) process
  with stationary sd `sd_dynamic` and time constant `tau_s`: stragglers and contention come and go.
  Its kernel over time is sd²·exp(−|Δt|/τ), which is Markov, so the separable GP is a linear
  Gaussian state-space model and exact inference is a Kalman filter over [static; dynamic].

Observations: what jobs' workers measured on their nodes (`JobState.node_speeds` of the running
jobs and of those that finished or stopped since the last call), each
`y = log factor` with noise `sd_noise`, taken at most once per `every_s` per machine (repeated
reads of one unchanged measurement are not independent evidence).

`fluctuating=False` is the "no fluctuation-awareness" ablation: no dynamic part, so a machine's
estimate is the average of everything ever seen there. Large clusters are split into blocks of at
most `block` machines (grouped by type and rack) that share nothing with each other: the filter
costs O(block³) per update instead of O(N³).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dlsched.core.cluster import Cluster
from dlsched.core.snapshot import Snapshot


def random_walk_kernel(w: np.ndarray, a: float = 2.0, p: int = 3) -> np.ndarray:
    """The p-step random-walk kernel (a·I − L̃)^p of a graph with weights `w` (symmetric, zero
    diagonal), L̃ the normalised Laplacian, rescaled to unit diagonal (local normalisation)."""
    n = len(w)
    deg = w.sum(axis=1)
    inv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    lap = np.eye(n) - inv[:, None] * w * inv[None, :]
    k = np.linalg.matrix_power(a * np.eye(n) - lap, p)
    d = np.sqrt(np.diag(k))
    return k / d[:, None] / d[None, :]


def similarity_graph(gpu_type: np.ndarray, rack: np.ndarray) -> np.ndarray:
    """Edges between machines of one GPU type; weight 2 within a rack, 1 across racks."""
    same_type = gpu_type[:, None] == gpu_type[None, :]
    w = same_type * (1.0 + (rack[:, None] == rack[None, :]))
    np.fill_diagonal(w, 0.0)
    return w.astype(float)


def gp_posterior(k: np.ndarray, idx: np.ndarray, y: np.ndarray, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """The textbook GP posterior (zero prior mean) at every point of `k` given observations `y`
    at points `idx` with iid noise variance `noise`: mean K_*o (K_oo + σ²I)⁻¹ y and the marginal
    variances. The Kalman filter below must agree with it on a static problem (tested)."""
    koo = k[np.ix_(idx, idx)] + noise * np.eye(len(idx))
    kso = k[:, idx]
    mean = kso @ np.linalg.solve(koo, y)
    var = np.diag(k) - np.einsum("ij,ji->i", kso, np.linalg.solve(koo, kso.T))
    return mean, var


@dataclass
class _Block:
    nodes: np.ndarray  # cluster node indices
    mean: np.ndarray  # (2n,) or (n,): [static; dynamic]
    cov: np.ndarray
    t: float = 0.0


@dataclass
class RWOUGP:
    """Per-machine speed estimate (a `SpeedEstimate`: observe, reset, speeds). See the module doc."""

    sd_static: float = 0.08
    sd_dynamic: float = 0.15
    tau_s: float = 2700.0
    sd_noise: float = 0.02
    every_s: float = 300.0
    fluctuating: bool = True
    rw_a: float = 2.0
    rw_p: int = 3
    block: int = 64
    _cluster: Cluster | None = field(default=None, repr=False)
    _blocks: list[_Block] = field(default_factory=list, repr=False)
    _where: np.ndarray | None = field(default=None, repr=False)  # node -> (block, position)
    _last_seen: dict[int, tuple[float, float]] = field(default_factory=dict, repr=False)

    def reset(self) -> None:
        self._cluster, self._blocks, self._where, self._last_seen = None, [], None, {}

    # ------------------------------------------------------------------ setup
    def _setup(self, cluster: Cluster, now: float) -> None:
        self._cluster = cluster
        order = np.lexsort((np.arange(cluster.num_nodes), cluster.rack, cluster.gpu_type.astype(str)))
        self._where = np.zeros((cluster.num_nodes, 2), dtype=int)
        self._blocks = []
        for b, start in enumerate(range(0, len(order), self.block)):
            nodes = order[start:start + self.block]
            k = random_walk_kernel(similarity_graph(cluster.gpu_type[nodes], cluster.rack[nodes]), self.rw_a, self.rw_p)
            n = len(nodes)
            cov = self.sd_static ** 2 * k
            if self.fluctuating:
                cov = np.block([[cov, np.zeros((n, n))], [np.zeros((n, n)), self.sd_dynamic ** 2 * np.eye(n)]])
            self._blocks.append(_Block(nodes, np.zeros(len(cov)), cov, now))
            self._where[nodes, 0] = b
            self._where[nodes, 1] = np.arange(n)

    def _advance(self, blk: _Block, now: float) -> None:
        """Time update: the dynamic part decays towards 0 and gains process noise."""
        dt = now - blk.t
        blk.t = now
        if not self.fluctuating or dt <= 0:
            return
        n = len(blk.nodes)
        a = math.exp(-dt / self.tau_s)
        blk.mean[n:] *= a
        blk.cov[n:, :] *= a
        blk.cov[:, n:] *= a
        blk.cov[n:, n:] += (1.0 - a * a) * self.sd_dynamic ** 2 * np.eye(n)

    # ------------------------------------------------------------------ observe
    def observe(self, snap: Snapshot) -> None:
        if self._cluster is not snap.cluster:
            self._setup(snap.cluster, snap.now)
        seen: dict[int, float] = {}
        for job in (*snap.running, *snap.finished, *snap.stopped):  # a run may begin and end between calls
            if job.node_speeds:
                for node, f in job.node_speeds.items():
                    last = self._last_seen.get(node)
                    if last is None or snap.now - last[0] >= self.every_s or abs(last[1] - f) > 1e-9:
                        seen[node] = f
        if seen:
            self.update(snap.now, seen)

    def update(self, now: float, seen: dict[int, float]) -> None:
        """Fold in measured factors {node: factor} taken at `now` (the Kalman measurement update)."""
        by_block: dict[int, list[tuple[int, float]]] = {}
        for node, f in seen.items():
            self._last_seen[node] = (now, f)
            b, pos = self._where[node]
            by_block.setdefault(int(b), []).append((int(pos), math.log(f)))
        for b, obs in by_block.items():
            blk = self._blocks[b]
            self._advance(blk, now)
            n = len(blk.nodes)
            pos = np.array([p for p, _ in obs])
            y = np.array([v for _, v in obs])
            h = np.zeros((len(obs), len(blk.mean)))
            h[np.arange(len(obs)), pos] = 1.0
            if self.fluctuating:
                h[np.arange(len(obs)), n + pos] = 1.0
            hc = h @ blk.cov  # (k, 2n): k observations, k much smaller than the block
            s = hc @ h.T + self.sd_noise ** 2 * np.eye(len(obs))
            gain = np.linalg.solve(s, hc).T
            blk.mean = blk.mean + gain @ (y - h @ blk.mean)
            # gain @ (h @ cov), not (gain @ h) @ cov: k x (2n)^2 products instead of (2n)^3 — on the
            # Alibaba 2023 node list (1,213 machines) this line was most of a dual-agent run
            blk.cov = blk.cov - gain @ hc
            blk.cov = 0.5 * (blk.cov + blk.cov.T)

    # ------------------------------------------------------------------ predict
    def log_speeds(self, now: float, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and sd of every machine's log speed factor at `now`."""
        if self._cluster is not cluster:
            self._setup(cluster, now)
        mu = np.zeros(cluster.num_nodes)
        sd = np.zeros(cluster.num_nodes)
        for blk in self._blocks:
            n = len(blk.nodes)
            m, c = blk.mean[:n].copy(), np.diag(blk.cov)[:n].copy()
            if self.fluctuating:
                dt = max(0.0, now - blk.t)
                a = math.exp(-dt / self.tau_s)
                dyn_var = a * a * np.diag(blk.cov)[n:] + (1 - a * a) * self.sd_dynamic ** 2
                cross = np.diag(blk.cov[:n, n:]) * a
                m = m + a * blk.mean[n:]
                c = c + dyn_var + 2 * cross
            mu[blk.nodes], sd[blk.nodes] = m, np.sqrt(np.maximum(c, 0.0))
        return mu, sd

    def speeds(self, now: float, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
        """Predicted speed factor of every machine (exp of the log mean) and its log-scale sd."""
        mu, sd = self.log_speeds(now, cluster)
        return np.exp(mu), sd
