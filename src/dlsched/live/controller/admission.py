"""Admission of a submitted job: may it run at all, and can this cluster ever hold it?

Checked at submission (the API answers 422, `dlsched submit` refuses the file) so a user hears at
once, and again by the controller when it takes a stored job in (a job stored before a rule
existed, or submitted while no controller was attached, is then rejected with the same reason).
Two rules: a worker must take something that bounds how many run at once
(`TrainJob.demand_problems`), and the job's smallest gang must fit the empty cluster (the
simulator's own `never_fits`), so a job that can never start is refused instead of queued forever.
"""

from __future__ import annotations

from dlsched.core.cluster import Cluster
from dlsched.framework.feasibility import never_fits
from dlsched.live.spec import TrainJob


def admission_problems(job: TrainJob, cluster: Cluster | None) -> list[tuple[str, str]]:
    """Why `job` may not be admitted, as (key, problem) pairs; [] when it may. `cluster` None
    (no controller attached) checks the job alone; the controller checks the fit when it starts."""
    problems = job.demand_problems()
    if not problems and cluster is not None:
        reason = never_fits(job.job_spec("admission", 0.0), cluster)
        if reason:
            problems.append(("workers", f"can never run on this cluster: {reason}"))
    return problems
