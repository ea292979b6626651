"""The workload shipped inside the package, so `dlsched simulate` works on a fresh machine.

It is a contiguous slice of the MIT-licensed Microsoft ITP trace, stored verbatim in the ITP
format (see src/dlsched/data/README.md for which rows and why), read with the `itp` adapter and
shifted so that the first job arrives at time 0.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from dlsched.core.errors import TraceError
from dlsched.traces import itp
from dlsched.traces.frame import build_jobs, finalize, sort_and_limit
from dlsched.traces.problems import ProblemLog
from dlsched.traces.workload import Workload

DATA_FILE = "itp_cluster04_slice.csv"
#: The cluster preset the slice was chosen for: 8 nodes x 8 GPUs (64 GPUs), see data/README.md.
PRESET = "itp-small"


def data_path() -> Path:
    return Path(str(resources.files("dlsched") / "data" / DATA_FILE))


def default_workload() -> Workload:
    """The embedded ITP slice (no shared traces needed), first arrival at t = 0."""
    path = data_path()
    if not path.is_file():
        raise TraceError(f"the embedded default workload is missing from the installation ({path})")
    log = ProblemLog(f"embedded:{DATA_FILE}")
    parsed = itp.read(path, log)
    frame = finalize(parsed.frame, log) if parsed.frame is not None else None
    log.raise_if_any("embedded default workload is damaged")
    frame = sort_and_limit(frame, None)
    t0 = float(frame["submit_time"].min())
    frame["submit_time"] = frame["submit_time"] - t0
    jobs = build_jobs(frame, log)
    return Workload(
        name="itp-cluster04-slice",
        jobs=jobs,
        source=f"embedded:{DATA_FILE}",
        cluster=PRESET,
        attribution=itp.ATTRIBUTION + "; slice shipped with dlsched (see dlsched/data/LICENSE-ITP)",
        dropped=parsed.dropped,
        notes=[f"submit times shifted by -{t0:g} s so the first job arrives at 0 (ITP cluster04 clock)"],
    )
