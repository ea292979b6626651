"""Microsoft ITP 2021 (ElasticFlow, ASPLOS 2023): raw and deadline-augmented cluster files.

`itp` (raw/clusterNN.csv): job_id, submission_time (s from collection start), duration (s), num_gpu.
`itp-deadline` (elasticflow/clusterNN.csv): the same plus num_iteration, model_name, deadline
(absolute, same clock as submission_time) and batch_size, which ElasticFlow generated randomly.
- Times are kept as in the file (not shifted), so job ids and deadlines match the source.
- Duration-only work (iterations = duration) in both: the generated num_iteration/model_name/
  batch_size are not measurements, so they go to `extra` for policies that want them (ElasticFlow),
  not into the throughput model. About half the generated deadlines are earlier than
  submission + duration, i.e. only reachable by scaling the job up; that is the data.
- Workers: one per GPU, (1 GPU, 4 CPU, 16 GiB); `single` for 1 GPU, else `allreduce`.
- Cluster: the file's own `itp-clusterNN` preset (sized to offered load ~0.8), else `itp`.
- Filters (counted in `dropped`): zero-GPU rows, zero-duration rows.
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
    "Microsoft ITP traces (Gu et al., ElasticFlow, ASPLOS 2023), microsoft/elasticflow-traces, MIT License"
)


def _read(path: Path, log: ProblemLog, *, elastic: bool, deadline: bool) -> Parsed:
    prefix = "itp-deadline" if deadline else "itp"
    meta = dict(name=f"{prefix}-{path.stem}", cluster=suggested_preset(path), attribution=ATTRIBUTION)
    required = ["job_id", "submission_time", "duration", "num_gpu"]
    if deadline:
        required += ["deadline"]
    df = read_csv(path, log, required=required, text_columns=["job_id", "model_name"])
    if df is None:
        return Parsed(None, **meta)
    lines = checks.lines_of(df)
    ids = checks.texts(df, "job_id", log)
    checks.unique_ids(ids, lines, log)
    sub = checks.numbers(df, "submission_time", log, min_value=0)
    dur = checks.numbers(df, "duration", log, min_value=0)
    gpus = checks.numbers(df, "num_gpu", log, min_value=0, integer=True, max_value=MAX_TASKS)
    cols: dict = {
        "_line": lines,
        "job_id": ids,
        "submit_time": sub,
        "iterations": dur,
        "duration": dur,
        **worker_columns(gpus, elastic),
    }
    if deadline:
        cols["deadline"] = checks.numbers(df, "deadline", log, min_value=0)
        n_it = checks.numbers(df, "num_iteration", log, required=False, min_value=0)
        bs = checks.numbers(df, "batch_size", log, required=False, min_value=0)
        model = checks.texts(df, "model_name", log, required=False)
        cols["extra"] = [
            {k: v for k, v in (("model_name", m), ("num_iteration", _num(i)), ("batch_size", _num(b))) if v is not None}
            for m, i, b in zip(model.tolist(), n_it.tolist(), bs.tolist())
        ]
    frame = pd.DataFrame(cols)
    drop0 = gpus == 0
    dropz = (dur == 0) & ~drop0
    dropped = {"zero_gpus": int(drop0.sum()), "zero_duration": int(dropz.sum())}
    return Parsed(frame[~(drop0 | dropz)], dropped={k: v for k, v in dropped.items() if v}, **meta)


def suggested_preset(path: Path) -> str:
    """The cluster preset sized for this ITP cluster's trace (`itp-clusterNN`, offered load ~0.8
    where whole nodes allow: see each preset's source), else the generic 768-GPU `itp`."""
    from dlsched.presets import PRESETS

    name = f"itp-{path.stem}"
    return name if name in PRESETS else "itp"


def _num(x: float) -> int | float | None:
    if x != x:
        return None
    return int(x) if float(x).is_integer() else float(x)


def read(path: Path, log: ProblemLog, *, elastic: bool = False, seed: int = 0) -> Parsed:
    return _read(path, log, elastic=elastic, deadline=False)


def read_deadline(path: Path, log: ProblemLog, *, elastic: bool = False, seed: int = 0) -> Parsed:
    return _read(path, log, elastic=elastic, deadline=True)
