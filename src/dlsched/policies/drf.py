"""DRF: max-min fairness on dominant shares (Ghodsi et al. NSDI'11), as DL2's `drf_env` runs it.

Shares are recomputed from scratch at every arrival and completion by progressive filling
(`DominantShareFilling`): the entity with the smallest dominant share gets one more unit (the
whole job if rigid; for an elastic job its minimum gang, then bundles of one worker, plus one PS
for PS jobs) until it reaches its maximum or a unit does not fit. Allocations depend only on which
jobs exist, not on their progress, so no timer is needed.

Fairness entities (`share_by`): "job" (default, as DL2: every job is a tenant), "queue" or
"user" (the multi-tenant reading: a tenant's jobs share one dominant share and are served in
arrival order inside it).

It is preemptive, since a newcomer with a smaller share takes resources from the others; but a
running job whose size the filling leaves unchanged keeps its nodes and its Allocation (the
sizing lists such jobs first and the realiser keeps them at no cost), so only jobs whose
share actually changed restart. Jobs that changed are placed in what is left, in filling order;
one that does not fit at its fair size shrinks toward its minimum, else waits. Placement defaults
to DL2's least-loaded node, task by task.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.plan import Plan
from dlsched.core.snapshot import JobState, JobStatus, Snapshot
from dlsched.framework.packing import add_use
from dlsched.policies.phased import PhasedPolicy
from dlsched.policies.phases.ordering import Unordered
from dlsched.policies.phases.placement import PLACEMENTS
from dlsched.policies.phases.realise import Realiser
from dlsched.policies.phases.sizing import DominantShareFilling


class FillingLine:
    """Every job in the system in filling order (share, submit time, index, job id), with each
    one's unit (GPU, CPU, memory), the running sums of the units, and which jobs wait.

    The unit arrays keep spare room at the end, so an arrival or a completion shifts the tail in
    place (one slice copy) instead of reallocating as `np.insert`/`np.delete` do: at the few
    hundred jobs a Philly decision sees, such fixed costs were most of the incremental path's. The
    running sums are recomputed lazily, only from the first position changed since they were last
    read, and only when the filling needs them (a change behind the first unit that misses cannot
    move it); they add in the same order as one `cumsum` from the start, so they are the same
    floats. The waiting jobs are kept apart as a sorted list of keys (a few dozen, against hundreds
    of jobs), so those before the first miss are one bisection away."""

    def __init__(self) -> None:
        self.keys: list[tuple] = []  # (share, submit time, index, job id), sorted
        self.jobs: list[JobState] = []  # in the same order
        self.gpus: list[float] = []  # each one's unit's GPUs, for quick scalar reads
        self.waiting: list[tuple] = []  # keys of the jobs that wait, sorted
        self.need = np.zeros((3, 64))  # column i: job i's unit; rows contiguous for searchsorted
        self.used = np.zeros((3, 64))  # column i: the units of jobs 0..i summed
        self.smallest = math.inf  # GPUs of the smallest unit (at most): below it nothing more fits
        self._valid = 0  # used[:, :_valid] is current
        self._first: int | None = None  # first position whose sums exceed `_total` (None: unknown)
        self._total: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def find(self, key: tuple) -> int | None:
        """Position of the job with this key, None if absent."""
        i = bisect_left(self.keys, key)
        return i if i < len(self.keys) and self.keys[i][3] == key[3] else None

    def waits(self, key: tuple) -> bool:
        i = bisect_left(self.waiting, key)
        return i < len(self.waiting) and self.waiting[i] == key

    def set_waits(self, key: tuple, waits: bool) -> None:
        """Mark the job with this key (in the line) waiting or running."""
        w, i = self.waiting, bisect_left(self.waiting, key)
        if i < len(w) and w[i] == key:
            if not waits:
                del w[i]
        elif waits:
            w.insert(i, key)

    def insert(self, key: tuple, job: JobState, need: tuple, waits: bool) -> None:
        n = len(self.keys)
        if n == self.need.shape[1]:
            self.need, self.used = (np.concatenate([a, np.zeros_like(a)], axis=1) for a in (self.need, self.used))
        i = bisect_left(self.keys, key)
        self.keys.insert(i, key)
        self.jobs.insert(i, job)
        self.gpus.insert(i, need[0])
        self.need[:, i + 1:n + 1] = self.need[:, i:n]
        self.need[:, i] = need
        if waits:
            self.set_waits(key, True)
        self.smallest = min(self.smallest, need[0])
        self._changed(i)

    def delete(self, i: int) -> None:
        n = len(self.keys)
        self.set_waits(self.keys[i], False)
        del self.keys[i], self.jobs[i], self.gpus[i]
        self.need[:, i:n - 1] = self.need[:, i + 1:n]
        self._changed(i)

    def _changed(self, i: int) -> None:
        self._valid = min(self._valid, i)
        if self._first is not None and i <= self._first:
            self._first = None

    def first_miss(self, total: np.ndarray) -> int:
        """The first position whose running sums exceed `total` in some resource (len if none):
        every job before it is granted by the filling, it is not."""
        if self._first is not None and total is self._total:
            return self._first
        n, v = len(self.keys), self._valid
        if v < n:
            if v == 0:
                np.add.accumulate(self.need[:, :n], axis=1, out=self.used[:, :n])
            else:  # the sum before v, then the units from v on: the same additions in the same order
                part = self.used[:, v - 1:n]
                part[:, 1:] = self.need[:, v:n]
                np.add.accumulate(part, axis=1, out=part)
            self._valid = n
        used, f = self.used, int(self.used[0, :n].searchsorted(total[0], "right"))  # GPUs first:
        for r in (1, 2):  # another resource only if its sums already exceed before that
            if f and used[r, f - 1] > total[r]:
                f = int(used[r, :f].searchsorted(total[r], "right"))
        self._first, self._total = f, total
        return f


@dataclass(eq=False)
class Drf(PhasedPolicy):
    """DRF as a `PhasedPolicy`, with an incremental path for the common case: every job rigid,
    one entity per job, no stop at the first failure (a trace without elastic jobs).

    Then a job's only unit is fixed, so the progressive filling is one pass over all jobs in
    (share, arrival) order granting each unit that still fits the cluster's total. The jobs stay in
    that order across calls (a `FillingLine`, kept up by the snapshot's deltas): the granted prefix
    is where the running sums of the units first exceed the total, and the few jobs granted after
    it are found by a scan of the rest (`_after`). The realisation is the phased one's: granted
    running jobs keep their nodes, running jobs not granted stop, granted waiting jobs are placed
    in that order in what is free (a rigid job cannot shrink, and nothing ranks below a kept job).
    Same plans, less work (up to float rounding inside the 1e-9 tolerance both use); any other
    case takes the phased path."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.reset(None, 0)  # type: ignore[arg-type]

    def reset(self, cluster: Cluster, seed: int) -> None:
        super().reset(cluster, seed)
        self._line: FillingLine | None = None
        # a cluster's total + 1e-9, as an array and as floats
        self._total: tuple[Cluster | None, np.ndarray, tuple] = (None, np.zeros(3), (0.0, 0.0, 0.0))
        self._fast = not self.sizing.stop_at_first_failure and self.sizing.share_by == "job"  # type: ignore[attr-defined]

    def schedule(self, snap: Snapshot) -> Plan:
        if self._fast and self._follow(snap):
            return self._fill(snap)
        return super().schedule(snap)

    def _follow(self, snap: Snapshot) -> bool:
        """Keep every job in the system in filling order; False (for good) once a job is
        elastic, or runs at another size than its own (adopted by a live service)."""
        line = self._line
        if line is not None:
            for job in snap.arrived:
                if not self._add(line, snap.cluster, job):
                    return False
            for job in snap.stopped:
                if line.find(key := self._key(snap.cluster, job)) is not None:
                    line.set_waits(key, True)
            for job in snap.finished:
                if (i := line.find(self._key(snap.cluster, job))) is not None:
                    line.delete(i)
        if (line is None or len(line) != snap.num_running + snap.num_pending
                or len(line.waiting) != snap.num_pending):
            line = self._line = FillingLine()
            for job in (*snap.running, *snap.pending):
                a = job.allocation
                if not self._add(line, snap.cluster, job) or (
                        a is not None and (a.num_workers, a.num_ps) != (job.spec.num_workers, job.spec.num_ps)):
                    self._fast = False
                    return False
        return True

    def _key(self, cluster: Cluster, job: JobState) -> tuple:
        unit = self.sizing.first_unit(cluster, job.spec)  # type: ignore[attr-defined]
        return unit[0], job.spec.submit_time, job.index, job.job_id

    def _add(self, line: FillingLine, cluster: Cluster, job: JobState) -> bool:
        share, rigid, _, _, *need = self.sizing.first_unit(cluster, job.spec)  # type: ignore[attr-defined]
        if not rigid:
            self._fast = False
            return False
        line.insert((share, job.spec.submit_time, job.index, job.job_id), job, need,
                    job.status is not JobStatus.RUNNING)
        return True

    def _after(self, line: FillingLine, f: int) -> list[int]:
        """The units after the first miss `f` that still fit what the prefix leaves, in order.

        In (share, arrival) order the units after a miss rarely fit (on Philly never: what is
        short is GPUs, and later shares mostly mean more GPUs), so one `min` over their GPUs
        usually settles it; otherwise each unit is checked against what the grants before it
        leave (GPUs left only shrink, so the GPU test stays a valid first filter)."""
        t0, t1, t2 = self._total[2]
        l0, l1, l2 = t0, t1, t2
        if f:
            u0, u1, u2 = line.used[:, f - 1].tolist()
            l0, l1, l2 = t0 - u0, t1 - u1, t2 - u2
        n, gpus = len(line), line.gpus
        if f + 1 >= n or l0 < line.smallest or min(gpus[f + 1:n]) > l0:
            return []
        after = []
        for i in range(f + 1, n):
            if gpus[i] <= l0:
                n0, n1, n2 = line.need[:, i].tolist()
                if n0 <= l0 and n1 <= l1 and n2 <= l2:
                    after.append(i)
                    l0, l1, l2 = l0 - n0, l1 - n1, l2 - n2
                    if l0 < line.smallest:
                        break
        return after

    def _fill(self, snap: Snapshot) -> Plan:
        line = self._line
        assert line is not None
        if self._total[0] is not snap.cluster:
            total = np.asarray(snap.cluster.total, dtype=float) + 1e-9
            self._total = (snap.cluster, total, tuple(total.tolist()))
        total = self._total[1]
        n, keys = len(line), line.keys
        f = line.first_miss(total)
        k = bisect_left(line.waiting, keys[f]) if f < n else len(line.waiting)
        start = line.waiting[:k]  # granted (all before the first miss) and waiting: to start
        after = self._after(line, f) if f < n else []  # granted after the first miss
        kept = 0  # running jobs granted after the first miss
        for i in after:
            if line.waits(keys[i]):
                start.append(keys[i])
            else:
                kept += 1
        stop: list[JobState] = []  # running jobs not granted (all from the first miss on)
        if (n - f) - (len(line.waiting) - k) > kept:  # more run from there on than are kept
            granted = set(after)
            stop = [line.jobs[i] for i in range(f, n) if i not in granted and not line.waits(keys[i])]
        if not start:
            return Plan(keep_running=True, preempt={j.job_id for j in stop})
        free = None
        if stop:
            free = np.array(snap.free, dtype=float)
            for job in stop:
                add_use(free, job.spec, job.allocation)
        r = Realiser(snap, self.placement, preempt="none", free=free)
        for key in start:
            job = line.jobs[bisect_left(keys, key)]
            if r.offer(job, job.spec.num_workers, job.spec.num_ps) is not None:
                line.set_waits(key, False)  # runs once the plan is carried out (a refused plan: rebuilt next call)
        return Plan(allocations=r.allocations, keep_running=True, preempt={j.job_id for j in stop})


def drf(share_by: str = "job", placement: str = "least-loaded", stop_at_first_failure: bool = False) -> Drf:
    """DRF. `stop_at_first_failure=True` ends the filling at the first unit that does not fit (DL2);
    the default only freezes that job, so one big rigid job cannot idle the rest of the cluster."""
    if placement not in PLACEMENTS:
        raise ConfigError(f"unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
    return Drf(
        admission=None,
        ordering=Unordered(),  # the filling breaks ties by arrival itself
        sizing=DominantShareFilling(share_by=share_by, stop_at_first_failure=stop_at_first_failure),
        placement=PLACEMENTS[placement],
        name="drf",
        preempt="minimal",
        shrink=True,
    )
