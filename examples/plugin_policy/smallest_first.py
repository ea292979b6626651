"""smallest-first: an example dlsched policy that lives in its own package (docs/PLUGINS.md)."""

from __future__ import annotations

from dlsched.core.plan import Plan
from dlsched.core.policy import Policy
from dlsched.core.snapshot import Snapshot
from dlsched.framework.packing import add_use, pack


class SmallestFirst(Policy):
    """fewest GPUs first (ties: arrival), at the requested size, packed; never preempts"""

    name = "smallest-first"  # the rows of a comparison carry the entry point's name anyway

    def __init__(self, backfill: bool = True):  # options: keyword arguments (policy_options: in YAML)
        self.backfill = backfill  # False: the first job that does not fit blocks the ones behind it

    def schedule(self, snap: Snapshot) -> Plan:
        free = snap.free.copy()  # the core's own array: place on a copy
        plan = Plan(keep_running=True)  # name only the jobs that start; running jobs keep running
        for job in sorted(snap.pending, key=lambda j: (j.spec.gpus_requested, j.rank)):
            spec = job.spec
            alloc = pack(snap.cluster, free, spec, spec.num_workers, spec.num_ps)
            if alloc is None:
                if self.backfill:
                    continue
                break
            plan.assign(job.job_id, alloc)
            add_use(free, spec, alloc, sign=-1.0)  # what it takes is no longer free
        return plan
