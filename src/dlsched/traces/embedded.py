"""The workload shipped inside the package, so `dlsched simulate` works on a fresh machine.

It is a contiguous slice of the MIT-licensed Microsoft ITP trace (cluster04), stored verbatim in
the ITP deadline format (see src/dlsched/data/README.md for which rows and why), shifted so that
the first job arrives at time 0. By default each job runs on the measured ElasticFlow curve of the
model and batch its row names, elastic within that curve, with its deadline
(`traces.profiles`): a workload on which scheduling decisions matter. `measured=False` gives the
same jobs as the trace's raw columns alone say: rigid, duration-only, no deadlines (the workload
the paper reruns were measured on).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from dlsched.core.errors import TraceError
from dlsched.traces import itp
from dlsched.traces.frame import build_jobs, finalize, sort_and_limit
from dlsched.traces.problems import ProblemLog
from dlsched.traces.workload import Workload

DATA_FILE = "itp_cluster04_deadline_slice.csv"
#: The cluster preset the slice was chosen for: 16 nodes x 8 GPUs (128 GPUs), see data/README.md.
PRESET = "itp-small"


def data_path() -> Path:
    return Path(str(resources.files("dlsched") / "data" / DATA_FILE))


def default_workload(*, measured: bool = True, elastic: bool | None = None, limit: int | None = None) -> Workload:
    """The embedded ITP slice (no shared traces needed), first arrival at t = 0.

    `measured`: jobs on their measured curves with deadlines (`elastic` as in `load_trace`);
    False: the raw trace's rigid duration-only jobs without deadlines. `limit`: the first N jobs.
    """
    from dlsched.traces.registry import with_profiles

    path = data_path()
    if not path.is_file():
        raise TraceError(f"the embedded default workload is missing from the installation ({path})")
    log = ProblemLog(f"embedded:{DATA_FILE}")
    parsed = (itp.read_deadline if measured else itp.read)(path, log, elastic=bool(elastic))
    frame = finalize(parsed.frame, log) if parsed.frame is not None else None
    log.raise_if_any("embedded default workload is damaged")
    whole = limit is None or limit >= len(frame)
    frame = sort_and_limit(frame, limit)
    t0 = float(frame["submit_time"].min())
    frame["submit_time"] = frame["submit_time"] - t0
    if measured:
        frame["deadline"] = frame["deadline"] - t0
    jobs = build_jobs(frame, log)
    w = Workload(
        name="itp-cluster04-slice" if measured else "itp-cluster04-slice-raw",
        jobs=jobs,
        source=f"embedded:{DATA_FILE}",
        cluster=PRESET,
        attribution=itp.ATTRIBUTION + "; slice shipped with dlsched (see dlsched/data/LICENSE-ITP)",
        dropped=parsed.dropped,
        notes=[f"submit times{' and deadlines' if measured else ''} shifted by -{t0:g} s so the first job "
               "arrives at 0 (ITP cluster04 clock)"] + ([_demo_load_note(jobs)] if whole else []),
    )
    return with_profiles(w, "auto" if measured else "off", elastic=elastic, seed=0)


def _demo_load_note(jobs: list) -> str:
    """What load the whole slice runs at on its own cluster, and that it is chosen: overloaded
    while the jobs arrive, so they queue and the policies differ (data/README.md), but not past
    what the cluster can catch up with once the arrivals stop. Computed, so it stays true."""
    from dlsched.presets import load_cluster
    from dlsched.traces.load import offered_load

    cluster = load_cluster(PRESET)
    ol = offered_load(jobs, cluster)
    return (f"the slice is a rush hour on purpose: on its own cluster ({PRESET}, {cluster.total_gpus:,} GPUs) its "
            f"{ol.window_seconds / 3600:.1f} h of arrivals offer load {ol.load:.2f}, so jobs queue and policies "
            f"differ, and {ol.horizon_load:.2f} over the {ol.horizon_seconds / 3600:.1f} h until the last job could "
            f"end, {'so the cluster can catch up once they stop' if ol.horizon_load < 1 else 'more than it can serve'}"
            "; --load 0.8 gives the same jobs a cluster that keeps up")
