"""Microsoft Philly (2017), the processed 82,247-job list from the Pollux artifact.

Columns: timestamp (YYYY-MM-DD HH:MM:SS), duration (s), num_gpus, gpu_time, cluster (VC hash).
- submit_time = seconds since the earliest timestamp in the file.
- Duration-only: iterations = duration, model "duration-only" (1 iteration/s at the requested size).
- Workers: one per GPU, demand (1 GPU, 4 CPU, 16 GiB) each; `single` for 1 GPU, else `allreduce`.
  Philly records no CPU/memory, so the CPU/memory share is a stated default that fits the usual
  8-GPU server (>= 32 cores, >= 128 GiB).
- queue = VC. Job ids are `philly-<row>` (the file has none), so a job can be found in the file.
- Filters (counted in `dropped`, not errors): zero-GPU rows, zero-duration rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.traces import checks
from dlsched.traces.frame import MAX_TASKS, Parsed
from dlsched.traces.problems import ProblemLog
from dlsched.traces.reader import read_csv
from dlsched.traces.sizing import worker_columns

ATTRIBUTION = (
    "Microsoft Philly trace (Jeon et al., USENIX ATC 2019), CC BY 4.0; processed copy from "
    "petuum/adaptdl osdi21-artifact (Apache-2.0)"
)


def read(path: Path, log: ProblemLog, *, elastic: bool = False, seed: int = 0) -> Parsed:
    meta = dict(name="philly", cluster="philly", attribution=ATTRIBUTION)
    df = read_csv(path, log, required=["timestamp", "duration", "num_gpus"], text_columns=["cluster"])
    if df is None:
        return Parsed(None, **meta)
    ts = checks.timestamps(df, "timestamp", log, fmt="%Y-%m-%d %H:%M:%S")
    dur = checks.numbers(df, "duration", log, min_value=0)
    gpus = checks.numbers(df, "num_gpus", log, min_value=0, integer=True, max_value=MAX_TASKS)
    queue = checks.texts(df, "cluster", log, required=False, default="default")
    keep = ~((gpus == 0) | (dur == 0))
    dropped = {"zero_gpus": int(np.sum(gpus == 0)), "zero_duration": int(np.sum((dur == 0) & (gpus != 0)))}
    t0 = np.nanmin(ts) if np.isfinite(ts).any() else 0.0
    lines = checks.lines_of(df)
    frame = pd.DataFrame(
        {
            "_line": lines,
            "job_id": [f"philly-{x}" for x in lines.tolist()],
            "submit_time": ts - t0,
            "iterations": dur,
            "duration": dur,
            "queue": queue,
            **worker_columns(gpus, elastic),
        }
    )[keep]
    return Parsed(frame, dropped={k: v for k, v in dropped.items() if v}, **meta)
