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
from bisect import bisect_left, insort
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
    (share, arrival) order granting each unit that still fits the cluster's total: the jobs stay
    in a `Line` kept up by the snapshot's deltas, and the pass skips unit sizes larger than the
    GPUs left. The realisation is the phased one's: granted running jobs keep their nodes,
    running jobs not granted stop, granted waiting jobs are placed in that order in what is free
    (a rigid job cannot shrink, and nothing ranks below a kept job). Same plans, less work; any
    other case takes the phased path."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.reset(None, 0)  # type: ignore[arg-type]

    def reset(self, cluster: Cluster, seed: int) -> None:
        super().reset(cluster, seed)
        # every job in the system, in filling order: (share, submit time, index, job id, unit, job)
        self._order: list[tuple] | None = None
        self._smallest = 0.0  # GPUs of the smallest unit (at most): below it nothing more fits
        self._fast = not self.sizing.stop_at_first_failure and self.sizing.share_by == "job"  # type: ignore[attr-defined]

    def schedule(self, snap: Snapshot) -> Plan:
        if self._fast and self._follow(snap):
            return self._fill(snap)
        return super().schedule(snap)

    def _follow(self, snap: Snapshot) -> bool:
        """Keep every job in the system in filling order; False (for good) once a job is
        elastic, or runs at another size than its own (adopted by a live service)."""
        order = self._order
        if order is not None:
            for job in snap.arrived:
                if not self._add(order, snap.cluster, job):
                    return False
            for job in snap.finished:
                i = bisect_left(order, (*self._key(snap.cluster, job), job.job_id))
                if i < len(order) and order[i][3] == job.job_id:
                    del order[i]
        if order is None or len(order) != snap.num_running + snap.num_pending:
            order = self._order = []
            self._smallest = math.inf
            for job in (*snap.running, *snap.pending):
                a = job.allocation
                if not self._add(order, snap.cluster, job) or (
                        a is not None and (a.num_workers, a.num_ps) != (job.spec.num_workers, job.spec.num_ps)):
                    self._fast = False
                    return False
        return True

    def _key(self, cluster: Cluster, job: JobState) -> tuple[float, float, int]:
        return self.sizing.first_unit(cluster, job.spec)[0], job.spec.submit_time, job.index  # type: ignore[attr-defined]

    def _add(self, order: list[tuple], cluster: Cluster, job: JobState) -> bool:
        share, rigid, _, _, *need = self.sizing.first_unit(cluster, job.spec)  # type: ignore[attr-defined]
        if not rigid:
            self._fast = False
            return False
        insort(order, (share, job.spec.submit_time, job.index, job.job_id, need, job))
        self._smallest = min(self._smallest, need[0])
        return True

    def _fill(self, snap: Snapshot) -> Plan:
        l0, l1, l2 = (float(c) + 1e-9 for c in snap.cluster.total)
        granted, kept, smallest = [], 0, self._smallest
        running = JobStatus.RUNNING
        for *_, (n0, n1, n2), job in self._order:  # type: ignore[union-attr]
            if n0 <= l0 and n1 <= l1 and n2 <= l2:
                l0, l1, l2 = l0 - n0, l1 - n1, l2 - n2
                granted.append(job)
                kept += job.status is running
                if l0 < smallest:
                    break
        stop: list[JobState] = []
        if kept < snap.num_running:
            ids = {j.job_id for j in granted}
            stop = [j for j in snap.running if j.job_id not in ids]
        free = np.array(snap.free, dtype=float)
        for job in stop:
            add_use(free, job.spec, job.allocation)
        r = Realiser(snap, self.placement, preempt="none", free=free)
        for job in granted:
            if job.status is not running:
                r.offer(job, job.spec.num_workers, job.spec.num_ps)
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
