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


@dataclass(eq=False)
class Drf(PhasedPolicy):
    """DRF as a `PhasedPolicy`, with an incremental path for the common case: every job rigid,
    one entity per job, no stop at the first failure (a trace without elastic jobs).

    Then a job's only unit is fixed, so the progressive filling is one pass over all jobs in
    (share, arrival) order granting each unit that still fits the cluster's total. The jobs stay in
    that order across calls (kept up by the snapshot's deltas), with their units and whether they
    wait in NumPy arrays: the granted prefix is where the running sums of the units first exceed
    the total, and the few jobs granted after it are found by vectorised scans of the rest. The
    realisation is the phased one's: granted running jobs keep their nodes, running jobs not
    granted stop, granted waiting jobs are placed in that order in what is free (a rigid job
    cannot shrink, and nothing ranks below a kept job). Same plans, less work (up to float
    rounding inside the 1e-9 tolerance both use); any other case takes the phased path."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.reset(None, 0)  # type: ignore[arg-type]

    def reset(self, cluster: Cluster, seed: int) -> None:
        super().reset(cluster, seed)
        # every job in the system, in filling order: (share, submit time, index, job id, job)
        self._order: list[tuple] | None = None
        self._need = np.zeros((0, 3))  # each job's unit (GPU, CPU, memory), in that order
        self._waits = np.zeros(0, dtype=bool)  # whether it waits, in that order
        self._smallest = 0.0  # GPUs of the smallest unit (at most): below it nothing more fits
        self._fast = not self.sizing.stop_at_first_failure and self.sizing.share_by == "job"  # type: ignore[attr-defined]

    def schedule(self, snap: Snapshot) -> Plan:
        if self._fast and self._follow(snap):
            return self._fill(snap)
        return super().schedule(snap)

    def _follow(self, snap: Snapshot) -> bool:
        """Keep every job in the system in filling order; False (for good) once a job is
        elastic, or runs at another size than its own (adopted by a live service)."""
        if self._order is not None:
            for job in snap.arrived:
                if not self._add(snap.cluster, job):
                    return False
            for job in snap.stopped:
                if (i := self._find(snap.cluster, job)) is not None:
                    self._waits[i] = True
            for job in snap.finished:
                if (i := self._find(snap.cluster, job)) is not None:
                    del self._order[i]
                    self._need = np.delete(self._need, i, axis=0)
                    self._waits = np.delete(self._waits, i)
        if (self._order is None or len(self._order) != snap.num_running + snap.num_pending
                or int(self._waits.sum()) != snap.num_pending):
            self._order, self._need, self._waits = [], np.zeros((0, 3)), np.zeros(0, dtype=bool)
            self._smallest = math.inf
            for job in (*snap.running, *snap.pending):
                a = job.allocation
                if not self._add(snap.cluster, job) or (
                        a is not None and (a.num_workers, a.num_ps) != (job.spec.num_workers, job.spec.num_ps)):
                    self._fast = False
                    return False
        return True

    def _key(self, cluster: Cluster, job: JobState) -> tuple:
        unit = self.sizing.first_unit(cluster, job.spec)  # type: ignore[attr-defined]
        return unit[0], job.spec.submit_time, job.index, job.job_id

    def _find(self, cluster: Cluster, job: JobState) -> int | None:
        i = bisect_left(self._order, self._key(cluster, job))  # type: ignore[arg-type]
        return i if i < len(self._order) and self._order[i][3] == job.job_id else None  # type: ignore[arg-type]

    def _add(self, cluster: Cluster, job: JobState) -> bool:
        share, rigid, _, _, *need = self.sizing.first_unit(cluster, job.spec)  # type: ignore[attr-defined]
        if not rigid:
            self._fast = False
            return False
        entry = (*self._key(cluster, job), job)
        i = bisect_left(self._order, entry[:4])  # type: ignore[arg-type]
        self._order.insert(i, entry)  # type: ignore[union-attr]
        self._need = np.insert(self._need, i, need, axis=0)
        self._waits = np.insert(self._waits, i, job.status is not JobStatus.RUNNING)
        self._smallest = min(self._smallest, need[0])
        return True

    def _fill(self, snap: Snapshot) -> Plan:
        order, need, waits = self._order, self._need, self._waits
        n = len(order)  # type: ignore[arg-type]
        total = np.asarray(snap.cluster.total, dtype=float) + 1e-9
        granted = np.zeros(n, dtype=bool)
        if n:
            used = np.cumsum(need, axis=0)  # each column non-decreasing: the granted prefix ends
            f = min(int(np.searchsorted(used[:, r], total[r], "right")) for r in range(3))  # at the first miss
            granted[:f] = True
            left = total - used[f - 1] if f else total
            i = f + 1
            while i < n and left[0] >= self._smallest:  # after it, the units that still fit, in order
                later = (need[i:, 0] <= left[0]) & (need[i:, 1] <= left[1]) & (need[i:, 2] <= left[2])
                j = int(np.argmax(later))
                if not later[j]:
                    break
                i += j
                granted[i] = True
                left = left - need[i]
                i += 1
        stop = [order[i][4] for i in np.flatnonzero(~granted & ~waits)]  # type: ignore[index]
        free = np.array(snap.free, dtype=float)
        for job in stop:
            add_use(free, job.spec, job.allocation)
        r = Realiser(snap, self.placement, preempt="none", free=free)
        for i in np.flatnonzero(granted & waits).tolist():
            job = order[i][4]  # type: ignore[index]
            if r.offer(job, job.spec.num_workers, job.spec.num_ps) is not None:
                waits[i] = False  # runs once the plan is carried out (a refused plan: rebuilt next call)
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
