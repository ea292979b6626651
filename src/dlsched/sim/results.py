"""What a run produced: the per-job table, the timelines and the summary. Every number here
comes from the run itself; nothing is filled in.

The per-job table says which throughput model served each job (`throughput_model`, e.g.
"gavel-matrix" or the analytic "ring-allreduce" fallback), because that depends on which measured
tables the traces root held, and a result is not comparable without it; `profile` says which
measured curve a trace job runs on and whether the trace named it or a seeded draw chose it.

`queueing_delay` is every second a job waited (before its first start and after each preemption
or failed run, `JobState.waited`); `first_start_delay` is only the wait before the first start.
They differ exactly for the jobs that were stopped and waited again: a preemptive policy's
queue can be long while its first-start waits are near zero."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from dlsched.core.cluster import Cluster
from dlsched.core.snapshot import JobState, JobStatus

if TYPE_CHECKING:
    from dlsched.sim.config import SimConfig
    from dlsched.throughput.base import ThroughputModel

JOB_COLUMNS = [
    "job_id", "status", "reason", "submit", "start", "end", "jct", "queueing_delay", "first_start_delay",
    "deadline",
    "deadline_met", "utility", "restarts", "preemptions", "gpus_requested", "gpu_seconds",
    "held_gpu_seconds", "iterations", "progress", "mean_nodes", "model", "profile", "throughput_model",
]


@dataclass
class SimResult:
    policy: str
    cluster: str
    jobs: pd.DataFrame
    timeline: pd.DataFrame  # t, used_gpus, busy_gpus, held_gpus, queue, running (step function)
    summary: dict[str, Any]

    @classmethod
    def build(
        cls,
        policy: str,
        cluster: Cluster,
        states: list[JobState],
        timeline,
        end_time: float,
        policy_calls: int,
        config: "SimConfig",
        *,
        throughput: "ThroughputModel | None" = None,
        oracle: bool = False,
    ) -> "SimResult":
        """`throughput`: the run's model, asked which model served each job (the
        `throughput_model` column; None there when not given). `oracle`: the policy saw ground truth
        (the summary says so, and every table marks it)."""
        rows = []
        for js in states:
            s = js.spec
            done = js.status is JobStatus.DONE
            jct = js.end_time - s.submit_time if done else np.nan
            met = None
            if s.deadline is not None:
                met = bool(done and js.end_time <= s.deadline + 1e-6)
            util = s.utility(jct) if (s.utility is not None and done) else (0.0 if s.utility else np.nan)
            rows.append((
                s.job_id, js.status.value, js.reason, s.submit_time,
                js.first_start if js.first_start is not None else np.nan,
                js.end_time if done else np.nan, jct,
                js.waited,
                (js.first_start - s.submit_time) if js.first_start is not None else np.nan,
                s.deadline if s.deadline is not None else np.nan, met, util,
                js.restarts, js.preemptions, s.gpus_requested, js.gpu_seconds,
                js.held_gpu_seconds, s.iterations, js.progress,
                js.node_seconds / js.run_time if js.run_time > 0 else np.nan,
                s.model, s.extra.get("profile"), throughput.served_by(s) if throughput is not None else None,
            ))
        jobs = pd.DataFrame.from_records(rows, columns=JOB_COLUMNS)
        tl = pd.DataFrame({
            "t": timeline.t, "used_gpus": timeline.used_gpus, "busy_gpus": timeline.busy_gpus,
            "held_gpus": timeline.held_gpus, "queue": timeline.queue, "running": timeline.running,
        })
        summary = summarize(jobs, tl, cluster, end_time)
        summary.update(policy=policy, cluster=cluster.name, policy_calls=policy_calls, seed=config.seed,
                       oracle=oracle)
        return cls(policy=policy, cluster=cluster.name, jobs=jobs, timeline=tl, summary=summary)


def _integral(tl: pd.DataFrame, col: str, end: float) -> float:
    if tl.empty:
        return 0.0
    t = tl["t"].to_numpy()
    dt = np.diff(np.append(t, max(end, t[-1])))
    return float((tl[col].to_numpy() * dt).sum())


def summarize(jobs: pd.DataFrame, tl: pd.DataFrame, cluster: Cluster, end_time: float) -> dict[str, Any]:
    done = jobs[jobs.status == "done"]
    jct = done["jct"].to_numpy()
    first = float(jobs["submit"].min()) if len(jobs) else 0.0
    last_end = float(done["end"].max()) if len(done) else first
    makespan = max(0.0, last_end - first)
    span = max(0.0, end_time - first)
    cap = cluster.total_gpus * span
    with_deadline = jobs[jobs["deadline"].notna()]
    util_col = jobs["utility"].dropna()

    def pct(q: float) -> float:
        return float(np.percentile(jct, q)) if len(jct) else float("nan")

    return {
        "total_gpus": cluster.total_gpus,
        "jobs": int(len(jobs)),
        "finished": int(len(done)),
        "rejected": int((jobs.status == "rejected").sum()),
        "unfinished": int((jobs.status == "unfinished").sum()),
        "mean_jct": float(jct.mean()) if len(jct) else float("nan"),
        "median_jct": pct(50),
        "p95_jct": pct(95),
        "p99_jct": pct(99),
        "mean_queueing_delay": float(done["queueing_delay"].mean()) if len(done) else float("nan"),
        "mean_first_start_delay": float(done["first_start_delay"].mean()) if len(done) else float("nan"),
        "makespan": makespan,
        "deadline_jobs": int(len(with_deadline)),
        "deadline_met_ratio": float(with_deadline["deadline_met"].astype(bool).mean()) if len(with_deadline) else float("nan"),
        "total_utility": float(util_col.sum()) if len(util_col) else float("nan"),
        "gpu_utilization": _integral(tl, "busy_gpus", end_time) / cap if cap > 0 else float("nan"),
        "gpu_allocated": _integral(tl, "used_gpus", end_time) / cap if cap > 0 else float("nan"),
        "held_gpu_hours": float(jobs["held_gpu_seconds"].sum()) / 3600.0,
        # how spread out jobs ran (time-weighted nodes per running job, 1.0 = always one node)
        "mean_nodes_spanned": float(jobs["mean_nodes"].mean()) if jobs["mean_nodes"].notna().any() else float("nan"),
        "restarts": int(jobs["restarts"].sum()),
        "preemptions": int(jobs["preemptions"].sum()),
    }
