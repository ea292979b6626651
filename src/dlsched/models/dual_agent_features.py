"""What the Dual-Agent-style agents see, and what their teachers would do (the warm-up's labels).

Everything here is what a live system could know: a job's attained service, waiting and run time,
its requested GPUs; the machines' free resources, prices and GPU types; the type-level profile
(`Snapshot.profile`: a job's rate per GPU type at nominal machine speed, what Gavel-style
profiling measures); and the machine-speed estimate (the RW-OU GP's posterior, or nothing). Never a
job's total work.

The teachers (the supervised warm-up imitates them before reinforcement learning starts):
- ordering: shortest estimated remaining time first (the policy's `phases.length_rank`: Optimus'
  loss-curve and speed estimates, what a live system sees), running jobs ahead by a sixth of the
  queue; without estimates (on a cluster of several GPU types by default, or `lengths=False`; how
  the shipped models were trained) continuous Tiresias 2D-LAS — the job's Tiresias queue (attained
  GPU-seconds against 3250 / 7200 / 18000), running jobs ahead within a queue, then first come first
  served. Either way a job the placement agent can only offer a poor machine now waits for a while
  (a score below 0: not offered this decision);
- placement: the speed-aware placement (`phases.speed_aware`) over the GP: the allocation with the
  best predicted rate (type affinity × the estimate's mean less half its sd: a slow-looking machine
  that is also uncertain is avoided; a synchronous job at its slowest machine) per (USD/hour)^0.4:
  a little speed traded for a lower fee (on 10 validation episodes 0.4 gave both a lower mean JCT
  and a lower fee than Gavel-style; 0, 0.25, 0.5, 0.6 and 0.75 were tried). Where that placement
  has no answer for a pick, the machine with the best predicted speed (a whole-job fit worth 10%).
"""

from __future__ import annotations

import math

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import GPU, Cluster
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.framework.packing import eligible, fit_count
from dlsched.framework.las import THRESHOLDS, queue_of
from dlsched.models.dual_agent_net import GLOBAL_FEATURES, JOB_FEATURES, MACHINE_FEATURES, PICK_FEATURES

FIT_BONUS = 0.1  # the placement teacher's preference for one machine over several (log speed)
RISK = 0.5  # the placement teacher plans with mean - RISK * sd of the log speed
PRICE_WEIGHT = 0.4  # ... and maximises predicted rate / (USD per hour)^PRICE_WEIGHT
WAIT_BELOW = 0.6  # the ordering teacher holds back a job that would start below this share of its best speed
MAX_WAIT_S = 8 * 3600.0  # ... for at most this long
LENGTH_RUNNING_BONUS = 0.5  # with length estimates, a running job's lead (in 3 x its rank share)


class Affinity:
    """A job's speed on each GPU type relative to its best type, at its requested size, from the
    type-level profile (1 everywhere without one). The (N,) array is made once per (model, size)
    and cluster: it is read for every job at every decision, and on 1,213 machines rebuilding it
    node by node each time was most of a decision."""

    def __init__(self) -> None:
        self._cache: dict[tuple, np.ndarray] = {}
        self._cluster: Cluster | None = None
        self._profile = None

    def of(self, profile, spec: JobSpec, cluster: Cluster) -> np.ndarray:
        """(N,) log affinity of `spec` for each node's GPU type (0 = its best type); read-only."""
        if cluster is not self._cluster or profile is not self._profile:
            self._cluster, self._profile, self._cache = cluster, profile, {}
            names, self._index, first = cluster.type_groups()
            self._rep = dict(zip(names, first.tolist()))  # a node of each type
            self._zeros = np.zeros(cluster.num_nodes)
            self._zeros.setflags(write=False)
        if profile is None:
            return self._zeros
        key = (spec.model, spec.arch, spec.num_workers, spec.num_ps)
        out = self._cache.get(key)
        if out is None:
            out = self._cache[key] = self._compute(profile, spec, cluster)
        return out

    def _compute(self, profile, spec: JobSpec, cluster: Cluster) -> np.ndarray:
        rates = {}
        for t, node in self._rep.items():
            try:  # at the job's own size, all on one machine of the type
                rates[t] = float(profile.rate(spec, Allocation.single_node(node, spec.num_workers, spec.num_ps), cluster))
            except Exception:  # a model that cannot price this type: treat it as average
                rates[t] = float("nan")
        finite = [r for r in rates.values() if math.isfinite(r) and r > 0]
        best = max(finite) if finite else 1.0
        # a type where the job makes no progress (Gavel measured ResNet-50 at batch 128 on 2+ K80s: 0)
        # is -inf: never picked; one the profile cannot price is taken as 20x slower than the best
        logs = np.array([(math.log(r / best) if r > 0 else -math.inf) if math.isfinite(r) else -3.0
                         for r in rates.values()])
        out = logs[self._index]
        out.setflags(write=False)
        return out


def worker_room(free: np.ndarray, spec: JobSpec, cluster: Cluster) -> np.ndarray:
    """(N,) how many of the job's workers fit on each node now (0 on nodes of another type)."""
    room = fit_count(free, np.asarray(spec.worker_demand, dtype=float)).astype(float)
    mask = eligible(cluster, spec)
    return room if mask is None else np.where(mask, room, 0.0)


def machine_features(snap: Snapshot, mu: np.ndarray, sd: np.ndarray, free: np.ndarray) -> np.ndarray:
    """(N, MACHINE_FEATURES): log speed mean and sd, free GPU share, size, price share, busy."""
    c = snap.cluster
    cap = c.capacity[:, GPU]
    price = c.price if c.price is not None else np.zeros(c.num_nodes)
    pmax = price.max() if price.max() > 0 else 1.0
    frac = np.where(cap > 0, free[:, GPU] / np.maximum(cap, 1e-9), 0.0)
    out = np.stack([mu, sd, frac, cap / 8.0, price / pmax, (free[:, GPU] < cap - 1e-9).astype(float)], 1)
    assert out.shape[1] == MACHINE_FEATURES
    return out.astype(np.float32)


def pick_features(aff: np.ndarray, room: np.ndarray, remaining: int, chosen: np.ndarray,
                  first_type: str | None, types: np.ndarray) -> np.ndarray:
    """(N, PICK_FEATURES) for one pick: log type affinity, fits the rest, room share, chosen, same type."""
    same = np.ones(len(room)) if first_type is None else (types == first_type).astype(float)
    out = np.stack([np.maximum(aff, -3.0), (room >= remaining).astype(float), np.minimum(room / max(remaining, 1), 1.0),
                    chosen.astype(float), same], 1)
    assert out.shape[1] == PICK_FEATURES
    return out.astype(np.float32)


def teacher_pick(aff: np.ndarray, mu: np.ndarray, sd: np.ndarray, room: np.ndarray, remaining: int,
                 mask: np.ndarray) -> int:
    """The placement teacher's machine for one pick (see the module doc)."""
    score = aff + mu - RISK * sd + FIT_BONUS * (room >= remaining) + 1e-3 * np.minimum(room, remaining)
    return int(np.argmax(np.where(mask, score, -np.inf)))


def teacher_scores(jobs: list[JobState], speed: np.ndarray | None = None, length: np.ndarray | None = None) -> np.ndarray:
    """Continuous Tiresias (queue first, lower is better; running ahead within a queue; then
    first come first served), all >= 0: every job is offered. With `length` (each job's place in
    the order by estimated remaining time as a share of the jobs, `phases.length_rank`), that place
    takes the queues' part: shortest estimated remaining time first, running ahead by a sixth of
    the queue. With the placement agent's word
    (`speed`: the best relative speed a machine with room offers each job now), a waiting job that
    could only start at less than WAIT_BELOW of its best speed scores -1 (it waits for a better
    machine) until it has waited MAX_WAIT_S: starting ResNet-50 on a K80 costs it 7x."""
    if not jobs:
        return np.zeros(0)
    running = np.array([j.allocation is not None for j in jobs], dtype=float)
    if length is not None:
        out = 4.0 - 3.0 * np.asarray(length, dtype=float) + LENGTH_RUNNING_BONUS * running
    else:
        ranks = np.argsort(np.argsort([j.rank for j in jobs])) / max(len(jobs), 1)
        out = np.array([4.0 - float(queue_of(THRESHOLDS, j.attained_service)) for j in jobs]) + 0.5 * running - 0.4 * ranks
    if speed is not None:
        for i, j in enumerate(jobs):
            if j.allocation is None and speed[i] < WAIT_BELOW and j.waited < MAX_WAIT_S:
                out[i] = -1.0
    return out


def job_features(snap: Snapshot, jobs: list[JobState], best_speed: np.ndarray, best_price: np.ndarray) -> np.ndarray:
    """(J, JOB_FEATURES). The last two are the placement agent's word on each job: the predicted
    relative speed it would get now and the price share of that machine (zeros without communication)."""
    out = np.zeros((len(jobs), JOB_FEATURES), dtype=np.float32)
    for i, j in enumerate(jobs):
        out[i, :6] = (math.log1p(j.attained_service / 3600.0), math.log1p(j.waited / 3600.0),
                      math.log1p(j.run_time / 3600.0), j.spec.gpus_requested / 8.0,
                      float(j.allocation is not None), min(j.preemptions, 3) / 3.0)
    out[:, 6] = best_speed
    out[:, 7] = best_price
    return out


def global_features(snap: Snapshot, mu: np.ndarray, sd: np.ndarray, free: np.ndarray, since: float) -> np.ndarray:
    """(GLOBAL_FEATURES,) for the critic."""
    c = snap.cluster
    cap = max(c.total_gpus, 1)
    pend = snap.pending
    att = np.mean([math.log1p(j.attained_service / 3600.0) for j in pend]) if pend else 0.0
    need = sum(j.spec.gpus_requested for j in pend) / cap
    out = np.array([len(pend) / 32.0, snap.num_running / 32.0, free[:, GPU].sum() / cap, mu.mean(), sd.mean(),
                    att, min(need, 4.0), min(since / 3600.0, 4.0)], dtype=np.float32)
    assert len(out) == GLOBAL_FEATURES
    return out
