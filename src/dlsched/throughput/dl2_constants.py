"""DL2's per-model constants for its analytic speed model (read at run time, never shipped).

`workload_constants.json` (shared traces, dl2/) transcribes DL2's per-model local compute time per
step, model size and inter-/intra-server bandwidths. Like all DL2 data it has no license, so it stays
in the shared folder; the analytic models read it when asked to and work without it otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dlsched.core.errors import ConfigError
from dlsched.throughput import trace_files


@dataclass(frozen=True)
class DL2ModelConstants:
    compute_s: float  # local computation time of one step on one worker
    model_size_mb: float
    inter_bw_mbs: float  # DL2's inter-server bandwidth, MB/s
    intra_bw_mbs: float  # DL2's intra-server bandwidth, MB/s
    epoch_size: int  # steps per epoch


def load_dl2_constants(path: Path | str | None = None) -> dict[str, DL2ModelConstants]:
    """{model name: constants}; ConfigError when the file is missing or malformed."""
    p = trace_files.require(path, trace_files.DL2_CONSTANTS, "DL2 workload constants")
    try:
        data = json.loads(Path(p).read_text())
        names = data["model_names_index_order"]
        c = data["per_model_constants"]
        cols = (
            c["local_comp_time_seconds_per_step"],
            c["model_size_MB"],
            c["inter_server_bandwidth_MB_per_s"],
            c["intra_server_bandwidth_MB_per_s"],
            c["epoch_size_steps_per_epoch"],
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{p}: not DL2 workload constants ({exc!r})") from None
    if any(len(col) != len(names) for col in cols):
        raise ConfigError(f"{p}: per-model lists do not match the {len(names)} model names")
    return {
        str(n): DL2ModelConstants(float(t), float(s), float(inter), float(intra), int(e))
        for n, t, s, inter, intra, e in zip(names, *cols)
    }
