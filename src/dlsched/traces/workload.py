"""A loaded workload and the summary `dlsched trace info` prints about it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from dlsched.core.job import JobSpec


@dataclass
class Workload:
    """Jobs from one trace (sorted by submit time) plus where they came from.

    `cluster` names the cluster preset the trace is meant for ("" = no suggestion). `dropped`
    counts rows an adapter's documented filter removed (e.g. zero-GPU jobs in a GPU trace): they
    are not errors, but a user must be able to see that they were dropped. `notes` are caveats
    about the data a report should repeat (e.g. durations censored at the end of the trace).
    """

    name: str
    jobs: list[JobSpec]
    source: str
    cluster: str
    attribution: str = ""
    dropped: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.jobs)


def _key(x: float) -> int | float:
    return int(x) if float(x).is_integer() else round(float(x), 3)


def trace_info(w: Workload) -> dict:
    """Plain-data summary (JSON-serialisable): size, time span, GPU/arch/model mix, GPU-hours."""
    jobs = w.jobs
    n = len(jobs)
    submit = np.array([j.submit_time for j in jobs], dtype=float)
    gpus = np.array([j.gpus_requested for j in jobs], dtype=float)
    dur = np.array([np.nan if j.duration is None else j.duration for j in jobs], dtype=float)
    known = ~np.isnan(dur)
    hist = Counter(_key(g) for g in gpus)
    models = Counter(j.model for j in jobs)
    info: dict = {
        "name": w.name,
        "source": w.source,
        "cluster": w.cluster,
        "attribution": w.attribution,
        "jobs": n,
        "first_submit": float(submit.min()) if n else None,
        "last_submit": float(submit.max()) if n else None,
        "span_hours": float((submit.max() - submit.min()) / 3600) if n else 0.0,
        "gpus_histogram": {str(k): v for k, v in sorted(hist.items())},
        "max_gpus": float(gpus.max()) if n else 0.0,
        "fractional_gpu_jobs": int(np.sum(gpus != np.floor(gpus))),
        "arch": dict(Counter(j.arch.value for j in jobs)),
        "models": dict(models.most_common(20)),
        "distinct_models": len(models),
        "queues": len({j.queue for j in jobs}),
        "jobs_with_duration": int(known.sum()),
        "total_gpu_hours": float(np.sum(dur[known] * gpus[known]) / 3600),
        "median_duration_s": float(np.median(dur[known])) if known.any() else None,
        "deadlines": sum(j.deadline is not None for j in jobs),
        "elastic": sum(j.elastic for j in jobs),
        "work_known": sum(j.work_known for j in jobs),
        "gpu_type_constrained": sum(j.gpu_type is not None for j in jobs),
        "dropped": dict(w.dropped),
        "notes": list(w.notes),
    }
    return info
