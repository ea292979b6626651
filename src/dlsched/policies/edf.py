"""Earliest deadline first without autoscaling: the deadline-ordering baseline.

Jobs run at their requested size (a deadline-only job at its default), gang-started, in deadline
order with backfill; jobs without a deadline go after those with one. No feasibility check by
default (plain EDF keeps trying a hopeless job, which is the weakness the QoS framework's
feasibility filter addresses); `feasibility=True` adds it, deprioritising rather than rejecting.
"""

from __future__ import annotations

from dlsched.core.errors import ConfigError
from dlsched.policies.phased import PhasedPolicy
from dlsched.policies.phases.deadline import DeadlineFeasibility, EarliestDeadline, EarliestFinish
from dlsched.policies.phases.placement import PLACEMENTS
from dlsched.policies.phases.sizing import Requested


def edf(feasibility: bool = False, placement: str = "least-loaded") -> PhasedPolicy:
    """EDF, non-preemptive, backfilling, at requested sizes; `placement` names a placement phase."""
    if placement not in PLACEMENTS:
        raise ConfigError(f"edf: unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
    observers: tuple[EarliestFinish, ...] = ()
    if feasibility:
        finish = EarliestFinish()
        adm = DeadlineFeasibility(finish, mode="deprioritise")
        ordering = EarliestDeadline(late=lambda: adm.late)
        observers = (finish,)
    else:
        adm, ordering = None, EarliestDeadline()
    return PhasedPolicy(
        admission=adm, ordering=ordering, sizing=Requested(), placement=PLACEMENTS[placement],
        name="edf", preempt="none", backfill=True, observers=observers,
    )
