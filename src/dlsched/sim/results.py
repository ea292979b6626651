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

from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
import pandas as pd
from pandas.core.internals.construction import convert_object_array

from dlsched.core.cluster import Cluster
from dlsched.core.snapshot import JobState, JobStatus

if TYPE_CHECKING:
    from dlsched.sim.config import SimConfig
    from dlsched.throughput.base import ThroughputModel

JOB_COLUMNS = [
    "job_id", "status", "reason", "submit", "start", "end", "jct", "queueing_delay", "first_start_delay",
    "deadline",
    "deadline_met", "utility", "restarts", "preemptions", "gpus_requested", "gpu_seconds",
    "held_gpu_seconds", "iterations", "progress", "mean_nodes", "model", "profile", "throughput_model", "fee",
]


class _Columns:
    """Rows kept as columns: 8 bytes a number instead of a Python tuple of objects per row.

    Rows come in through `append` and wait in a small buffer; a full buffer goes column by column
    into typed arrays (`array('d')` for columns of floats, `array('q')` for columns of ints). A
    column that receives any other value (an int in a float column, a bool, None, a string)
    becomes a plain list from then on, so nothing is converted that pandas would have inferred
    differently: `values` hands back either the exact typed array or the exact original values.
    """

    BUFFER = 4096
    _FLOAT = frozenset({float, np.float64})
    _INT = frozenset({int, np.int64})

    def __init__(self, kinds: Sequence[str]):
        """`kinds`: per column "d" (floats expected), "q" (ints expected) or "O" (anything)."""
        self._cols: list[array | list] = [array(k) if k in "dq" else [] for k in kinds]
        self._buf: list[tuple] = []
        self.rows = 0

    def append(self, row: tuple) -> None:
        self._buf.append(row)
        self.rows += 1
        if len(self._buf) >= self.BUFFER:
            self.flush()

    def flush(self) -> None:
        if not self._buf:
            return
        for k, vals in enumerate(zip(*self._buf)):
            col = self._cols[k]
            if isinstance(col, array):
                allowed = self._FLOAT if col.typecode == "d" else self._INT
                if set(map(type, vals)) <= allowed:
                    col.extend(vals)
                    continue
                col = self._cols[k] = col.tolist()
            col.extend(vals)
        self._buf.clear()

    def values(self, k: int) -> np.ndarray | list:
        """Column k: a NumPy array when every value had the column's type, else the values."""
        self.flush()
        col = self._cols[k]
        if isinstance(col, array) and len(col):
            return np.frombuffer(col, dtype=np.float64 if col.typecode == "d" else np.int64).copy()
        return col if isinstance(col, list) else []


class JobTable:
    """The per-job table, filled as jobs end (`add`), so the engine can let a finished job's
    JobState go: a row costs ~8 bytes a column instead of a JobState, a tuple and its objects.

    `frame()` gives exactly the DataFrame `pd.DataFrame.from_records(rows, columns=JOB_COLUMNS)`
    gave for the rows in job index order: typed columns are the arrays those values make, and
    any other column goes through the same per-column inference `from_records` applies.
    A row is read from a JobState once its values are final (ended, or the run is over).
    """

    _KINDS = ["O", "O", "O", "d", "d", "d", "d", "d", "d", "d", "O", "d", "q", "q", "d", "d",
              "d", "d", "d", "d", "O", "O", "O", "d"]

    def __init__(self, throughput: "ThroughputModel | None" = None):
        self.throughput = throughput
        self._rows = _Columns(self._KINDS)
        self._index = array("q")

    def __len__(self) -> int:
        return self._rows.rows

    def add(self, js: JobState) -> None:
        """Record the row of a job whose values will not change any more."""
        self._index.append(js.index)
        self._rows.append(self.row(js, self.throughput))

    @staticmethod
    def row(js: JobState, throughput: "ThroughputModel | None") -> tuple:
        """The job's row, in the order of JOB_COLUMNS."""
        s = js.spec
        done = js.status is JobStatus.DONE
        jct = js.end_time - s.submit_time if done else np.nan
        met = None
        if s.deadline is not None:
            met = bool(done and js.end_time <= s.deadline + 1e-6)
        util = s.utility(jct) if (s.utility is not None and done) else (0.0 if s.utility else np.nan)
        return (
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
            js.fee,
        )

    def frame(self) -> pd.DataFrame:
        """The table in job index order (every index 0..n-1 added once)."""
        n = len(self)
        if n == 0:
            return pd.DataFrame.from_records([], columns=JOB_COLUMNS)
        order = np.argsort(np.frombuffer(self._index, dtype=np.int64), kind="stable")
        cols = {}
        for k, name in enumerate(JOB_COLUMNS):
            col = self._rows.values(k)
            if isinstance(col, np.ndarray):
                cols[name] = col[order]
            else:  # the values themselves, inferred per column as from_records does
                obj = np.empty(n, dtype=object)
                obj[:] = col
                cols[name] = convert_object_array([obj[order]], dtype=None)[0]
        return pd.DataFrame(cols, columns=JOB_COLUMNS, copy=False)


class Timeline:
    """Step functions sampled at every change: time, GPUs allocated, GPUs making progress, held
    GPUs, queue length, running jobs; several changes at one time keep the last. Kept as typed
    columns (48 bytes a sample instead of six Python objects and six list slots)."""

    COLUMNS = ["t", "used_gpus", "busy_gpus", "held_gpus", "queue", "running"]

    def __init__(self) -> None:
        self._cols = _Columns(["d", "d", "d", "d", "q", "q"])
        self._last: tuple | None = None  # the latest sample, replaced while its time repeats

    def record(self, t: float, used: float, busy: float, held: float, queue: int, running: int) -> None:
        last = self._last
        if last is not None and last[0] != t:
            self._cols.append(last)
        self._last = (t, used, busy, held, queue, running)

    def frame(self) -> pd.DataFrame:
        """The samples as the DataFrame a dict of lists gave (the same values and dtypes)."""
        if self._last is not None:
            self._cols.append(self._last)
            self._last = None
        return pd.DataFrame({name: self._cols.values(k) for k, name in enumerate(self.COLUMNS)})


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
        states: "Iterable[JobState] | JobTable",
        timeline,
        end_time: float,
        policy_calls: int,
        config: "SimConfig",
        *,
        throughput: "ThroughputModel | None" = None,
        oracle: bool = False,
    ) -> "SimResult":
        """`states`: the jobs' final states, or a `JobTable` already holding their rows (the
        engine's, filled as jobs ended). `timeline`: a `Timeline`, or any object with the six
        columns as lists. `throughput`: the run's model, asked which model served each job (the
        `throughput_model` column; None there when not given). `oracle`: the policy saw ground truth
        (the summary says so, and every table marks it)."""
        table = states
        if not isinstance(table, JobTable):
            table = JobTable(throughput)
            for js in states:
                table.add(js)
        jobs = table.frame()
        if isinstance(timeline, Timeline):
            tl = timeline.frame()
        else:
            tl = pd.DataFrame({name: getattr(timeline, name) for name in Timeline.COLUMNS})
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
        # USD: GPU-hours × the nodes' prices (no figure on a cluster without prices)
        "total_fee": float(jobs["fee"].sum()) if cluster.price is not None else float("nan"),
        # how spread out jobs ran (time-weighted nodes per running job, 1.0 = always one node)
        "mean_nodes_spanned": float(jobs["mean_nodes"].mean()) if jobs["mean_nodes"].notna().any() else float("nan"),
        "restarts": int(jobs["restarts"].sum()),
        "preemptions": int(jobs["preemptions"].sum()),
    }
