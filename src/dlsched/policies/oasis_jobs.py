"""How OASiS sees one job's work (the paper's chunk model, a rigid gang, or a job's real speed at each
size), the constant-size schedule search, and the slot length and horizon a workload calls for.

Why a separate module: `oasis.py` is the policy (admission, commitment, execution); this is what it
plans *with*. Three kinds of job:

- `oasis:ps` jobs: the paper's model (work units of data chunks, workers needed per slot for d
  units); Alg. 2's DP over units (`oasis_schedule.best_schedule`).
- elastic jobs whose true speed the policy may read (it runs as an oracle, so `snap.oracle` is the
  simulator's throughput model: measured curves for ITP jobs): a few sizes in the job's
  [min, max] range, each with the slots its real speed needs there (`SizeOption`); the schedule is
  the best of the per-size constant-size schedules (`best_sized_schedule`). Why constant size: a
  long job on short slots needs hundreds of work units, and Alg. 2's DP is O(T K^2) in them; one
  size per job is exact for each size and never restarts a job to change its size.
- any other job: a rigid gang at its requested size for ceil(duration / slot) slots.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from dlsched.core.errors import ConfigError
from dlsched.core.job import Architecture, JobSpec
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.framework.packing import pack
from dlsched.policies.oasis_schedule import Market, Schedule, place_plan, slot_costs
from dlsched.throughput.oasis_model import MODEL_KEY, minibatch_seconds

#: The slot-length rule (`workload_slots`): slots this many times shorter than the 10th-percentile
#: job, in whole minutes within [1 min, 1 h] (the paper's slot is "1 hour or longer").
SLOT_DIVISOR = 8.0
SLOT_BOUNDS = (60.0, 3600.0)
#: ... and a horizon of this many times the longest job at its requested size.
HORIZON_FACTOR = 3.0


def workload_slots(jobs: Sequence[JobSpec]) -> tuple[float, int] | None:
    """(slot_seconds, horizon in slots) for OASiS on these jobs; see the module constants. None
    when no job has a trace duration (then OASiS keeps its own defaults).

    Why these: a job waits for the next slot boundary and holds whole slots, so the slot must be
    short next to the short jobs (a duration-derived utility decays on the scale of the job's own
    duration, target 2d); a horizon shorter than a job cannot plan it, and one far longer than
    any job's useful window only grows the tables. 3x the longest job covers a target of twice
    its duration and the decay after it. Only trace durations are read (what an operator sizing
    the slots would look at in the trace's history), never a job's work; the paper's `oasis:ps`
    jobs have none (their runs set both).
    """
    durs = np.array([j.duration for j in jobs if j.duration is not None], dtype=float)
    durs = durs[np.isfinite(durs) & (durs > 0)]
    if not len(durs):
        return None
    raw = float(np.percentile(durs, 10)) / SLOT_DIVISOR
    slot = float(min(max(60.0 * math.floor(raw / 60.0), SLOT_BOUNDS[0]), SLOT_BOUNDS[1]))
    return slot, max(1, math.ceil(HORIZON_FACTOR * float(durs.max()) / slot))


@dataclass(frozen=True)
class Profile:
    """How OASiS sees one job's work: tasks per slot for d work units, and the constants' terms."""

    workers_for: np.ndarray  # (K+1,) -1 where impossible
    ps_for: np.ndarray
    fastest_slots: int
    work_slots: float  # worker-slots


@dataclass(frozen=True)
class SizeOption:
    """One constant size an elastic job may run at, and the slots its true speed needs there."""

    workers: int
    ps: int
    slots: int


def profile(spec: JobSpec, slot: float, max_units: int, work: float | None = None) -> Profile:
    """The paper's chunk model for `oasis:ps` jobs; a rigid gang for every other job.

    `work` is the job's known total (`oasis.known_work`); a rigid job without a trace duration at
    its requested size is a duration-only job, whose iterations are seconds at that size.
    """
    if spec.model == MODEL_KEY:
        ex = spec.extra
        t = minibatch_seconds(ex) / slot  # slots per mini-batch
        E, N, M = int(ex["epochs"]), int(ex["chunks"]), int(ex["minibatches"])
        chunks = E * N
        g = math.ceil(chunks / max_units)
        K = math.ceil(chunks / g)
        d = np.arange(K + 1)
        w = np.ceil(d * g * M * t - 1e-9).astype(np.int64)
        ratio = float(ex["worker_gbps"]) / float(ex["ps_gbps"])
        p = np.where(w > 0, np.maximum(1, np.ceil(w * ratio - 1e-9)), 0).astype(np.int64)
        bad = (w > min(N, spec.max_workers)) | ((w > 0) & (w < spec.min_workers)) | (p > w) | (p > spec.max_ps)
        w[bad] = -1
        return Profile(w, p, max(1, math.ceil(E * M * t - 1e-9)), float(math.ceil(chunks * M * t - 1e-9)))
    dur = spec.duration if spec.duration is not None else (work if spec.model == "duration-only" else None)
    if dur is None:
        raise ConfigError(
            f"job {spec.job_id!r}: OASiS needs known work (an '{MODEL_KEY}' job or a trace duration), "
            f"model {spec.model!r} has neither"
        )
    K = max(1, math.ceil(dur / slot - 1e-9))
    w = np.full(K + 1, -1, dtype=np.int64)
    p = np.zeros(K + 1, dtype=np.int64)
    w[0], w[1] = 0, spec.num_workers
    p[1] = spec.num_ps if spec.arch is Architecture.PS else 0
    return Profile(w, p, K, float(K * spec.num_workers))


def candidate_sizes(spec: JobSpec) -> list[int]:
    """Sizes an elastic job is planned at: its min and requested size and the powers of two between
    (the sizes its curve was measured at), smallest first.

    Why never above the requested size: prices stay near L until a server is nearly full (eq. (22)),
    so at low usage a larger size costs nothing and any earlier completion wins; every job would
    take its largest size at its sublinear speed and the next arrivals find the cluster full (on
    the embedded ITP slice, 600 s slots, total utility 54 with sizes up to the max, 198 up to the
    requested size). Smaller sizes are where a flat curve gives most work per GPU."""
    lo = spec.min_workers
    hi = min(spec.max_workers, max(spec.num_workers, lo))
    sizes = {lo, hi}
    sizes.update(1 << k for k in range(hi.bit_length()) if lo <= 1 << k <= hi)
    return sorted(sizes)


def size_options(job: JobState, snap: Snapshot, slot: float, work: float) -> list[SizeOption] | None:
    """The job's sizes with the slots its *true* speed needs at each (packed on the empty cluster,
    as the curves were measured), or None when the policy may not read true speeds (no oracle),
    the job cannot shrink, or it uses parameter servers (planned rigidly)."""
    spec = job.spec
    shrinks = min(spec.num_workers, spec.max_workers) > spec.min_workers
    if snap.oracle is None or not shrinks or spec.arch is Architecture.PS or spec.model == MODEL_KEY:
        return None
    left = max(0.0, work - job.progress)
    out = []
    for w in candidate_sizes(spec):
        alloc = pack(snap.cluster, snap.cluster.capacity, spec, w, 0)
        rate = snap.oracle.rate(spec, alloc, snap.cluster) if alloc is not None else 0.0
        if rate > 0:
            out.append(SizeOption(w, 0, max(1, math.ceil(left / (rate * slot) - 1e-9))))
    return out or None


def rigid_costs(m: Market, workers: int, ps: int) -> np.ndarray:
    """COST_t of one fixed (workers, ps) in every slot of the window at once (+inf where it does
    not fit): `slot_costs` for a single candidate, vectorised over slots."""
    if m.shared and ps > 0:  # the PS room depends on where the workers went: slot by slot
        return np.array([slot_costs(m, t, np.array([workers]), np.array([ps]))[0] for t in range(m.slots)])
    cost = np.zeros(m.slots)
    ok = np.ones(m.slots, dtype=bool)
    for price, cap, n in ((m.wprice, m.wcap, workers), (m.pprice, m.pcap, ps)):
        if n == 0:
            continue
        order = np.argsort(price, axis=1, kind="stable")
        c = np.take_along_axis(cap, order, axis=1)
        x = np.clip(n - (np.cumsum(c, axis=1) - c), 0, c)
        cost += (x * np.take_along_axis(price, order, axis=1)).sum(axis=1)
        ok &= x.sum(axis=1) == n
    return np.where(ok, cost, np.inf)


def packs(m: Market, workers: int, ps: int) -> bool:
    """Whether a constant-size job is planned on one server per slot: a worker-only gang that some
    server can hold whole. Why: the greedy of Theorem 1 splits a gang over the cheapest servers,
    but a gang split over servers runs slower than planned on measured curves (a ring all-reduce
    over the network: a 4-GPU vgg16 job on 195job ran 4x past its plan), so the plan would be a
    promise the job cannot keep."""
    return ps == 0 and m.slots > 0 and 0 < workers <= int(m.wcap.max())


def packed_costs(m: Market, workers: int) -> np.ndarray:
    """Per slot, the cost of the whole gang on its cheapest server with room (+inf where none)."""
    price = np.where(m.wcap >= workers, m.wprice, np.inf)
    return workers * price.min(axis=1)


def _place_packed(m: Market, units: np.ndarray, last: int, workers: int) -> tuple[list, list]:
    """The cheapest server with room in the first planned slot, then the same server while it has
    room. Why not the cheapest every slot: each move is a restart the plan does not count (a job
    that falls seconds behind its plan can then wait hours for uncommitted room), and below full
    use the servers' price differences are ~L, far below what a restart costs."""
    xs: list = []
    prev = -1
    for t in range(last + 1):
        if not units[t]:
            xs.append(None)
            continue
        price = np.where(m.wcap[t] >= workers, m.wprice[t], np.inf)
        h = prev if prev >= 0 and np.isfinite(price[prev]) else int(np.argmin(price))
        x = np.zeros(m.wcap.shape[1], dtype=np.int64)
        x[h] = workers
        xs.append(x)
        prev = h
    return xs, [None if x is None else np.zeros(m.pcap.shape[1], dtype=np.int64) for x in xs]


def _rack_costs(m: Market, workers: int, racks: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per slot, the greedy cost of a worker-only gang kept inside one rack (the cheapest rack),
    and which rack; +inf where no rack has room. Why: a gang spread over racks pays the all-reduce
    over the slower link (a 16-GPU job on 195job took 10x its planned time)."""
    costs = np.stack([rigid_costs(replace(m, wprice=m.wprice[:, cols], wcap=m.wcap[:, cols]), workers, 0) for cols in racks])
    return costs.min(axis=0), costs.argmin(axis=0)


def _place_in_racks(m: Market, units: np.ndarray, last: int, workers: int, racks, which: np.ndarray) -> tuple[list, list]:
    xs: list = []
    for t in range(last + 1):
        if not units[t]:
            xs.append(None)
            continue
        cols = racks[int(which[t])]
        order = cols[np.argsort(m.wprice[t, cols], kind="stable")]
        x = np.zeros(m.wcap.shape[1], dtype=np.int64)
        x[order] = np.clip(workers - (np.cumsum(m.wcap[t, order]) - m.wcap[t, order]), 0, m.wcap[t, order])
        xs.append(x)
    return xs, [None if x is None else np.zeros(m.pcap.shape[1], dtype=np.int64) for x in xs]


def best_rigid_schedule(
    m: Market, utilities: np.ndarray, workers: int, ps: int, slots_needed: int, racks: Sequence[np.ndarray] | None = None,
    defer: float = 1.0,
) -> Schedule:
    """Alg. 2's DP when a slot holds at most one unit (a constant-size job): the K cheapest slots up to t.

    The general DP would be O(T K^2) with K up to hundreds of slots; here each completion slot's
    best cost is its own cost plus the K-1 cheapest feasible slots before it (kept in a heap as t
    grows), which is the same optimum.
    """
    packed = packs(m, workers, ps)
    in_rack = not packed and ps == 0 and racks is not None and len(racks) > 1
    if packed:
        costs = packed_costs(m, workers)
    elif in_rack:
        costs, which = _rack_costs(m, workers, racks)
    else:
        costs = rigid_costs(m, workers, ps)
    k = slots_needed - 1
    heap: list[float] = []  # the k cheapest finite costs before t, negated (a max-heap)
    total = 0.0
    best_payoff, best_t, best_cost = -np.inf, -1, np.inf
    for t in range(m.slots):
        if best_t >= 0 and utilities[t] <= best_payoff:
            break
        c = float(costs[t])
        if math.isfinite(c) and len(heap) == k:  # completion in t means the job runs in t
            if utilities[t] - (c + total) > best_payoff:
                best_payoff, best_t, best_cost = utilities[t] - (c + total), t, c + total
        if math.isfinite(c) and k > 0:
            if len(heap) < k:
                heapq.heappush(heap, -c)
                total += c
            elif c < -heap[0]:
                total += c + heapq.heappushpop(heap, -c)
    units = np.zeros(m.slots, dtype=np.int64)
    if best_t < 0:
        return Schedule(-np.inf, 0.0, np.inf, -1, units, [], [])
    late = _deferred(costs, utilities, k, best_t, best_payoff, defer) if defer < 1.0 and best_payoff > 0 else None
    if late is not None:
        best_t, best_cost, best_payoff, picked = late
        units[best_t] = 1
        units[picked] = 1
    else:
        units[best_t] = 1
        if k > 0:
            units[np.argsort(costs[:best_t], kind="stable")[:k]] = 1
    if packed:
        xs, zs = _place_packed(m, units, best_t, workers)
    elif in_rack and np.isfinite(costs[units > 0]).all():
        xs, zs = _place_in_racks(m, units, best_t, workers, racks, which)
    else:
        xs, zs = place_plan(m, units, best_t, np.array([0, workers]), np.array([0, ps]))
    return Schedule(float(best_payoff), float(utilities[best_t]), float(best_cost), best_t, units, xs, zs)


def _deferred(
    costs: np.ndarray, utilities: np.ndarray, k: int, best_t: int, best_payoff: float, defer: float
) -> tuple[int, float, float, np.ndarray] | None:
    """The latest completion slot whose utility is still >= `defer` x the best schedule's, with the
    k cheapest slots before it (the latest among equal prices), if its payoff stays > 0.

    Why: on an idle future every slot costs ~L, so the best schedule takes the earliest slots and a
    long job, whose utility barely moves over its own slack, reserves the near future that short
    jobs arriving next need (they are then rejected: nothing fits while they are worth anything).
    Committed late, it still runs early in idle room (`OASiS(work_conserving=True)`) and keeps a
    guarantee of `defer` x its best utility; later arrivals find the near slots free.
    """
    floor = defer * utilities[best_t]
    ok = np.isfinite(costs)
    before = np.cumsum(ok) - ok  # finite slots before each t
    cand = np.flatnonzero((utilities >= floor) & ok & (before >= k))
    cand = cand[cand >= best_t]
    if not len(cand) or cand[-1] == best_t:
        return None
    t = int(cand[-1])
    prior = costs[:t][::-1]
    picked = (t - 1 - np.argsort(prior, kind="stable")[:k]) if k > 0 else np.zeros(0, dtype=np.int64)
    cost = float(costs[t] + costs[picked].sum())
    payoff = float(utilities[t]) - cost
    return (t, cost, payoff, picked) if payoff > 0 else None


def best_sized_schedule(
    m: Market, utilities: np.ndarray, options: Sequence[SizeOption], racks: Sequence[np.ndarray] | None = None,
    defer: float = 1.0,
) -> Schedule:
    """The highest-payoff constant-size schedule over the job's sizes (the smaller size on a tie);
    with `defer` < 1, that size's schedule committed late (`best_rigid_schedule`)."""
    best, pick = None, None
    for o in options:
        s = best_rigid_schedule(m, utilities, o.workers, o.ps, o.slots, racks)
        if best is None or s.payoff > best.payoff:
            best, pick = s, o
    if defer < 1.0 and best.feasible and best.payoff > 0:
        return best_rigid_schedule(m, utilities, pick.workers, pick.ps, pick.slots, racks, defer)
    return best
