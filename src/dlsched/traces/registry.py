"""Format names, format detection, and the two entry points: load_trace and validate_trace.

Every file format goes through the same pipeline: adapter `read` (parse + check its own columns)
-> `finalize` (JobSpec defaults, normalisation and checks, vectorised) -> problems? -> sort by
submit time, apply `limit` -> JobSpecs. Validation is the same pipeline minus building jobs, so
`validate_trace` and `load_trace` can never disagree about a file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from dlsched.core.errors import ConfigError, TraceError
from dlsched.traces import alibaba, canonical, dl2_csv, gavel, itp, philly, pollux
from dlsched.traces.dl2 import dl2_workload
from dlsched.traces.frame import Parsed, build_jobs, finalize, sort_and_limit
from dlsched.throughput.elasticflow import ATTRIBUTION as ELASTICFLOW_ATTRIBUTION
from dlsched.traces.problems import ProblemLog
from dlsched.traces.profiles import apply_profiles
from dlsched.traces.reader import first_line
from dlsched.traces.synthetic import synthetic_workload
from dlsched.traces.workload import Workload

FORMATS: dict[str, str] = {
    "philly": "Microsoft Philly 2017 job list: timestamp,duration,num_gpus,gpu_time,cluster",
    "itp": "Microsoft ITP 2021 raw cluster file: job_id,submission_time,duration,num_gpu",
    "itp-deadline": "ITP with ElasticFlow's generated columns: ...,num_iteration,model_name,deadline,batch_size,...",
    "alibaba2023": "Alibaba GPU trace v2023 pod list (openb_pod_list_*.csv)",
    "gavel": "Gavel's Philly-derived per-VC trace: job_type,...,total_steps,arrival_time,scale_factor",
    "pollux": "Pollux workload: name,time,application,num_replicas,batch_size (+ ../traces/<app> profiles)",
    "dl2-ali": "DL2's Alibaba-pattern generator (reads dl2/workload_constants.json; not a job list)",
    "dl2-csv": "DL2's raw Alibaba 2018 job trace: job_trace_YYYYMMDD.csv, one file or a folder",
    "synthetic": "generated Poisson workload, duration-only (no file)",
    "dlsched": "dlsched's own CSV: JobSpec columns; job_id, submit_time and iterations or duration required",
}

_READERS: dict[str, Callable[..., Parsed]] = {
    "philly": philly.read,
    "itp": itp.read,
    "itp-deadline": itp.read_deadline,
    "alibaba2023": alibaba.read,
    "gavel": gavel.read,
    "pollux": pollux.read,
    "dl2-csv": dl2_csv.read,
    "dlsched": canonical.read,
}
#: Formats produced by a generator rather than read from a job list.
GENERATORS = ("dl2-ali", "synthetic")

# header columns that identify a format, most specific first
_HEADERS: list[tuple[str, set[str]]] = [
    ("itp-deadline", {"job_id", "submission_time", "deadline", "num_gpu"}),
    ("itp", {"job_id", "submission_time", "duration", "num_gpu"}),
    ("philly", {"timestamp", "duration", "num_gpus"}),
    ("alibaba2023", {"name", "num_gpu", "gpu_milli", "creation_time"}),
    ("gavel", {"job_type", "total_steps", "arrival_time", "scale_factor"}),
    ("pollux", {"name", "time", "application", "num_replicas"}),
    ("dlsched", {"job_id", "submit_time"}),
]
_DL2_LINE = re.compile(r"^\d{14}[0-9a-f_]+,[0-9a-f]{32},\d+,\d+,")


def _unknown(path: Path, why: str) -> TraceError:
    return TraceError(
        f"cannot tell the trace format of {path} ({why}); give one with --format",
        problems=[f"{name}: {desc}" for name, desc in FORMATS.items()],
    )


def detect_format(path: str | Path) -> str:
    """The format of `path` from its name and header; TraceError listing FORMATS if unknown."""
    p = Path(path)
    if str(path) in GENERATORS and not p.exists():
        return str(path)
    if p.is_dir():
        if (p / "workload_constants.json").is_file():
            return "dl2-ali"
        if any(p.glob("job_trace_*.csv")):
            return "dl2-csv"
        raise _unknown(p, "a folder without workload_constants.json or job_trace_*.csv")
    if not p.is_file():
        raise TraceError(f"no such trace file: {p}")
    if p.name == "workload_constants.json":
        return "dl2-ali"
    line = first_line(p)
    if line.startswith(canonical.MAGIC):
        return "dlsched"
    if _DL2_LINE.match(line):
        return "dl2-csv"
    cols = {c.strip().strip('"') for c in line.split(",")}
    for name, need in _HEADERS:
        if need <= cols:
            return name
    raise _unknown(p, f"header {line[:80]!r} matches no known format")


def _format(path: str | Path, fmt: str | None) -> str:
    if fmt is None:
        return detect_format(path)
    key = fmt.strip().lower()
    if key not in FORMATS:
        raise ConfigError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
    return key


def _parse(path: Path, fmt: str, *, elastic: bool, seed: int, traces: Path | None = None) -> tuple[Parsed, ProblemLog]:
    log = ProblemLog(str(path))
    # only Pollux's reader needs data beyond its file (the profiles, possibly in the traces root)
    extra = {"traces": traces} if fmt == "pollux" and traces is not None else {}
    parsed = _READERS[fmt](path, log, elastic=elastic, seed=seed, **extra)
    if parsed.frame is not None:
        parsed.frame = finalize(parsed.frame, log)
    if (parsed.frame is None or len(parsed.frame) == 0) and not log:  # e.g. an empty DL2 file
        dropped = ", ".join(f"{k} {v}" for k, v in parsed.dropped.items()) or "none"
        log.add(1, "-", f"no jobs left after the {fmt} format's filters (dropped: {dropped})")
    return parsed, log


def _generate(path: str | Path, fmt: str, *, limit: int | None, elastic: bool, seed: int,
              traces: Path | None = None) -> Workload:
    if fmt == "dl2-ali":
        where = path if str(path) != "dl2-ali" else (Path(traces) / "dl2" if traces is not None else None)
        return dl2_workload(num_jobs=limit or 60, seed=seed, constants=where)
    return synthetic_workload(num_jobs=limit or 200, seed=seed, elastic=elastic)


def load_trace(
    path: str | Path, fmt: str | None = None, *, limit: int | None = None, elastic: bool | None = None,
    seed: int = 0, traces: Path | None = None, profiles: str = "auto",
) -> Workload:
    """Load a trace as a Workload (jobs in submit order; `limit` keeps the first ones).

    `profiles` says which jobs run on measured scaling curves ("auto", "draw" or "off") and
    `elastic` which jobs get a worker range (None: those on measured curves; True: every job, see
    each adapter; False: none): `traces.profiles`. `seed` drives the generator formats (dl2-ali,
    synthetic) and the profile draw; file formats are deterministic. Raises TraceError whose
    `.problems` lists every bad row as `file:row: column: problem`. `traces`: the traces root for
    data a format reads beyond its file (DL2's constants, Pollux's profiles); None: the default root.
    """
    fmt = _format(path, fmt)
    if fmt in GENERATORS:
        w = _generate(path, fmt, limit=limit, elastic=bool(elastic), seed=seed, traces=traces)
        return with_profiles(w, profiles, elastic=elastic, seed=seed)
    p = Path(path)
    parsed, log = _parse(p, fmt, elastic=bool(elastic), seed=seed, traces=traces)
    log.raise_if_any(f"cannot load {fmt} trace")
    frame = sort_and_limit(parsed.frame, limit)
    jobs = build_jobs(frame, log)
    log.raise_if_any(f"cannot load {fmt} trace")
    w = Workload(
        name=parsed.name,
        jobs=jobs,
        source=str(p),
        cluster=parsed.cluster,
        attribution=parsed.attribution,
        dropped=parsed.dropped,
        notes=parsed.notes,
    )
    return with_profiles(w, profiles, elastic=elastic, seed=seed)


def with_profiles(w: Workload, profiles: str, *, elastic: bool | None, seed: int) -> Workload:
    """`w` with measured curves applied as `profiles` says (`traces.profiles.apply_profiles`)."""
    w.jobs, notes = apply_profiles(w.jobs, profiles, elastic=elastic, seed=seed)
    w.notes = [*w.notes, *notes]
    if notes:
        w.attribution = "; ".join(x for x in (w.attribution, ELASTICFLOW_ATTRIBUTION) if x)
    return w


def validate_trace(path: str | Path, fmt: str | None = None) -> list[str]:
    """Every problem of a trace file as `file:row: column: problem` (capped); [] when clean."""
    fmt = _format(path, fmt)
    if fmt in GENERATORS:
        try:
            _generate(path, fmt, limit=None, elastic=False, seed=0)
        except TraceError as e:
            return e.problems or [str(e)]
        return []
    parsed, log = _parse(Path(path), fmt, elastic=False, seed=0)
    return log.formatted()
