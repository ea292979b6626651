"""SRTF: shortest remaining time first, preemptive, with the true remaining work (an oracle).

No real scheduler knows how long a job will run; SRTF is the yardstick that does (DL2 and the
Tiresias simulator both use it), so it is wrapped as an `Oracle` and reported as such.

- Rigid (default): every job runs at its requested size. Jobs are ranked by true remaining time
  at that size (`ShortestRemainingTime`); the realiser ("minimal") then keeps running jobs where they
  are, starts pending ones in what is free, and preempts lower-ranked running jobs (lowest first)
  only when that lets a higher-ranked job start. Ties favour the running job, and a pending job
  that ran before is charged its restart, so nothing is preempted for a job that is not shorter.
- `elastic=True` is DL2's `srtf_env`: in SRTF order each job gets as many workers as fit, up to
  its maximum, and the first job that cannot get even its minimum stops the round. Sizes change
  as jobs come and go, so jobs restart (restart_overhead) when resized.

Remaining times only shrink while jobs run, and pending ones stand still, so the order can only
change at an arrival or a completion: SRTF is asked on events and needs no timer.
"""

from __future__ import annotations

from dlsched.core.errors import ConfigError
from dlsched.core.policy import Oracle, Policy
from dlsched.policies.phased import PhasedPolicy
from dlsched.policies.phases.ordering import ShortestRemainingTime
from dlsched.policies.phases.placement import PLACEMENTS
from dlsched.policies.phases.sizing import MaxSize, Requested


def srtf(elastic: bool = False, placement: str = "pack") -> Policy:
    """SRTF; `elastic` gives each job up to its maximum workers (DL2), `placement` names a placement."""
    if placement not in PLACEMENTS:
        raise ConfigError(f"unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
    return Oracle(PhasedPolicy(
        admission=None,
        ordering=ShortestRemainingTime(),
        sizing=MaxSize() if elastic else Requested(),
        placement=PLACEMENTS[placement],
        name="srtf",
        preempt="replan" if elastic else "minimal",
        backfill=not elastic,
        shrink=elastic,
    ))
