"""Where a throughput model finds its measured data.

The measured tables live in the shared traces folder (`dlsched.paths.traces_dir()`), never in the
package: DL2's records have no license, and the others are large. Every table-backed model takes an
optional explicit path and otherwise resolves the file here, so `default_throughput` can simply skip
a model whose file is absent.
"""

from __future__ import annotations

from pathlib import Path

from dlsched.core.errors import ConfigError
from dlsched.paths import missing_traces_hint, traces_dir

DL2_SPEED = "dl2/config_speed.txt"
DL2_CONSTANTS = "dl2/workload_constants.json"
GAVEL_THROUGHPUTS = "gavel-philly-derived/simulation_throughputs.json"
POLLUX_PROFILES = "pollux-profiles/traces"
#: The table from the traces root that jobs of each model prefix run on (the models' PREFIX constants).
TABLES = {"gavel:": GAVEL_THROUGHPUTS, "pollux:": POLLUX_PROFILES, "dl2:": DL2_SPEED}


def find(relative: str, traces: Path | None = None) -> Path | None:
    """`relative` under `traces` (or under traces_dir() when None); None when it does not exist."""
    root = traces if traces is not None else traces_dir()
    if root is None:
        return None
    p = Path(root) / relative
    return p if p.exists() else None


def unserved_hint(model: str) -> str:
    """What to add to "no throughput model knows job X's model": for a model whose measured table
    lives in the traces root, which table and how to point dlsched at it; "" for any other model.
    (Without the root, a `pollux:` workload whose profiles sit beside it loads, then cannot run.)"""
    for prefix, relative in TABLES.items():
        if model.startswith(prefix):
            return f" ({prefix} jobs run on {relative} from the traces root; {missing_traces_hint(relative)})"
    return ""


def require(path: Path | str | None, relative: str, what: str) -> Path:
    """An explicit `path`, else `relative` in the traces folder; a clear ConfigError when missing."""
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"{what}: {p} does not exist")
        return p
    p = find(relative)
    if p is None:
        raise ConfigError(f"{what}: cannot find {relative} in the shared traces folder; {missing_traces_hint(relative)}")
    return p
