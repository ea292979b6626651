"""The default throughput router: measured tables first, then analytic models, then duration-only.

Why this order: a job whose model a measured table knows should get the measured speed; analytic
models cover what no table measured (any "ring:"/"ps:" job described by spec.extra); a duration-only
trace job ends at exactly its trace duration. Tables whose data is absent (no shared traces folder)
are simply left out, so the router works on any machine.

The traces root is an argument, never looked up here: the caller resolves it once
(`dlsched.paths.traces_dir`, from --traces or $DLSCHED_TRACES), so which model serves a job does
not depend on the working directory. `Router.served_by` reports the choice per job.
"""

from __future__ import annotations

from pathlib import Path

from dlsched.core.errors import ConfigError
from dlsched.throughput import trace_files
from dlsched.throughput.base import Router, ThroughputModel
from dlsched.throughput.dl2_constants import load_dl2_constants
from dlsched.throughput.dl2_speed import DL2Speed
from dlsched.throughput.duration_only import DurationOnly
from dlsched.throughput.elasticflow import MeasuredCurves
from dlsched.throughput.gavel_matrix import GavelMatrix
from dlsched.throughput.parameter_server import ParameterServerModel
from dlsched.throughput.pollux_profile import PolluxProfile
from dlsched.throughput.ring_allreduce import RingAllReduceModel

THROUGHPUT_MODELS: dict[str, str] = {
    "elasticflow-curves": "ElasticFlow's measured A100 scaling curves, 1-64 GPUs, per model and batch ('elasticflow:<model>' jobs: the ITP deadline traces, or drawn with --profiles draw; ships with dlsched)",
    "gavel-matrix": "Gavel's measured steps/s per job type, GPU count and K80/P100/V100 type ('gavel:<job type>' jobs; needs shared traces)",
    "pollux-profile": "Pollux's measured step times vs. placement and batch size on T4s ('pollux:<app>' jobs; needs shared traces)",
    "dl2-speed": "DL2's measured PS/worker speed records, linear-RBF interpolated ('dl2:<model>' jobs; needs shared traces)",
    "parameter-server": "DL2's analytic PS model with intra/inter-node/inter-rack bandwidth ('ps:*' jobs with extra compute_s/model_size_mb; 'dl2:*' with dl2='analytic')",
    "ring-allreduce": "analytic ring all-reduce: compute + 2(w-1)/w x size / bottleneck link ('ring:*' jobs; built-in Gavel job types)",
    "duration-only": "trace duration at the requested size, speedup w**alpha at other sizes ('duration-only' jobs)",
}

DL2_MODES = ("measured", "analytic")


def default_throughput(
    traces: Path | None, *, duration_alpha: float = 0.85, dl2: str = "measured"
) -> Router:
    """Router over every model whose data is available under the traces root `traces` (None: no
    measured tables, analytic models only).

    `dl2="measured"`: "dl2:*" jobs use DL2's measured speed records (unsupported without them);
    `dl2="analytic"`: they use DL2's analytic PS model with its per-model constants.
    """
    if dl2 not in DL2_MODES:
        raise ConfigError(f"throughput dl2 must be one of {', '.join(DL2_MODES)}, got {dl2!r}")
    root = Path(traces) if traces is not None else None
    models: list[ThroughputModel] = [MeasuredCurves()]  # its curves ship with the package
    if root is not None:
        if (p := trace_files.find(trace_files.GAVEL_THROUGHPUTS, root)) is not None:
            models.append(GavelMatrix(p))
        if (p := trace_files.find(trace_files.POLLUX_PROFILES, root)) is not None:
            models.append(PolluxProfile(p))
        if dl2 == "measured" and (p := trace_files.find(trace_files.DL2_SPEED, root)) is not None:
            models.append(DL2Speed(p))
    const_path = trace_files.find(trace_files.DL2_CONSTANTS, root) if root is not None else None
    constants = load_dl2_constants(const_path) if const_path is not None else None
    models.append(ParameterServerModel(constants if dl2 == "analytic" else None))
    models.append(RingAllReduceModel(constants))
    models.append(DurationOnly(alpha=duration_alpha))
    return Router(models)
