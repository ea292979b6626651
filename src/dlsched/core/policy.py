"""The Policy protocol, and the four-phase composition most policies are made of.

A policy is asked `schedule(snapshot) -> Plan` by the simulator or the live controller, on the
triggers it declares. Most published schedulers decompose into admission → ordering → sizing →
placement (as in Blox and the kube-scheduler framework), so each phase is written once in
`dlsched.policies.phases` and composed. Policies that plan over time (OASiS) or act step by
step (DL2) override `schedule` directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.plan import Plan
from dlsched.core.snapshot import JobState, JobStatus, Snapshot


class Policy:
    """Base class. Subclasses set the class attributes and implement `schedule`.

    - `on_events`: ask me on every arrival and completion (Tiresias, FIFO, DRF).
    - `interval`: also ask me every `interval` seconds (DL2 and Optimus think in slots).
    - `oracle`: I may see ground truth (true remaining work, true throughput). Only for
      baselines defined that way (SRTF); reported as such.
    """

    name: str = "policy"
    on_events: bool = True
    interval: float | None = None
    oracle: bool = False

    def reset(self, cluster: Cluster, seed: int) -> None:
        """Called once before a run; stateful policies clear their state here."""

    def schedule(self, snap: Snapshot) -> Plan:  # pragma: no cover - abstract
        raise NotImplementedError


def named(policy: Policy, name: str) -> Policy:
    """`policy`, renamed: two configurations of one policy stay two rows in a comparison."""
    policy.name = name
    return policy


# --- the four phases -----------------------------------------------------------------------


@runtime_checkable
class Admission(Protocol):
    def admit(self, snap: Snapshot, jobs: list[JobState]) -> tuple[list[JobState], dict[str, str]]:
        """Return the jobs that may be scheduled now, and {job_id: reason} for jobs refused for good."""


@runtime_checkable
class Ordering(Protocol):
    def order(self, snap: Snapshot, jobs: list[JobState]) -> list[JobState]:
        """Return the jobs in the order they should get resources (highest priority first)."""


@runtime_checkable
class Sizing(Protocol):
    def size(self, snap: Snapshot, jobs: list[JobState]) -> list[tuple[JobState, int, int]]:
        """Given ordered jobs, return (job, workers, ps) for those that should run, in order."""


@runtime_checkable
class Placement(Protocol):
    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        """Choose nodes for `workers` workers and `ps` PSs within `free`, or None. Must not mutate `free`."""


@dataclass
class PhasedPolicy(Policy):
    """admission → ordering → sizing → placement.

    - `preemptive`: re-plan every job from an empty cluster each time (running jobs not in the
      plan are preempted; a running job whose size is unchanged keeps its nodes when they still
      fit, so nothing restarts needlessly). Otherwise running jobs keep their allocations and only
      pending jobs are placed in what is free.
    - `backfill`: when a job does not fit, try the next ones; without it the first job that does
      not fit blocks everything behind it (strict FIFO).
    - `shrink`: when a job does not fit at its size, try fewer workers down to its minimum.
    """

    admission: Admission
    ordering: Ordering
    sizing: Sizing
    placement: Placement
    name: str = "phased"
    preemptive: bool = False
    backfill: bool = True
    shrink: bool = False
    on_events: bool = True
    interval: float | None = None
    oracle: bool = False

    def schedule(self, snap: Snapshot) -> Plan:
        plan = Plan()
        if self.preemptive:
            candidates = snap.running + snap.pending
            free = snap.cluster.capacity.copy()
        else:  # running jobs keep their nodes: only waiting jobs go through the phases
            candidates = snap.pending
            free = snap.free.copy()
            plan.allocations = {job.spec.job_id: job.allocation for job in snap.running}
        admitted, rejected = self.admission.admit(snap, candidates)
        plan.rejected.update(rejected)
        ordered = self.ordering.order(snap, admitted)
        # a sizing that decides job by job is asked lazily, so strict FIFO stops at its head
        size_one = getattr(self.sizing, "size_one", None)
        if size_one is not None:
            sized = ((j, *size_one(snap, j)) for j in ordered)
        else:
            sized = self.sizing.size(snap, ordered)
        for job, workers, ps in sized:
            running = job.status is JobStatus.RUNNING
            if running and not self.preemptive:
                continue
            alloc = None
            if running and job.num_workers == workers and job.num_ps == ps:
                alloc = keep_if_fits(job, free)
            if alloc is None:
                alloc = self._place(snap.cluster, free, job.spec, workers, ps)
            if alloc is None:
                if not self.backfill:
                    break
                continue
            take(free, alloc, job.spec)
            plan.assign(job.job_id, alloc)
        return plan

    def _place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        alloc = self.placement.place(cluster, free, spec, workers, ps)
        if alloc is None and self.shrink:
            for w in range(workers - 1, spec.min_workers - 1, -1):
                alloc = self.placement.place(cluster, free, spec, w, min(ps, max(spec.min_ps, w)))
                if alloc is not None:
                    break
        return alloc


def keep_if_fits(job: JobState, free: np.ndarray) -> Allocation | None:
    """The job's current allocation, if it still fits in `free` (sticky placement)."""
    alloc = job.allocation
    if alloc is None:
        return None
    use = alloc.usage(np.asarray(job.spec.worker_demand), np.asarray(job.spec.ps_demand))
    if (free[list(alloc.nodes)] + 1e-9 >= use).all():
        return alloc
    return None


def take(free: np.ndarray, alloc: Allocation, spec: JobSpec) -> None:
    """Subtract an allocation's use from `free` in place."""
    use = alloc.usage(np.asarray(spec.worker_demand), np.asarray(spec.ps_demand))
    np.subtract.at(free, list(alloc.nodes), use)
