"""Alibaba GPU cluster trace v2023 ("openb", FGD, USENIX ATC 2023): pods, not training jobs.

Columns: name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase,
creation_time, deletion_time, scheduled_time (all times in seconds from the trace start).
- Kept: pods with num_gpu >= 1 that were scheduled (scheduled_time set).
- submit_time = creation_time; duration = deletion_time - scheduled_time. The original cluster's
  queueing delay (creation -> scheduled) is what our scheduler recreates, so it must not count as
  work; deletion - creation would double-count it.
- A pod is one unit on one node: arch `single`, one worker whose demand is the whole pod:
  gpu = num_gpu * gpu_milli / 1000 (fractional GPUs, e.g. 0.46, since Cluster accounting is float;
  sharing is modelled per node, not per physical GPU), cpu = cpu_milli / 1000,
  mem = memory_mib / 1024 GiB.
- gpu_spec -> gpu_type when it names one GPU model; checked against openb_node_list_gpu_node.csv's
  `model` column when that file sits beside the pod list. (In the default pod list gpu_spec is
  empty for every pod.) A list of models ("A|B") cannot be one JobSpec constraint: it is kept in
  extra["gpu_spec"] and noted.
- queue = qos (LS, BE, Burstable, Guaranteed); pod_phase goes to extra.
- Filters (counted in `dropped`): cpu-only pods (num_gpu 0), pods never scheduled, pods with zero
  run time. Pods still Running at the trace end have censored durations (noted).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.traces import checks
from dlsched.traces.frame import MAX_TASKS, Parsed
from dlsched.traces.problems import ProblemLog
from dlsched.traces.reader import read_csv

ATTRIBUTION = (
    "Alibaba GPU cluster trace v2023 (Weng et al., USENIX ATC 2023), alibaba/clusterdata; "
    "research use with attribution"
)
NODE_LIST = "openb_node_list_gpu_node.csv"


def _known_models(path: Path) -> set[str] | None:
    nodes = path.parent / NODE_LIST
    if not nodes.is_file():
        return None
    try:
        return set(pd.read_csv(nodes, usecols=["model"])["model"].dropna().astype(str).str.strip())
    except (ValueError, pd.errors.ParserError):
        return None


def read(path: Path, log: ProblemLog, *, elastic: bool = False, seed: int = 0) -> Parsed:
    meta = dict(name="alibaba2023", cluster="alibaba2023", attribution=ATTRIBUTION)
    required = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time"]
    df = read_csv(path, log, required=required, text_columns=["name", "gpu_spec", "qos", "pod_phase"])
    if df is None:
        return Parsed(None, **meta)
    lines = checks.lines_of(df)
    ids = checks.texts(df, "name", log)
    checks.unique_ids(ids, lines, log, "name")
    cpu = checks.numbers(df, "cpu_milli", log, min_value=0)
    mem = checks.numbers(df, "memory_mib", log, min_value=0)
    ngpu = checks.numbers(df, "num_gpu", log, min_value=0, integer=True, max_value=MAX_TASKS)
    milli = checks.numbers(df, "gpu_milli", log, min_value=0)
    with np.errstate(invalid="ignore"):
        log.add_rows(milli > 1000, lines, "gpu_milli", lambda i: f"must be <= 1000 (one GPU), got {milli[i]:g}")
        log.add_rows((ngpu >= 1) & (milli == 0), lines, "gpu_milli", "is 0 but num_gpu >= 1")
    created = checks.numbers(df, "creation_time", log, min_value=0)
    deleted = checks.numbers(df, "deletion_time", log, min_value=0)
    sched = checks.numbers(df, "scheduled_time", log, required=False, min_value=0)
    run = deleted - sched
    with np.errstate(invalid="ignore"):
        log.add_rows(run < 0, lines, "deletion_time", lambda i: f"before scheduled_time ({deleted[i]:g} < {sched[i]:g})")
        log.add_rows(sched < created, lines, "scheduled_time", lambda i: f"before creation_time ({sched[i]:g} < {created[i]:g})")
    qos = checks.texts(df, "qos", log, required=False, default="default")
    phase = checks.texts(df, "pod_phase", log, required=False, default=None)
    spec = checks.texts(df, "gpu_spec", log, required=False, default=None)

    notes: list[str] = []
    gpu_type = np.full(len(df), None, dtype=object)
    has_spec = pd.notna(spec)
    if has_spec.any():
        multi = has_spec & np.array([isinstance(s, str) and "|" in s for s in spec])
        single = has_spec & ~multi
        known = _known_models(path)
        if known is not None:
            unknown = single & ~np.isin(spec.astype(str), list(known))
            log.add_rows(unknown, lines, "gpu_spec", lambda i: f"unknown GPU model {spec[i]!r} (node list has: {', '.join(sorted(known))})")
        gpu_type[single] = spec[single]
        if multi.any():
            notes.append(f"{int(multi.sum())} pods accept several GPU models; kept in extra['gpu_spec'], not enforced")
    extra = [
        {k: v for k, v in (("pod_phase", p), ("gpu_spec", s if isinstance(s, str) and "|" in s else None)) if v is not None}
        for p, s in zip(phase.tolist(), spec.tolist())
    ]
    frame = pd.DataFrame(
        {
            "_line": lines,
            "job_id": ids,
            "submit_time": created,
            "iterations": run,
            "duration": run,
            "num_workers": 1,
            "arch": "single",
            "worker_gpu": ngpu * milli / 1000.0,
            "worker_cpu": cpu / 1000.0,
            "worker_mem": mem / 1024.0,
            "queue": qos,
            "gpu_type": gpu_type,
            "extra": extra,
        }
    )
    cpu_only = ngpu == 0
    never = ~cpu_only & df["scheduled_time"].isna().to_numpy()
    zero = ~cpu_only & ~never & (run == 0)
    dropped = {"cpu_only": int(cpu_only.sum()), "never_scheduled": int(never.sum()), "zero_duration": int(zero.sum())}
    keep = ~(cpu_only | never | zero)
    if keep.any() and phase is not None:
        end = np.nanmax(deleted)
        censored = keep & (phase == "Running") & (deleted == end)
        if censored.any():
            notes.append(
                f"{int(censored.sum())} pods were still Running at the trace end: their durations are lower bounds"
            )
    return Parsed(frame[keep], dropped={k: v for k, v in dropped.items() if v}, notes=notes, **meta)
