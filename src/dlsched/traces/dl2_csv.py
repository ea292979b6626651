"""DL2's raw Alibaba 2018 job trace (dl2/ali-v2/job_trace_YYYYMMDD.csv): one file or a folder of them.

Each line has 5 fields, the last with unescaped quotes and commas (not RFC CSV), so lines are split
on their first four commas: job id, 32-hex model/job hash, start (Unix s), end (Unix s, 0 = none),
resource request `"ClusterInfo": "{json}"` with per-role count / cpu (% of a core) / gpu (% of a
GPU) / memory (MB; 82 rows spell it Memory).
- submit_time = start - earliest start: the trace records start times only, so the original
  cluster's queueing is not visible (noted).
- Duration-only: iterations = end - start. arch `ps` with count workers and PSs when the request
  has both roles, else `allreduce` (`single` for one worker). Demands per task: gpu/100 GPUs,
  cpu/100 cores, memory/1024 GiB; a value the request leaves out gets DL2's task default
  (2 CPU, 4 GiB; no GPU), counted in the notes. CPU-only jobs are kept: this is a DL job trace
  whose cluster has CPUs, and DL2 itself schedules CPU-only models.
- Filters (counted in `dropped`): no end time, zero duration, no resource request (empty field
  or empty ClusterInfo: the demand is unknown, so the job cannot be placed honestly).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.core.errors import TraceError
from dlsched.traces.frame import Parsed
from dlsched.traces.problems import ProblemLog
from dlsched.traces.sizing import worker_columns

ATTRIBUTION = (
    "Alibaba 2018 DL job trace from the DL2 development repository (yxd886/scheduler); "
    "no license: research reproduction only, not redistributed"
)
PREFIX = '"ClusterInfo": "'
DEFAULT_CPU, DEFAULT_MEM = 2.0, 4.0


def files_of(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(path.glob("job_trace_*.csv"))
        if not files:
            raise TraceError(f"{path} holds no job_trace_*.csv files")
        return files
    if not path.is_file():
        raise TraceError(f"no such trace file: {path}")
    return [path]


def _role(obj: dict, role: str) -> tuple[float, float, float, float, int] | None:
    """(count, gpu, cpu, mem, defaults used) of one role, None when absent; ValueError if bad."""
    r = obj.get(role)
    if r is None:
        return None
    if not isinstance(r, dict) or "count" not in r:
        raise ValueError(f"{role} has no count")
    used = 0
    cpu = r.get("cpu")
    mem = r.get("memory", r.get("Memory"))
    if cpu is None:
        cpu, used = DEFAULT_CPU * 100, used + 1
    if mem is None:
        mem, used = DEFAULT_MEM * 1024, used + 1
    vals = [float(r["count"]), float(r.get("gpu", 0)) / 100, float(cpu) / 100, float(mem) / 1024]
    if any(not np.isfinite(v) or v < 0 for v in vals):
        raise ValueError(f"{role} has a negative or non-finite value")
    if vals[0] < 1 or vals[0] != int(vals[0]):
        raise ValueError(f"{role} count must be a whole number >= 1")
    return (*vals, used)


def _unix(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if np.isfinite(v) and v >= 0 else None


def read(path: Path, log: ProblemLog, *, elastic: bool = False, seed: int = 0) -> Parsed:
    meta = dict(name=f"dl2-csv-{path.stem}", cluster="dl2", attribution=ATTRIBUTION)
    recs: list[dict] = []
    dropped = {"no_end_time": 0, "zero_duration": 0, "no_resource_request": 0}
    defaults_used = 0
    for f in files_of(path):
        fn = str(f)
        for i, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines()):
            if not line.strip():
                continue
            ln = i + 1
            parts = line.split(",", 4)
            if len(parts) < 5:
                log.add(ln, "-", "expected 5 comma-separated fields", file=fn)
                continue
            start, end = _unix(parts[2]), _unix(parts[3])
            if start is None:
                log.add(ln, "start", f"not a Unix time: {parts[2]!r}", file=fn)
                continue
            if end is None:
                log.add(ln, "end", f"not a Unix time: {parts[3]!r}", file=fn)
                continue
            if end == 0:
                dropped["no_end_time"] += 1
                continue
            if end < start:
                log.add(ln, "end", f"before start ({end:g} < {start:g})", file=fn)
                continue
            info = parts[4].strip()
            body = info[len(PREFIX):-1] if info.startswith(PREFIX) and info.endswith('"') else None
            if info and body is None:
                log.add(ln, "ClusterInfo", f"expected '\"ClusterInfo\": \"{{...}}\"', got {info[:40]!r}", file=fn)
                continue
            if not body:
                dropped["no_resource_request"] += 1
                continue
            try:
                obj = json.loads(body)
                if not isinstance(obj, dict):
                    raise ValueError("not a JSON object")
                w = _role(obj, "worker")
                p = _role(obj, "ps")
                if w is None:
                    raise ValueError("no worker role")
            except (ValueError, TypeError) as e:
                log.add(ln, "ClusterInfo", f"bad resource request ({e})", file=fn)
                continue
            if end == start:
                dropped["zero_duration"] += 1
                continue
            defaults_used += w[4] + (p[4] if p else 0)
            recs.append(
                dict(_line=ln, job_id=parts[0].strip(), start=start, iterations=end - start,
                     workers=w[0], worker_gpu=w[1], worker_cpu=w[2], worker_mem=w[3],
                     num_ps=p[0] if p else 0, ps_gpu=p[1] if p else 0.0, ps_cpu=p[2] if p else DEFAULT_CPU,
                     ps_mem=p[3] if p else DEFAULT_MEM, is_ps=p is not None, model_hash=parts[1].strip(),
                     file=f.name)
            )  # fmt: skip
    dropped = {k: v for k, v in dropped.items() if v}
    if not recs:
        return Parsed(None, dropped=dropped, **meta)
    df = pd.DataFrame(recs)
    ids = df["job_id"].to_numpy(dtype=object)
    dup = pd.Series(ids).duplicated().to_numpy()
    for i in np.flatnonzero(dup):
        log.add(int(df["_line"].iat[i]), "job_id", f"duplicate job id {ids[i]!r}", file=str(path / df["file"].iat[i]) if path.is_dir() else str(path))
    sizing = worker_columns(df["workers"].to_numpy(dtype=float), elastic)
    arch = np.where(df["is_ps"].to_numpy(), "ps", sizing["arch"]).astype(object)
    frame = pd.DataFrame(
        {
            "_line": df["_line"],
            "job_id": ids,
            "submit_time": df["start"] - df["start"].min(),
            "iterations": df["iterations"],
            "duration": df["iterations"],
            **{k: v for k, v in sizing.items() if k != "arch"},
            "arch": arch,
            **{c: df[c] for c in ("worker_gpu", "worker_cpu", "worker_mem", "num_ps", "ps_gpu", "ps_cpu", "ps_mem")},
            "extra": [{"model_hash": h, "file": fl} for h, fl in zip(df["model_hash"], df["file"])],
        }
    )
    notes = ["submit_time is the job's start time: this trace records no submission time"]
    if defaults_used:
        notes.append(f"{defaults_used} task demands left out cpu or memory; DL2 defaults used ({DEFAULT_CPU:g} CPU, {DEFAULT_MEM:g} GiB)")
    return Parsed(frame, dropped=dropped, notes=notes, **meta)
