"""DL2's job-aware exploration: during training, override the sampled action when the slot being
built looks poor, so the agent also sees the good states a plain softmax rarely reaches.

The rules, from DL2's code (`INJECT_SAMPLES`), applied to the window jobs:
1. If the largest job has more than randint(3, 5) times the tasks of the smallest, give the
   smallest a bundle or a worker (50/50).
2. A job with workers but no PS (or the reverse) gets the missing task type.
3. If the chosen job has more PSs than k × its workers (k ~ U[3, 8)), give it a bundle or a worker
   with probability 0.5.
DL2 applies the rules on every action. We gate them with `rate` (default 0.2), since with our
minimum-gang pre-assignment rule 2 rarely fires and rule 1 would otherwise decide most actions;
DL2's other rules (forcing rare action types, adding PSs when workers ≥ PSs / 2) are left out.
"""

from __future__ import annotations

import numpy as np

from dlsched.core.job import Architecture
from dlsched.models.slot_builder import BUNDLE, PS, WORKER, SlotBuilder


def explore(builder: SlotBuilder, action: int, rng: np.random.Generator, rate: float = 0.2) -> int:
    """The action to take instead of `action`, or `action` itself."""
    if rate <= 0 or rng.random() >= rate:
        return action
    jobs = builder.window_jobs()
    if not jobs:
        return action
    tasks = [builder.workers(j) + builder.ps(j) for j in jobs]
    small = jobs[int(np.argmin(tasks))]
    if min(tasks) > 0 and max(tasks) / min(tasks) > rng.integers(3, 6):
        kind = BUNDLE if (rng.random() < 0.5 and small.spec.arch is Architecture.PS) else WORKER
        a = builder.action_for(small, kind)
        if a is not None:
            return a
    for job in jobs:
        w, p = builder.workers(job), builder.ps(job)
        if job.spec.arch is Architecture.PS and (w == 0) != (p == 0):
            a = builder.action_for(job, WORKER if w == 0 else PS)
            if a is not None:
                return a
    i = action // 3
    if i < len(jobs):
        job = jobs[i]
        if builder.ps(job) > rng.uniform(3, 8) * builder.workers(job) and rng.random() < 0.5:
            a = builder.action_for(job, BUNDLE if rng.random() < 0.5 else WORKER)
            if a is not None:
                return a
    return action
