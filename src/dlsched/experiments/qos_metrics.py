"""Measurements the QoS evaluation needs beyond the engine's summary.

- Utilization of *allocated* resources (the paper: "allocated CPUs are used at 100%"): of the
  resource-seconds a policy had allocated (running jobs, restart pauses and pods bound while their
  peers wait), the share spent making progress. The engine's timelines count GPUs only and the
  paper's cluster has none, so `PlanRecorder` wraps a policy, records every plan it returns
  (exactly what the engine then applied: it validates and applies plans whole) and the figure is
  computed from those plans, the job end times and the engine's restart/start-up pauses.
- Feasibility of a deadline, for "100% of feasible deadlines met": judged with the *true*
  throughput model on the empty cluster (evaluation only, never shown to a policy).
- Prediction error of the completion predictor: each prediction made at a job's prediction point
  against the job's actual end, counted only when the job then finished in that configuration
  (a prediction is "if nothing changes"; a later resize by the autoscaler changes it on purpose).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.plan import Plan
from dlsched.core.policy import Policy
from dlsched.core.snapshot import Snapshot
from dlsched.policies.phases.deadline import candidate_sizes
from dlsched.policies.phases.sizing import ps_for
from dlsched.policies.phases.placement import even_spread, pack
from dlsched.sim.config import SimConfig
from dlsched.sim.results import SimResult
from dlsched.throughput.base import ThroughputModel


@dataclass(eq=False)
class PlanRecorder(Policy):
    """A transparent wrapper: same triggers and decisions as `inner`, plus a log of its plans."""

    inner: Policy
    log: list[tuple[float, dict[str, Allocation], dict[str, Allocation]]] = field(default_factory=list)
    specs: dict[str, JobSpec] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.name = self.inner.name
        self.on_events = self.inner.on_events
        self.interval = self.inner.interval
        self.oracle = self.inner.oracle

    def reset(self, cluster: Cluster, seed: int) -> None:
        self.inner.reset(cluster, seed)
        self.log.clear()

    def schedule(self, snap: Snapshot) -> Plan:
        plan = self.inner.schedule(snap)
        for j in snap.pending + snap.running:
            self.specs.setdefault(j.job_id, j.spec)
        self.log.append((snap.now, plan.running_after(snap.running), dict(plan.held)))
        return plan

    def last_change(self) -> dict[str, float]:
        """Per job, when it last got a new allocation (start, resize or restart; stops do not count:
        a job's final stop is its completion)."""
        out: dict[str, float] = {}
        prev: dict[str, Allocation] = {}
        for t, allocs, _ in self.log:
            for jid, a in allocs.items():
                if prev.get(jid) != a:
                    out[jid] = t
            prev = allocs
        return out


def _amount(spec: JobSpec, alloc: Allocation, r: int) -> float:
    return float(alloc.num_workers * spec.worker_demand[r] + alloc.num_ps * spec.ps_demand[r])


def allocated_utilization(rec: PlanRecorder, result: SimResult, config: SimConfig, resource: int) -> float:
    """Productive resource-seconds / allocated resource-seconds (see the module docstring)."""
    ends = dict(zip(result.jobs.job_id, result.jobs.end.fillna(np.inf)))
    log = rec.log
    if not log:
        return math.nan
    horizon = [t for t, _, _ in log[1:]] + [math.inf]
    allocated = productive = 0.0
    prev: dict[str, Allocation] = {}
    started: set[str] = set()
    pause_until: dict[str, float] = {}
    for (t, allocs, held), t_next in zip(log, horizon):
        for jid, a in allocs.items():
            spec = rec.specs[jid]
            if prev.get(jid) != a:
                pause = config.restart_overhead if jid in started else config.startup_overhead
                started.add(jid)
                pause_until[jid] = t + pause
            stop = min(t_next, ends.get(jid, math.inf))
            if not math.isfinite(stop) or stop <= t:
                continue
            amount = _amount(spec, a, resource)
            allocated += amount * (stop - t)
            productive += amount * max(0.0, stop - max(t, pause_until[jid]))
        for jid, a in held.items():
            stop = t_next if math.isfinite(t_next) else t
            allocated += _amount(rec.specs[jid], a, resource) * max(0.0, stop - t)
        prev = allocs
    return productive / allocated if allocated > 0 else math.nan


def fastest_alone(spec: JobSpec, cluster: Cluster, throughput: ThroughputModel) -> float:
    """Seconds the job needs at its best size on the empty cluster (true model; evaluation only)."""
    cap = cluster.capacity
    best = math.inf
    for w in candidate_sizes(spec.min_workers, spec.max_workers):
        p = ps_for(spec, w)
        alloc = even_spread(cluster, cap, spec, w, p) or pack(cluster, cap, spec, w, p)
        if alloc is None:
            continue
        rate = throughput.rate(spec, alloc, cluster)
        if rate > 0:
            best = min(best, spec.iterations / rate)
    return best


def prediction_errors(records, result: SimResult, rec: PlanRecorder) -> pd.DataFrame:
    """One row per prediction; `kept` says the job finished in the predicted configuration."""
    jobs = result.jobs.set_index("job_id")
    changed = rec.last_change()
    rows = []
    for r in records:
        if r.job_id not in jobs.index:
            continue
        j = jobs.loc[r.job_id]
        if j.status != "done":
            continue
        end = float(j.end)
        p = r.prediction
        kept = changed.get(r.job_id, -math.inf) < r.made_at - 1e-9  # a change at made_at is the autoscaler acting on it
        rows.append({
            "job_id": r.job_id, "made_at": r.made_at, "workers": r.workers, "source": p.source,
            "predicted_end": p.time, "low": p.low, "high": p.high, "actual_end": end,
            "ape_jct": abs(p.time - end) / max(end - float(j.submit), 1e-9),
            "ape_remaining": abs(p.time - end) / max(end - r.made_at, 1e-9),
            "covered": bool(p.low - 1e-6 <= end <= p.high + 1e-6), "kept": bool(kept),
        })
    return pd.DataFrame(rows)


def error_summary(df: pd.DataFrame) -> dict[str, float]:
    kept = df[df.kept] if len(df) else df
    if not len(kept):
        return {"predictions_kept": 0, "median_ape": math.nan, "p90_ape": math.nan,
                "median_ape_remaining": math.nan, "p90_ape_remaining": math.nan, "coverage": math.nan}
    return {
        "predictions_kept": int(len(kept)),
        "median_ape": float(kept.ape_jct.median()), "p90_ape": float(kept.ape_jct.quantile(0.9)),
        "median_ape_remaining": float(kept.ape_remaining.median()),
        "p90_ape_remaining": float(kept.ape_remaining.quantile(0.9)),
        "coverage": float(kept.covered.mean()),
    }
