"""Placement phase: which nodes get a job's workers and parameter servers.

All strategies work on the (N, 3) free-resource array with NumPy, never per-node Python loops
over the whole cluster, so a round stays fast at 10,000 GPUs.

- `Pack`: fewest nodes (best-fit single node first, then the roomiest nodes, rack-local first):
  what locality-aware schedulers do.
- `Spread`: task by task on the least-allocated node (the default Kubernetes LeastAllocated score):
  balances load, scatters jobs.
- `LeastLoaded`: task by task on the node with the least used resources (DL2's simulator).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec

_EPS = 1e-9


def fit_count(free: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """How many tasks of `demand` fit on each node (a large number where demand is all zero)."""
    need = demand > 0
    if not need.any():
        return np.full(free.shape[0], 1 << 30)
    return np.floor((free[:, need] + _EPS) / demand[need]).min(axis=1).astype(np.int64)


def _eligible(cluster: Cluster, spec: JobSpec) -> np.ndarray | None:
    return None if not spec.gpu_type else cluster.type_mask(spec.gpu_type)


@dataclass(frozen=True)
class Pack:
    """Consolidate: one node if any fits the whole job (best fit), else as few nodes as possible."""

    name: str = "pack"

    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        return pack(cluster, free, spec, workers, ps)


def pack(
    cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
) -> Allocation | None:
    wd = np.asarray(spec.worker_demand)
    pd = np.asarray(spec.ps_demand)
    mask = _eligible(cluster, spec)
    avail = free if mask is None else np.where(mask[:, None], free, 0.0)
    total = workers * wd + ps * pd
    whole = (avail + _EPS >= total).all(axis=1)
    if whole.any():
        cand = np.flatnonzero(whole)
        # best fit: the node left with the least free GPU (then CPU), lowest index on ties
        left = avail[cand] - total
        best = cand[np.lexsort((cand, left[:, 1], left[:, 0]))[0]]
        return Allocation.single_node(int(best), workers, ps)
    if workers + ps <= 1:
        return None
    w_fit = fit_count(avail, wd)
    if int(np.minimum(w_fit, workers).sum()) < workers:
        return None
    # Fill the roomiest nodes first, preferring the rack with the most room so the job stays
    # rack-local when it can.
    rack_room = np.bincount(cluster.rack, weights=np.minimum(w_fit, workers))
    order = np.lexsort((np.arange(len(w_fit)), -w_fit, -rack_room[cluster.rack]))
    w_counts = np.zeros(len(w_fit), dtype=np.int64)
    p_counts = np.zeros(len(w_fit), dtype=np.int64)
    left_w, left_p = workers, ps
    room = avail.copy()
    # Place PSs beside the workers: each visited node takes its share of workers, then PSs fit in
    # what remains there; PSs still unplaced go to any node with room afterwards.
    for n in order:
        if left_w == 0:
            break
        k = int(min(w_fit[n], left_w))
        if k <= 0:  # nodes are ordered rack-first, so a full node does not end the search
            continue
        w_counts[n] = k
        room[n] -= k * wd
        left_w -= k
        if left_p:
            kp = int(min(fit_count(room[n : n + 1], pd)[0], left_p, max(1, -(-ps * k // workers))))
            p_counts[n] = kp
            room[n] -= kp * pd
            left_p -= kp
    if left_w:
        return None
    if left_p:
        p_fit = fit_count(room, pd)
        for n in np.argsort(-p_fit, kind="stable"):
            if left_p == 0 or p_fit[n] <= 0:
                break
            kp = int(min(p_fit[n], left_p))
            p_counts[n] += kp
            left_p -= kp
        if left_p:
            return None
    return Allocation.from_counts(w_counts, p_counts)


def _task_by_task(
    cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int, score
) -> Allocation | None:
    """Place tasks one at a time on the best-scoring node that fits (PSs first, then workers)."""
    mask = _eligible(cluster, spec)
    room = free.copy()
    if mask is not None:
        room[~mask] = 0.0
    counts = {0: np.zeros(len(room), dtype=np.int64), 1: np.zeros(len(room), dtype=np.int64)}
    tasks = [(1, np.asarray(spec.ps_demand))] * ps + [(0, np.asarray(spec.worker_demand))] * workers
    for role, d in tasks:
        ok = (room + _EPS >= d).all(axis=1)
        if mask is not None:
            ok &= mask
        if not ok.any():
            return None
        s = np.where(ok, score(room, cluster.capacity), -np.inf)
        n = int(np.argmax(s))
        room[n] -= d
        counts[role][n] += 1
    return Allocation.from_counts(counts[0], counts[1])


def _least_allocated(room: np.ndarray, cap: np.ndarray) -> np.ndarray:
    # kube-scheduler LeastAllocated: mean free fraction over the resources the node has
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(cap > 0, room / np.where(cap > 0, cap, 1.0), np.nan)
    return np.nanmean(frac, axis=1)


def _least_loaded(room: np.ndarray, cap: np.ndarray) -> np.ndarray:
    return -(cap - room).sum(axis=1)


@dataclass(frozen=True)
class Spread:
    """Task by task on the node with the largest free fraction (Kubernetes LeastAllocated)."""

    name: str = "spread"

    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        return _task_by_task(cluster, free, spec, workers, ps, _least_allocated)


@dataclass(frozen=True)
class LeastLoaded:
    """Task by task on the node with the least used resources (DL2's simulator placement)."""

    name: str = "least-loaded"

    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        return _task_by_task(cluster, free, spec, workers, ps, _least_loaded)


PLACEMENTS = {"pack": Pack(), "spread": Spread(), "least-loaded": LeastLoaded()}


# --- Optimus ---------------------------------------------------------------------------------


def even_spread(
    cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
) -> Allocation | None:
    """Optimus' placement: p PSs and w workers spread evenly over the fewest servers that fit.

    Optimus' theorem (EuroSys'18): for k servers, p/k PSs and w/k workers on each is optimal,
    and the smallest feasible k minimises the job's time. As in its code, candidate servers are
    taken roomiest first (most room for this job's average task, then lowest index) and tasks are
    dealt round-robin: workers first, the PSs continuing where the workers stopped, so the
    remainders land on different servers. The smallest k (up to the number of tasks) that fits
    wins; all k are checked in one array operation.
    """
    tasks = workers + ps
    if tasks <= 0:
        return None
    wd = np.asarray(spec.worker_demand)
    pd = np.asarray(spec.ps_demand)
    mask = _eligible(cluster, spec)
    avail = free if mask is None else np.where(mask[:, None], free, 0.0)
    avg = (workers * wd + ps * pd) / tasks
    need = avg > 0
    if need.any():
        room = ((avail[:, need] + _EPS) / avg[need]).min(axis=1)
    else:
        room = np.full(avail.shape[0], float(tasks))
    if mask is not None:
        room = np.where(mask, room, -1.0)
    order = np.lexsort((np.arange(len(room)), -room))
    order = order[room[order] > 0]
    if len(order) == 0:
        return None
    # no k below this can work: some server would need more than the roomiest one has
    total = workers * wd + ps * pd
    top = avail[order].max(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        k_lo = np.where(total > _EPS, np.ceil(total / np.maximum(top, _EPS) - 1e-9), 1.0).max()
    k_min, k_max = max(1, int(min(k_lo, tasks))), min(tasks, len(order))
    if k_min > k_max:
        return None
    # every candidate k at once: row k-k_min, column i = the i-th roomiest server (i < k)
    ks = np.arange(k_min, k_max + 1)[:, None]
    idx = np.arange(k_max)[None, :]
    used = idx < ks
    w_cnt = np.where(used, workers // ks + (idx < workers % ks), 0)
    p_cnt = np.where(used, ps // ks + ((idx - workers) % ks < ps % ks), 0)
    use = w_cnt[:, :, None] * wd + p_cnt[:, :, None] * pd
    ok = (avail[order[:k_max]][None, :, :] + _EPS >= use).all(axis=(1, 2))
    if not ok.any():
        return None
    row = int(np.argmax(ok))
    k = k_min + row
    w_all = np.zeros(len(room), dtype=np.int64)
    p_all = np.zeros(len(room), dtype=np.int64)
    w_all[order[:k]] = w_cnt[row, :k]
    p_all[order[:k]] = p_cnt[row, :k]
    return Allocation.from_counts(w_all, p_all)


@dataclass(frozen=True)
class EvenSpread:
    """Optimus' placement as a Placement phase (see `even_spread`)."""

    name: str = "even-spread"

    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        return even_spread(cluster, free, spec, workers, ps)


# --- priority order with minimal preemption (SRTF and other strict-priority policies) --------

from dlsched.core.cluster import GPU as _GPU  # noqa: E402  (kept beside the function that needs them)
from dlsched.core.policy import take as _take  # noqa: E402


def place_by_priority(snap, sized, placement, shrink: bool = False) -> tuple[dict[str, Allocation], list]:
    """Realise a strict priority order without needless preemption or migration.

    `sized` is [(job, workers, ps)] for every job that may run, highest priority first (running
    and pending mixed); running jobs left out of it are stopped. Returns (allocations of every job
    that should run, running jobs preempted).

    Re-planning from an empty cluster (`PhasedPolicy(preemptive=True)`) lets a newly placed
    high-priority job land on the nodes of a lower-priority running job and push it elsewhere
    although the cluster had room. Here instead:
    - a running job at an unchanged size keeps its Allocation object (the engine skips it);
    - a pending (or resized) job is placed in what is actually free; only if it does not fit are
      lower-priority running jobs considered as victims, lowest priority first, and only if
      freeing them lets it be placed are they preempted (the fewest such, from the bottom);
    - otherwise nothing is preempted and the walk goes on to the next job (skip-ahead); with
      `shrink`, a job that cannot be placed at its size first tries fewer workers, down to its
      minimum, in what is free (no preemption for a smaller size).
    GPU counts are compared as scalars before any placement is attempted. Victims always form a
    suffix of the running jobs in priority order, so the walk is linear apart from placements.
    """
    cluster = snap.cluster
    plan: dict[str, Allocation] = {}
    free = np.array(snap.free, dtype=float)
    runs: list[tuple[int, object, float]] = []  # (position, job, GPUs) of running jobs kept in place
    for pos, (job, w, p) in enumerate(sized):
        a = job.allocation
        if a is not None and a.num_workers == w and a.num_ps == p:
            ps_gpu = job.spec.ps_demand[_GPU]
            runs.append((pos, job, job.alloc_gpus + (a.num_ps * ps_gpu if ps_gpu else 0.0)))
            plan[job.spec.job_id] = a
    for job in snap.running:  # stopped or resized: release what they hold
        if job.spec.job_id not in plan:
            use = job.allocation.usage(np.asarray(job.spec.worker_demand), np.asarray(job.spec.ps_demand))
            np.add.at(free, list(job.allocation.nodes), use)
    free_g = float(free[:, _GPU].sum())

    def add_use(arr: np.ndarray, job) -> None:
        a = job.allocation
        np.add.at(arr, list(a.nodes), a.usage(np.asarray(job.spec.worker_demand), np.asarray(job.spec.ps_demand)))

    victims: set[str] = set()
    below = sum(g for _, _, g in runs)
    alive = len(runs)  # runs[:alive] still run; runs[alive:] were preempted (not restarted this round)
    nxt = 0  # next entry of `runs` the walk has not passed yet
    for pos, (job, w, p) in enumerate(sized):
        while nxt < alive and runs[nxt][0] <= pos:
            below -= runs[nxt][2]
            nxt += 1
        jid = job.spec.job_id
        if jid in plan or jid in victims:
            continue
        spec = job.spec
        need = w * spec.worker_demand[_GPU] + p * spec.ps_demand[_GPU]
        alloc = None
        if need <= free_g + 1e-9:
            alloc = placement.place(cluster, free, spec, w, p)
            if alloc is not None:
                _take(free, alloc, spec)
                free_g -= need
        if alloc is None and need <= free_g + below + 1e-9:
            trial, got, k, checked = free.copy(), 0.0, alive, False
            while k > nxt:
                k -= 1
                add_use(trial, runs[k][1])
                got += runs[k][2]
                if need <= free_g + got + 1e-9:
                    alloc = placement.place(cluster, trial, spec, w, p)
                    if alloc is not None:
                        break
                    if not checked:  # would freeing every candidate help at all? (one try, not n)
                        checked, every = True, trial.copy()
                        for _, other, _ in runs[nxt:k]:
                            add_use(every, other)
                        if placement.place(cluster, every, spec, w, p) is None:
                            break
            if alloc is not None:
                for _, victim, _ in runs[k:alive]:
                    del plan[victim.spec.job_id]
                    victims.add(victim.spec.job_id)
                alive = k
                free = trial
                _take(free, alloc, spec)
                free_g += got - need
                below -= got
        if alloc is None and shrink:
            for w2 in range(w - 1, spec.min_workers - 1, -1):
                p2 = min(p, max(spec.min_ps, w2))
                need2 = w2 * spec.worker_demand[_GPU] + p2 * spec.ps_demand[_GPU]
                if need2 > free_g + 1e-9:
                    continue
                alloc = placement.place(cluster, free, spec, w2, p2)
                if alloc is not None:
                    _take(free, alloc, spec)
                    free_g -= need2
                    break
        if alloc is not None:
            plan[jid] = alloc
    return plan, [j for j in snap.running if j.spec.job_id not in plan]
