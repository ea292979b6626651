"""Sizing phase: how many workers and parameter servers each job gets."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from dlsched.core.errors import ConfigError
from dlsched.core.job import Architecture, JobSpec
from dlsched.core.snapshot import JobState, JobStatus, Snapshot
from dlsched.sim.feasibility import largest_gang

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


def ps_for(spec: JobSpec, workers: int) -> int:
    """PSs that go with `workers` workers when a job grows in bundles of one worker + one PS.

    DL2's simulator grows PS jobs a bundle at a time (worker and PS together), so the PS count
    tracks the worker count, clamped to the job's PS range; other architectures have none.
    """
    if spec.arch is not Architecture.PS:
        return 0
    return min(spec.max_ps, max(spec.min_ps, workers))


@dataclass(frozen=True)
class MaxSize:
    """Every job asks for its maximum (DL2's elastic FIFO/SRTF give each job up to MAX_NUM_WORKERS).

    Meant for `PhasedPolicy(shrink=True)`, which then gives each job as many workers as fit, in
    order, down to its minimum.
    """

    def size(self, snap: Snapshot, jobs: list[JobState]) -> list[tuple[JobState, int, int]]:
        return [(j, j.spec.max_workers, ps_for(j.spec, j.spec.max_workers)) for j in jobs]


_SHARE_KEYS = {
    "job": lambda j: j.index,
    "queue": lambda j: ("queue", j.spec.queue),
    "user": lambda j: ("user", j.spec.user),
}


class _Entity:
    """A fairness entity during one filling: its jobs in arrival order and what it holds."""

    __slots__ = ("jobs", "pos", "use", "seq", "unit")

    def __init__(self, seq: int):
        self.jobs: list[int] = []
        self.pos = 0
        self.use = [0.0, 0.0, 0.0]
        self.seq = seq
        self.unit: tuple[int, int] | None = None


@dataclass(frozen=True)
class DominantShareFilling:
    """DRF by progressive filling (Ghodsi et al. NSDI'11; DL2's `drf_env`), on aggregate capacity.

    Repeatedly the entity (a job, a queue or a user: `share_by`) whose dominant share would be the
    smallest after its next unit gets that unit; ties go to the entity whose first job arrived
    first. A unit is:
    - for a rigid job (min == max workers): the whole job, the only size it can run at;
    - for an elastic job: first its minimum gang, then one bundle at a time (one worker, plus one PS
      for a PS job while it has fewer PSs than its maximum), up to its maximum.
    Dominant share = max over resources of (held / cluster total). Ranking by the share *after*
    the unit (not DL2's current share) is what makes rigid jobs comparable at all: they all hold 0
    until granted. Within a queue or user entity, jobs are served in arrival order.

    A unit that does not fit what is left of the cluster freezes that job (it keeps what it has);
    DL2 stops the whole filling at the first failure instead (`stop_at_first_failure=True`), which
    with rigid jobs of mixed sizes lets one big job idle the rest of the cluster.

    Shares are computed on the cluster's total resources, not node by node; the placement phase
    then realises them (a job that does not fit on actual nodes shrinks or waits). The result
    lists running jobs that keep their size first, so a preemptive `PhasedPolicy` keeps them on
    their nodes before placing anything new (no needless migration).
    """

    share_by: str = "job"
    stop_at_first_failure: bool = False

    def __post_init__(self) -> None:
        if self.share_by not in _SHARE_KEYS:
            raise ConfigError(f"share_by must be one of {', '.join(_SHARE_KEYS)}, got {self.share_by!r}")

    def size(self, snap: Snapshot, jobs: list[JobState]) -> list[tuple[JobState, int, int]]:
        cap = snap.cluster.total
        inv = [1.0 / float(c) if c > 0 else 0.0 for c in cap]
        left = [float(c) for c in cap]
        workers = [0] * len(jobs)
        ps = [0] * len(jobs)
        done = [False] * len(jobs)
        granted: list[int] = []
        keyf = _SHARE_KEYS[self.share_by]
        ents: dict[object, _Entity] = {}
        for i, j in enumerate(jobs):
            k = keyf(j)
            e = ents.get(k)
            if e is None:
                e = ents[k] = _Entity(len(ents))
            e.jobs.append(i)
        dem = [(j.spec.worker_demand, j.spec.ps_demand) for j in jobs]

        def next_unit(e: _Entity) -> tuple[int, int] | None:
            while e.pos < len(e.jobs):
                i = e.jobs[e.pos]
                s = jobs[i].spec
                if not done[i]:
                    if workers[i] == 0:
                        if s.min_workers == s.max_workers:
                            return s.num_workers, s.num_ps
                        return s.min_workers, ps_for(s, s.min_workers)
                    if workers[i] < s.max_workers:
                        return 1, ps_for(s, workers[i] + 1) - ps[i]
                    done[i] = True
                e.pos += 1
            return None

        def entry(e: _Entity) -> tuple[float, int, _Entity] | None:
            e.unit = next_unit(e)
            if e.unit is None:
                return None
            wd, pd = dem[e.jobs[e.pos]]
            uw, up = e.unit
            share = max((e.use[r] + uw * wd[r] + up * pd[r]) * inv[r] for r in range(3))
            return share, e.seq, e

        heap = [x for x in map(entry, ents.values()) if x is not None]
        heapq.heapify(heap)
        while heap:
            _, _, e = heapq.heappop(heap)
            i = e.jobs[e.pos]
            uw, up = e.unit
            wd, pd = dem[i]
            need = [uw * wd[r] + up * pd[r] for r in range(3)]
            if all(left[r] + _EPS >= need[r] for r in range(3)):
                for r in range(3):
                    left[r] -= need[r]
                    e.use[r] += need[r]
                if workers[i] == 0:
                    granted.append(i)
                workers[i] += uw
                ps[i] += up
            else:
                done[i] = True
                if self.stop_at_first_failure:
                    break
            nxt = entry(e)
            if nxt is not None:
                heapq.heappush(heap, nxt)

        keep, change = [], []
        for i in granted:
            j = jobs[i]
            same = j.status is JobStatus.RUNNING and j.num_workers == workers[i] and j.num_ps == ps[i]
            (keep if same else change).append((j, workers[i], ps[i]))
        return keep + change
