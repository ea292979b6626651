"""Sizing phase: how many workers and parameter servers each job gets."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import JobState, JobStatus, Snapshot
from dlsched.framework.feasibility import largest_gang

_EPS = 1e-9


@dataclass(frozen=True)
class Requested:
    """What the job asked for (non-elastic schedulers), but never more than the empty cluster
    could ever hold: a job that declares a smaller minimum then runs at the largest size that
    exists instead of waiting forever (and blocking a FIFO queue behind it)."""

    def size_one(self, snap: Snapshot, job: JobState) -> tuple[int, int]:
        w = job.spec.num_workers
        if job.spec.min_workers < w:
            w = largest_gang(job.spec, snap.cluster)
        return w, job.spec.num_ps

    def size(self, snap: Snapshot, jobs: list[JobState]) -> list[tuple[JobState, int, int]]:
        return [(j, *self.size_one(snap, j)) for j in jobs]


def requested_workers(spec: JobSpec) -> int:
    """The job's requested worker count within its own [min_workers, max_workers]: the size a
    waiting job starts at when nothing sizes it otherwise (the QoS autoscaler without a deadline
    to size for, or for a job that misses at every size)."""
    return max(spec.min_workers, min(spec.num_workers, spec.max_workers))


def ps_for(spec: JobSpec, workers: int, ps: int | None = None, per_worker: bool = False) -> int:
    """The one rule for how many parameter servers go with `workers` workers.

    The count wanted is `ps`, else the job's vertical-scaling table `extra["ps_steps"]`
    ([[up to w workers, PS pods], ...], the QoS prototype's PS-CPU steps), else its requested
    `num_ps`. With `per_worker` there is at most one PS per worker: a job grown or shrunk in
    bundles of one worker + one PS (DL2's simulator, and shrinking a job to fit). The result is
    always within the job's PS range [min_ps, max_ps]; a job without PSs gets 0.
    Examples: DL2's bundle `ps_for(s, w, s.max_ps, per_worker=True)`; a shrunk job asked with p
    PSs `ps_for(s, w, p, per_worker=True)`; a gang with p PSs `ps_for(s, w, p)`.
    """
    if spec.max_ps == 0:
        return 0
    if ps is None:
        steps = spec.extra.get("ps_steps")
        ps = next((int(p) for lim, p in steps if workers <= lim), int(steps[-1][1])) if steps else spec.num_ps
    if per_worker:
        ps = min(ps, workers)
    return min(spec.max_ps, max(spec.min_ps, ps))


@dataclass(frozen=True)
class MaxSize:
    """Every job asks for its maximum (DL2's elastic FIFO/SRTF give each job up to MAX_NUM_WORKERS).

    Meant for `PhasedPolicy(shrink=True)`, which then gives each job as many workers as fit, in
    order, down to its minimum.
    """

    def size(self, snap: Snapshot, jobs: list[JobState]) -> list[tuple[JobState, int, int]]:
        return [(j, j.spec.max_workers, ps_for(j.spec, j.spec.max_workers, j.spec.max_ps, per_worker=True)) for j in jobs]


_SHARE_KEYS = {
    "job": None,
    "queue": lambda spec: spec.queue,
    "user": lambda spec: spec.user,
}


@dataclass(frozen=True, eq=False)
class DominantShareFilling:
    """DRF by progressive filling (Ghodsi et al. NSDI'11; DL2's `drf_env`), on aggregate capacity.

    Repeatedly the entity (a job, a queue or a user: `share_by`) whose dominant share would be the
    smallest after its next unit gets that unit; ties go to the entity whose first job arrived
    first (submit time, then job index), whatever order the jobs are given in. A unit is:
    - for a rigid job (min == max workers): the whole job, the only size it can run at;
    - for an elastic job: first its minimum gang, then one bundle at a time (one worker, plus one PS
      for a PS job while it has fewer PSs than its maximum), up to its maximum.
    Dominant share = max over resources of (held / cluster total). Ranking by the share *after*
    the unit (not DL2's current share) is what makes rigid jobs comparable at all: they all hold 0
    until granted. Within a queue or user entity, jobs are served in arrival order.

    A unit that does not fit what is left of the cluster freezes that job (it keeps what it has);
    DL2 stops the whole filling at the first failure instead (`stop_at_first_failure=True`), which
    with rigid jobs of mixed sizes lets one big job idle the rest of the cluster.

    Shares are computed on the cluster's total resources, not node by node; the placement then
    realises them (a job that does not fit on actual nodes shrinks or waits). The result lists
    running jobs that keep their size first, then the others in the order they were first served,
    so the realisation keeps unchanged jobs on their nodes before placing anything new.

    Cost: one heap operation per unit. An entity that stays the smallest keeps receiving units
    without going through the heap (the same result as popping it again), and with
    `share_by="job"` a rigid job's single unit and share are constants cached per job.
    """

    share_by: str = "job"
    stop_at_first_failure: bool = False
    _rigid: dict = field(default_factory=dict, repr=False)  # (cluster, spec) -> (share, need...)

    def __post_init__(self) -> None:
        if self.share_by not in _SHARE_KEYS:
            raise ConfigError(f"share_by must be one of {', '.join(_SHARE_KEYS)}, got {self.share_by!r}")

    def size(self, snap: Snapshot, jobs: list[JobState]) -> list[tuple[JobState, int, int]]:
        cap = snap.cluster.total
        inv = tuple(1.0 / float(c) if c > 0 else 0.0 for c in cap)
        left = [float(c) + _EPS for c in cap]  # what is left, with the float tolerance folded in
        n = len(jobs)
        workers, ps = [0] * n, [0] * n
        granted: list[int] = []
        if _SHARE_KEYS[self.share_by] is None:
            self._fill_jobs(snap, jobs, inv, left, workers, ps, granted)
        else:
            self._fill_entities(jobs, inv, left, workers, ps, granted)
        keep, change = [], []
        for i in granted:
            j = jobs[i]
            a = j.allocation
            same = a is not None and j.status is JobStatus.RUNNING and a.num_workers == workers[i] and a.num_ps == ps[i]
            (keep if same else change).append((j, workers[i], ps[i]))
        return keep + change

    def _fill_jobs(self, snap, jobs, inv, left, workers, ps, granted) -> None:
        """One entity per job: rigid jobs are one cached unit; elastic ones grow bundle by bundle."""
        i0, i1, i2 = inv
        l0, l1, l2 = left
        cache = self._units(snap.cluster)
        heap: list[tuple] = []
        for i, j in enumerate(jobs):
            s = j.spec
            c = cache.get(s) or self.first_unit(snap.cluster, s)
            heap.append((c[0], s.submit_time, j.index, i, c))
        heapq.heapify(heap)
        stop = self.stop_at_first_failure
        while heap:
            _, t, idx, i, c = heapq.heappop(heap)
            _, rigid, uw, up, n0, n1, n2 = c
            if rigid or workers[i] == 0:  # the job's first unit: whole job, or minimum gang
                if n0 <= l0 and n1 <= l1 and n2 <= l2:
                    l0, l1, l2 = l0 - n0, l1 - n1, l2 - n2
                    workers[i], ps[i] = uw, up
                    granted.append(i)
                elif stop:
                    return
                else:
                    continue
                if rigid:
                    continue
            # an elastic job grows a bundle at a time while it stays the smallest share
            s = jobs[i].spec
            wd, pd = s.worker_demand, s.ps_demand
            while workers[i] < s.max_workers:
                w = workers[i] + 1
                p = ps_for(s, w, s.max_ps, per_worker=True)
                u0, u1, u2 = w * wd[0] + p * pd[0], w * wd[1] + p * pd[1], w * wd[2] + p * pd[2]
                share = max(u0 * i0, u1 * i1, u2 * i2)
                if heap and heap[0][:3] < (share, t, idx):
                    heapq.heappush(heap, (share, t, idx, i, (share, False, 0, 0, 0.0, 0.0, 0.0)))
                    break
                d0, d1, d2 = wd[0] + (p - ps[i]) * pd[0], wd[1] + (p - ps[i]) * pd[1], wd[2] + (p - ps[i]) * pd[2]
                if not (d0 <= l0 and d1 <= l1 and d2 <= l2):
                    if stop:
                        return
                    break
                l0, l1, l2 = l0 - d0, l1 - d1, l2 - d2
                workers[i], ps[i] = w, p

    def _units(self, cluster: Cluster) -> dict:
        cache = self._rigid.setdefault(cluster, {})
        if len(cache) > 200_000:
            cache.clear()
        return cache

    def first_unit(self, cluster: Cluster, s: JobSpec) -> tuple:
        """A job's first unit, cached: (share after it, rigid?, workers, PSs, GPU, CPU, memory)."""
        cache = self._units(cluster)
        c = cache.get(s)
        if c is None:
            i0, i1, i2 = (1.0 / float(c) if c > 0 else 0.0 for c in cluster.total)
            w, p = (s.num_workers, s.num_ps) if s.min_workers == s.max_workers else (s.min_workers, ps_for(s, s.min_workers, s.max_ps, per_worker=True))
            wd, pd = s.worker_demand, s.ps_demand
            n0, n1, n2 = w * wd[0] + p * pd[0], w * wd[1] + p * pd[1], w * wd[2] + p * pd[2]
            c = cache[s] = (max(n0 * i0, n1 * i1, n2 * i2), s.min_workers == s.max_workers, w, p, n0, n1, n2)
        return c

    def _fill_entities(self, jobs, inv, left, workers, ps, granted) -> None:
        """Queues or users: an entity's jobs share one dominant share, served in arrival order."""
        i0, i1, i2 = inv
        l0, l1, l2 = left
        n = len(jobs)
        specs = [j.spec for j in jobs]
        done = [False] * n
        keyf = _SHARE_KEYS[self.share_by]
        groups: dict[object, list[int]] = {}
        for i in sorted(range(n), key=lambda i: (specs[i].submit_time, jobs[i].index)):
            groups.setdefault(keyf(specs[i]), []).append(i)
        members = list(groups.values())
        pos = [0] * len(members)
        use = [[0.0, 0.0, 0.0] for _ in members]

        def next_unit(k: int) -> tuple[int, int, int] | None:
            """(job, workers, ps) of entity k's next unit, or None when it wants nothing more."""
            mine = members[k]
            while pos[k] < len(mine):
                i = mine[pos[k]]
                s = specs[i]
                if not done[i]:
                    w = workers[i]
                    if w == 0:
                        if s.min_workers == s.max_workers:
                            return i, s.num_workers, s.num_ps
                        return i, s.min_workers, ps_for(s, s.min_workers, s.max_ps, per_worker=True)
                    if w < s.max_workers:
                        return i, 1, ps_for(s, w + 1, s.max_ps, per_worker=True) - ps[i]
                    done[i] = True
                pos[k] += 1
            return None

        def share_after(k: int, unit: tuple[int, int, int]) -> float:
            i, uw, up = unit
            wd, pd = specs[i].worker_demand, specs[i].ps_demand
            u = use[k]
            return max((u[0] + uw * wd[0] + up * pd[0]) * i0, (u[1] + uw * wd[1] + up * pd[1]) * i1,
                       (u[2] + uw * wd[2] + up * pd[2]) * i2)

        heap: list[tuple] = []
        for k in range(len(members)):
            unit = next_unit(k)
            if unit is not None:
                first = members[k][0]
                heap.append((share_after(k, unit), specs[first].submit_time, jobs[first].index, k, unit))
        heapq.heapify(heap)
        while heap:
            _, t, idx, k, unit = heapq.heappop(heap)
            while True:
                i, uw, up = unit
                wd, pd = specs[i].worker_demand, specs[i].ps_demand
                n0, n1, n2 = uw * wd[0] + up * pd[0], uw * wd[1] + up * pd[1], uw * wd[2] + up * pd[2]
                if n0 <= l0 and n1 <= l1 and n2 <= l2:
                    l0, l1, l2 = l0 - n0, l1 - n1, l2 - n2
                    u = use[k]
                    u[0] += n0
                    u[1] += n1
                    u[2] += n2
                    if workers[i] == 0:
                        granted.append(i)
                    workers[i] += uw
                    ps[i] += up
                else:
                    done[i] = True
                    if self.stop_at_first_failure:
                        return
                unit = next_unit(k)
                if unit is None:
                    break
                entry = (share_after(k, unit), t, idx, k, unit)
                if heap and heap[0][:3] < entry[:3]:
                    heapq.heappush(heap, entry)
                    break


@dataclass(frozen=True, eq=False)
class AdmitThenShare:
    """Sizes for jobs ranked by someone else (a learned ordering): who runs follows the rank, how
    big an elastic job runs is a dominant-resource fair share of what the admitted jobs leave.

    1. Admission, in the given order: each job's first unit (`DominantShareFilling.first_unit`:
       the whole job if rigid, its minimum gang if elastic) is counted against the cluster's total
       while it fits; a job whose unit does not fit is passed over (later, smaller ones may fit).
    2. Growth: the admitted elastic jobs share what is left by progressive filling, one bundle at
       a time (a worker, plus a PS for a PS job while it has fewer than its maximum), the job
       whose dominant share would be the smallest after its bundle first (ties: submit time, job
       index, as DRF's), up to its maximum; a bundle that does not fit freezes its job.

    With `beyond_requested=False` a job grows only up to the size it asked for (it may still run
    smaller, to admit others): where every GPU-hour is billed to the job's user (a cluster with
    prices), idle GPUs are not free speed but a larger bill, on sublinear curves for less than
    their share of speed.

    Every job is returned, in the given order (the realiser's priority): admitted ones at their
    size, the rest at their first unit (the realiser starts them only if room is left or lower
    ranked jobs can give it). With only rigid jobs this is the jobs at their requested sizes in
    the given order, i.e. nothing changes for a rigid workload.
    """

    beyond_requested: bool = True
    _units: DominantShareFilling = field(default_factory=DominantShareFilling, repr=False)

    def size(self, snap: Snapshot, jobs: list[JobState]) -> list[tuple[JobState, int, int]]:
        cluster = snap.cluster
        inv = tuple(1.0 / float(c) if c > 0 else 0.0 for c in cluster.total)
        left = [float(c) + _EPS for c in cluster.total]
        units = [self._units.first_unit(cluster, j.spec) for j in jobs]
        workers = [u[2] for u in units]
        ps = [u[3] for u in units]
        heap: list[tuple[float, float, int, int, int]] = []  # (share after the bundle, ties..., job, its PSs then)
        for i, (_, rigid, _, _, *need) in enumerate(units):
            if not all(n <= room for n, room in zip(need, left)):
                continue
            left = [room - n for n, room in zip(need, left)]
            if not rigid:
                self._push(heap, jobs[i], i, workers[i], inv, self.top(jobs[i].spec))
        while heap:
            _, _, _, i, p = heapq.heappop(heap)
            s = jobs[i].spec
            w = workers[i] + 1
            delta = [wd + (p - ps[i]) * pd for wd, pd in zip(s.worker_demand, s.ps_demand)]
            if not all(d <= room for d, room in zip(delta, left)):
                continue  # frozen at its size
            left = [room - d for d, room in zip(delta, left)]
            workers[i], ps[i] = w, p
            self._push(heap, jobs[i], i, w, inv, self.top(s))
        return [(j, workers[i], ps[i]) for i, j in enumerate(jobs)]

    def top(self, spec: JobSpec) -> int:
        """The most workers the job may grow to."""
        return spec.max_workers if self.beyond_requested else min(spec.max_workers, max(spec.num_workers, spec.min_workers))

    @staticmethod
    def _push(heap: list, job: JobState, i: int, w: int, inv: tuple[float, ...], top: int) -> None:
        """Queue the job's next bundle (its share after it, and the PSs it brings the job to),
        unless the job is at its largest size `top`."""
        s = job.spec
        if w >= top:
            return
        p = ps_for(s, w + 1, s.max_ps, per_worker=True)
        share = max(((w + 1) * a + p * b) * k for a, b, k in zip(s.worker_demand, s.ps_demand, inv))
        heapq.heappush(heap, (share, s.submit_time, job.index, i, p))
