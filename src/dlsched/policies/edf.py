"""Earliest deadline first without autoscaling: the deadline-ordering baseline.

Jobs run at their requested size (a deadline-only job at its default), gang-started, in deadline
order with backfill; jobs without a deadline go after those with one. No feasibility check by
default (plain EDF keeps trying a hopeless job, which is the weakness the QoS framework's
feasibility filter addresses); `feasibility=True` adds it, deprioritising rather than rejecting.
"""

from __future__ import annotations

from dlsched.core.policy import PhasedPolicy
from dlsched.policies.phases.admission import AdmitAll
from dlsched.policies.phases.deadline import DeadlineFeasibility, EarliestDeadline, EarliestFinish
from dlsched.policies.phases.placement import PLACEMENTS
from dlsched.policies.phases.sizing import Requested
from dlsched.core.errors import ConfigError


class _ObservingFeasibility(DeadlineFeasibility):
    """Feasibility that feeds its estimators first (PhasedPolicy has no observe hook)."""

    def admit(self, snap, jobs):
        self.finish.observe(snap)
        return super().admit(snap, jobs)


def edf(feasibility: bool = False, placement: str = "least-loaded") -> PhasedPolicy:
    """EDF, non-preemptive, backfilling, at requested sizes; `placement` names a placement phase."""
    if placement not in PLACEMENTS:
        raise ConfigError(f"edf: unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
    if feasibility:
        adm = _ObservingFeasibility(EarliestFinish(), mode="deprioritise")
        ordering = EarliestDeadline(late=lambda: adm.late)
    else:
        adm, ordering = AdmitAll(), EarliestDeadline()
    return PhasedPolicy(
        admission=adm, ordering=ordering, sizing=Requested(), placement=PLACEMENTS[placement],
        name="edf", preemptive=False, backfill=True,
    )
