"""FIFO: jobs start in arrival order at their requested size; the head of the queue blocks the rest.

Strict FIFO (no backfilling) is the classic baseline every DL scheduler paper compares against,
and its head-of-line blocking is exactly what SRTF and Tiresias improve on. Gang-scheduled: a job
starts with all its workers or waits.
"""

from __future__ import annotations

from dlsched.policies.phased import PhasedPolicy
from dlsched.policies.phases.ordering import ByArrival
from dlsched.policies.phases.placement import Pack
from dlsched.policies.phases.sizing import Requested


def fifo(backfill: bool = False) -> PhasedPolicy:
    return PhasedPolicy(
        admission=None,
        ordering=ByArrival(),
        sizing=Requested(),
        placement=Pack(),
        name="fifo",
        preempt="none",
        backfill=backfill,
    )
