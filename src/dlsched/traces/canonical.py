"""dlsched's own trace format: one CSV row per job, columns named after the JobSpec fields.

It lets users bring their own traces (and `dlsched trace validate` check them), and lets any
loaded workload be saved and reloaded exactly. Only job_id, submit_time and iterations-or-duration
are required; every other column has JobSpec's default. A job with only a duration is a
duration-only job (iterations = duration). Optional first line:
    # dlsched-trace {"name": ..., "cluster": ..., "attribution": ...}
carries the Workload metadata (JSON). Utilities are written as `sigmoid(gamma1,gamma2,gamma3)`;
`extra` is a JSON object. An unknown column is an error (a misspelled `num_workers` must not
silently become 1), with a did-you-mean.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.core.errors import TraceError, did_you_mean
from dlsched.core.job import Architecture
from dlsched.core.utility import SigmoidUtility
from dlsched.traces import checks
from dlsched.traces.frame import Parsed
from dlsched.traces.problems import ProblemLog
from dlsched.traces.reader import LINE, first_line, read_csv
from dlsched.traces.workload import Workload

MAGIC = "# dlsched-trace"
COLUMNS = (
    "job_id", "submit_time", "iterations", "duration", "num_workers", "arch", "model",
    "worker_gpu", "worker_cpu", "worker_mem", "ps_gpu", "ps_cpu", "ps_mem",
    "min_workers", "max_workers", "num_ps", "min_ps", "max_ps", "deadline", "priority",
    "queue", "user", "gpu_type", "batch_size", "work_known", "utility", "extra",
)  # fmt: skip
TEXT = ("job_id", "arch", "model", "queue", "user", "gpu_type", "utility", "extra")
_SIGMOID = re.compile(r"^\s*sigmoid\(\s*([^,]+),\s*([^,]+),\s*([^,)]+)\)\s*$", re.IGNORECASE)


def read_meta(path: Path) -> dict | None:
    """The metadata of the first line, {} if it is malformed, None if there is none."""
    line = first_line(path)
    if not line.startswith(MAGIC):
        return None
    try:
        meta = json.loads(line[len(MAGIC):].strip() or "{}")
    except json.JSONDecodeError:
        return {}
    return meta if isinstance(meta, dict) else {}


def read(path: Path, log: ProblemLog, *, elastic: bool = False, seed: int = 0) -> Parsed:
    meta_line = read_meta(path)
    skip = 0 if meta_line is None else 1
    if meta_line == {} and first_line(path)[len(MAGIC):].strip():
        log.add(1, "-", "metadata after '# dlsched-trace' is not a JSON object")
    m = meta_line or {}
    meta = dict(
        name=str(m.get("name") or path.stem),
        cluster=str(m.get("cluster") or ""),
        attribution=str(m.get("attribution") or ""),
        dropped={str(k): int(v) for k, v in (m.get("dropped") or {}).items() if isinstance(v, (int, float))},
        notes=[str(x) for x in (m.get("notes") or [])],
    )
    df = read_csv(path, log, required=["job_id", "submit_time"], text_columns=TEXT, skiprows=skip)
    if df is None:
        return Parsed(None, **meta)
    if "iterations" not in df.columns and "duration" not in df.columns:
        log.add(skip + 1, "iterations", "missing required column: give iterations or duration (or both)")
        return Parsed(None, **meta)
    for c in df.columns:  # a misspelled column would otherwise silently become its default
        if c not in COLUMNS and c != LINE:
            log.add(skip + 1, c, f"unknown column{did_you_mean(c, COLUMNS)}; the format's columns: {', '.join(COLUMNS)}")
    lines = checks.lines_of(df)
    ids = checks.texts(df, "job_id", log)
    checks.unique_ids(ids, lines, log)
    num = lambda c, **kw: checks.numbers(df, c, log, required=False, **kw)  # noqa: E731
    it = num("iterations", min_value=0, strict=True)
    dur = num("duration", min_value=0, strict=True)
    model = checks.texts(df, "model", log, required=False, default="duration-only")
    no_it = np.isnan(it) & (df["iterations"].isna().to_numpy() if "iterations" in df.columns else True)
    no_dur = np.isnan(dur) & (df["duration"].isna().to_numpy() if "duration" in df.columns else True)
    log.add_rows(no_it & no_dur, lines, "iterations", "missing value: give iterations or duration")
    log.add_rows(no_it & ~no_dur & (model != "duration-only"), lines, "iterations",
                 lambda i: f"missing value: only a duration-only job may give just a duration (model is {model[i]!r})")  # fmt: skip
    it = np.where(no_it, dur, it)
    cols: dict = {
        "_line": lines,
        "job_id": ids,
        "submit_time": checks.numbers(df, "submit_time", log, min_value=0),
        "iterations": it,
        "duration": dur,
        "model": model,
        "num_workers": num("num_workers", default=1, min_value=1, integer=True),
        "arch": checks.choices(df, "arch", log, [a.value for a in Architecture], "allreduce"),
        "min_workers": num("min_workers", min_value=1, integer=True),
        "max_workers": num("max_workers", min_value=1, integer=True),
        "num_ps": num("num_ps", default=0, min_value=0, integer=True),
        "min_ps": num("min_ps", min_value=0, integer=True),
        "max_ps": num("max_ps", min_value=0, integer=True),
        "deadline": num("deadline", min_value=0),
        "priority": num("priority", default=0, integer=True),
        "queue": checks.texts(df, "queue", log, required=False, default="default"),
        "user": checks.texts(df, "user", log, required=False, default="default"),
        "gpu_type": checks.texts(df, "gpu_type", log, required=False, default=None),
        "batch_size": num("batch_size", min_value=1, integer=True),
        "work_known": checks.booleans(df, "work_known", log, default=False),
        "utility": _cells(df, "utility", log, _utility),
        "extra": _cells(df, "extra", log, _extra),
    }
    for col, default in (("worker_gpu", 1.0), ("worker_cpu", 4.0), ("worker_mem", 16.0), ("ps_gpu", 0.0), ("ps_cpu", 2.0), ("ps_mem", 8.0)):
        cols[col] = num(col, default=default, min_value=0)
    return Parsed(pd.DataFrame(cols), **meta)


def _cells(df: pd.DataFrame, col: str, log: ProblemLog, parse) -> list:
    """Parse each non-empty cell of a text column: `parse(text)` returns the value, or a problem
    (a str) that is reported at the cell's row (the value stays None)."""
    out: list = [None] * len(df)
    lines = checks.lines_of(df)
    for i, v in enumerate(checks.texts(df, col, log, required=False, default=None)):
        if v is not None:
            got = parse(v)
            if isinstance(got, str):
                log.add(int(lines[i]), col, got)
            else:
                out[i] = got
    return out


def _utility(text: str) -> SigmoidUtility | str:
    m = _SIGMOID.match(text)
    try:
        g = [float(x) for x in m.groups()] if m else None
    except ValueError:
        g = None
    if g is None or not all(math.isfinite(x) for x in g):
        return f"expected sigmoid(gamma1,gamma2,gamma3), got {text!r}"
    return SigmoidUtility(*g)


def _extra(text: str) -> dict | str:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        return f"not valid JSON ({e.msg})"
    return obj if isinstance(obj, dict) else "must be a JSON object ({...})"


def write_trace(w: Workload, path: str | Path) -> list[str]:
    """Write `w` in the dlsched format; returns what could not be written exactly (else [])."""
    path = Path(path)
    warnings: list[str] = []
    rows = []
    for j in w.jobs:
        util = None
        if isinstance(j.utility, SigmoidUtility):
            u = j.utility
            util = f"sigmoid({u.gamma1!r},{u.gamma2!r},{u.gamma3!r})"
        elif j.utility is not None:
            warnings.append(f"job {j.job_id!r}: utility {j.utility!r} is not a SigmoidUtility; not written")
        rows.append(
            (
                j.job_id, j.submit_time, j.iterations, j.duration, j.num_workers, j.arch.value, j.model,
                *j.worker_demand, *j.ps_demand, j.min_workers, j.max_workers, j.num_ps, j.min_ps, j.max_ps,
                j.deadline, j.priority, j.queue, j.user, j.gpu_type, j.batch_size,
                "true" if j.work_known else "false", util,
                json.dumps(j.extra, default=str, separators=(",", ":")) if j.extra else None,
            )
        )  # fmt: skip
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    for c in ("batch_size",):
        df[c] = df[c].astype("Int64")
    meta = {"name": w.name, "cluster": w.cluster, "attribution": w.attribution}
    if w.dropped:
        meta["dropped"] = dict(w.dropped)
    if w.notes:
        meta["notes"] = list(w.notes)
    try:
        with open(path, "w", newline="", encoding="utf-8") as f:
            f.write(f"{MAGIC} {json.dumps(meta)}\n")
            df.to_csv(f, index=False)
    except OSError as e:
        raise TraceError(f"cannot write trace {path}: {e.strerror or e}") from None
    return warnings
