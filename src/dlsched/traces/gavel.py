"""Gavel's Philly-derived per-VC traces (seed 0): arrivals and sizes from Philly, job types from Gavel.

Columns: job_type, num_steps_arg, needs_data_dir, total_steps, arrival_time (s from VC start),
scale_factor (#GPUs).
- model = "gavel:" + job_type exactly as in the file (the key of Gavel's throughput matrix, e.g.
  "gavel:ResNet-50 (batch size 64)"); iterations = total_steps; batch_size parsed from the job
  type when it names one.
- work_known = False: Gavel assigned the step counts, but a real scheduler is not told them.
- num_workers = scale_factor; `single` for 1, else `allreduce`; worker (1 GPU, 4 CPU, 16 GiB).
  With elastic=True the range is 1 .. min(2k, 8) (never below k): Gavel measured 1, 2, 4, 8.
- queue = the VC (file name). Job ids are `<vc>-<row>`.
- Filters (counted in `dropped`): scale_factor 0.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dlsched.traces import checks
from dlsched.traces.frame import MAX_TASKS, Parsed
from dlsched.traces.problems import ProblemLog
from dlsched.traces.reader import read_csv
from dlsched.traces.sizing import worker_columns

ATTRIBUTION = (
    "Gavel Philly-derived traces (Narayanan et al., OSDI 2020), stanford-futuredata/gavel, MIT License; "
    "Philly data CC BY 4.0"
)
#: Largest worker count in Gavel's measured throughput matrix.
MEASURED_MAX_WORKERS = 8


def read(path: Path, log: ProblemLog, *, elastic: bool = False, seed: int = 0) -> Parsed:
    vc = path.stem
    meta = dict(name=f"gavel-{vc}", cluster="gavel", attribution=ATTRIBUTION)
    df = read_csv(path, log, required=["job_type", "total_steps", "arrival_time", "scale_factor"], text_columns=["job_type"])
    if df is None:
        return Parsed(None, **meta)
    lines = checks.lines_of(df)
    jtype = checks.texts(df, "job_type", log)
    steps = checks.numbers(df, "total_steps", log, min_value=0, strict=True)
    arr = checks.numbers(df, "arrival_time", log, min_value=0)
    scale = checks.numbers(df, "scale_factor", log, min_value=0, integer=True, max_value=MAX_TASKS)
    bs = pd.Series(jtype, dtype=object).str.extract(r"batch size (\d+)", expand=False)
    frame = pd.DataFrame(
        {
            "_line": lines,
            "job_id": [f"{vc}-{x}" for x in lines.tolist()],
            "submit_time": arr,
            "iterations": steps,
            "model": ["gavel:" + t if isinstance(t, str) else None for t in jtype],
            "batch_size": pd.to_numeric(bs, errors="coerce").to_numpy(dtype=float),
            "queue": vc,
            "work_known": False,
            **worker_columns(scale, elastic, cap=MEASURED_MAX_WORKERS),
        }
    )
    zero = scale == 0
    return Parsed(frame[~zero], dropped={"zero_gpus": int(zero.sum())} if zero.any() else {}, **meta)
