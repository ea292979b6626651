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

from dlsched.core.errors import ConfigError
from dlsched.policies.phased import PhasedPolicy
from dlsched.policies.phases.ordering import Unordered
from dlsched.policies.phases.placement import PLACEMENTS
from dlsched.policies.phases.sizing import DominantShareFilling


def drf(share_by: str = "job", placement: str = "least-loaded", stop_at_first_failure: bool = False) -> PhasedPolicy:
    """DRF. `stop_at_first_failure=True` ends the filling at the first unit that does not fit (DL2);
    the default only freezes that job, so one big rigid job cannot idle the rest of the cluster."""
    if placement not in PLACEMENTS:
        raise ConfigError(f"unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
    return PhasedPolicy(
        admission=None,
        ordering=Unordered(),  # the filling breaks ties by arrival itself
        sizing=DominantShareFilling(share_by=share_by, stop_at_first_failure=stop_at_first_failure),
        placement=PLACEMENTS[placement],
        name="drf",
        preempt="minimal",
        shrink=True,
    )
