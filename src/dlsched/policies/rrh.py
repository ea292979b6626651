"""RRH, the risk-reward heuristic (Irwin, Grit, Chase, HPDC 2004) as OASiS' evaluation uses it.

Why it is here: it is the only utility-aware baseline of OASiS' Fig. 3/4. Each job runs at a fixed
worker/PS count (the job's requested size, drawn from [1, 30] in the OASiS workload). At every
arrival and completion:

- *reward*: a job's future utility if it ran from now on at its size, f(now + remaining - submit);
  its *reward density* is that per unit of dominant resource share and remaining time;
- *admission* (arrivals only): a new job is admitted if its reward minus the *delay cost* it
  imposes exceeds `threshold`; the delay cost is the utility the already admitted jobs it would
  push out of the cluster lose by waiting its remaining time. A refused job is rejected with its
  numbers;
- *continue or pause*: admitted jobs are walked in reward-density order, those with a future
  reward above the threshold first; those that fit run (a running job keeps its nodes), the others
  pause. A job whose utility has decayed to nothing therefore yields to jobs that still gain.

Remaining times come from the job's declared work and speed (`oasis.known_work`: OASiS' workload
declares its epochs and per-mini-batch time; a trace job that declares its work has its trace
duration at its requested size declared with it), as RRH needs them from the first decision on. A
job that declares no work is planned from the truth only when RRH runs as an oracle (reported as
such); otherwise it is rejected with that reason.
Placement is task by task on the least-loaded node, the round-robin-like placement of the paper.
"""

from __future__ import annotations

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.errors import ConfigError
from dlsched.core.plan import Plan
from dlsched.core.policy import Oracle, Policy
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.policies.oasis import NO_KNOWN_WORK, job_utility, known_work
from dlsched.policies.phases.placement import PLACEMENTS
from dlsched.framework.scoring import dominant_share
from dlsched.policies.phases.realise import realise
from dlsched.throughput.oasis_model import MODEL_KEY, OASiSModel


def remaining_seconds(job: JobState, workers: int, ps: int, work: float) -> float:
    """Time to finish `work` total iterations at (workers, ps) at the job's declared speed (inf if
    it cannot run). An `oasis:ps` job's speed is OASiS' formula over its declared parameters."""
    spec = job.spec
    left = max(0.0, work - job.progress)
    if spec.model == MODEL_KEY:
        rate = OASiSModel().rate(spec, Allocation.of({0: (workers, ps)}), None)  # placement-free model
    elif spec.duration:
        rate = work / spec.duration * (workers / spec.num_workers)
    else:
        rate = workers / spec.num_workers
    return left / rate if rate > 0 else np.inf


class RRH(Policy):
    """See the module docstring."""

    name = "rrh"

    def __init__(self, threshold: float = 0.0, placement: str = "least-loaded"):
        if placement not in PLACEMENTS:
            raise ConfigError(f"RRH: unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
        self.threshold = threshold
        self.placement = PLACEMENTS[placement]

    def reset(self, cluster, seed: int) -> None:
        self.cluster = cluster
        self.admitted: set[str] = set()
        self.total = cluster.capacity.sum(axis=0)

    def _share(self, job: JobState) -> float:
        s = job.spec
        use = s.demand(s.num_workers, s.num_ps)
        return float(dominant_share(use, self.total))

    def _reward(self, job: JobState, now: float, extra_wait: float = 0.0) -> tuple[float, float]:
        s = job.spec
        rem = remaining_seconds(job, s.num_workers, s.num_ps, known_work(job, self._snap))
        if not np.isfinite(rem):
            return 0.0, rem
        return float(job_utility(s)(now + extra_wait + rem - s.submit_time)), rem

    def _order(self, jobs: list[JobState], now: float) -> list[tuple[JobState, float, float]]:
        scored = []
        for j in jobs:
            r, rem = self._reward(j, now)
            density = r / max(rem * self._share(j), 1e-12)
            scored.append((j, r, rem, density))
        scored.sort(key=lambda x: (x[1] <= self.threshold, -x[3], x[0].rank))
        return [(j, r, rem) for j, r, rem, _ in scored]

    def _fits_in_order(self, ordered: list[JobState]) -> list[JobState]:
        """Jobs that a walk in this order would start on an empty view of the cluster (aggregate check)."""
        free = self.total.copy()
        out = []
        for j in ordered:
            use = j.spec.demand(j.spec.num_workers, j.spec.num_ps)
            if (use <= free + 1e-9).all():
                free -= use
                out.append(j)
        return out

    def schedule(self, snap: Snapshot) -> Plan:
        plan = Plan()
        now = snap.now
        self._snap = snap  # known_work reads the truth through it only when run as an oracle
        new = [j for j in snap.pending if j.job_id not in self.admitted]
        for job in sorted(new, key=lambda j: j.rank):
            if known_work(job, self._snap) is None:
                plan.reject(job.job_id, f"RRH: {NO_KNOWN_WORK.format(name='RRH')}")
                continue
            admitted = [j for j in snap.running + snap.pending if j.job_id in self.admitted]
            reward, rem = self._reward(job, now)
            before = [j for j, _, _ in self._order(admitted, now)]
            with_job = [j for j, _, _ in self._order(admitted + [job], now)]
            running_before = {j.job_id for j in self._fits_in_order(before)}
            running_after = {j.job_id for j in self._fits_in_order(with_job)}
            delay = 0.0
            for j in admitted:
                if j.job_id in running_before and j.job_id not in running_after:
                    r0, _ = self._reward(j, now)
                    r1, _ = self._reward(j, now, extra_wait=rem)
                    delay += r0 - r1
            if job.job_id not in running_after:
                # it would wait behind the others: its own reward is at the delayed completion
                wait = min((self._reward(j, now)[1] for j in admitted), default=0.0)
                reward, _ = self._reward(job, now, extra_wait=wait if np.isfinite(wait) else 0.0)
            if reward - delay > self.threshold:
                self.admitted.add(job.job_id)
            else:
                plan.reject(job.job_id, f"RRH: reward {reward:.4g} - delay cost {delay:.4g} <= threshold {self.threshold:g}")
        live = [j for j in snap.running + snap.pending if j.job_id in self.admitted]
        sized = [(j, j.spec.num_workers, j.spec.num_ps) for j, _, _ in self._order(live, now)]
        allocations = realise(snap, sized, self.placement, preempt="minimal", shrink=False)
        plan.allocations = allocations
        return plan


def rrh(threshold: float = 0.0, placement: str = "least-loaded", oracle: bool = False) -> Policy:
    """RRH with admission threshold `threshold` (utility units) and task-by-task placement;
    `oracle=True` uses the true work of jobs that declare none (reported as an oracle)."""
    pol = RRH(threshold, placement)
    return Oracle(pol) if oracle else pol
