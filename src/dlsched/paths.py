"""Where the shared real traces (and the measured throughput tables in them) live.

The traces root decides whether a `gavel:`/`pollux:`/`dl2:` job runs on a measured table or an
analytic fallback, so it must not depend on where a command happens to run. In order:

1. an explicit folder (`--traces DIR` on the CLI), which must exist;
2. `$DLSCHED_TRACES` (a folder that does not exist means "no traces": how tests and users switch
   the measured tables off);
3. `../shared/traces` beside the source checkout the package runs from (an editable install of
   `<checkout>/src/dlsched`), found from this file's location, never from the working directory.

Otherwise None (an installed wheel on a fresh machine): only analytic models and the embedded
workload are available, and every report says which model served each job.
"""

from __future__ import annotations

import os
from pathlib import Path

from dlsched.core.errors import ConfigError

ENV = "DLSCHED_TRACES"


def checkout_traces_dir() -> Path | None:
    """`../shared/traces` relative to the repository checkout (the folder holding pyproject.toml
    above `src/dlsched`); None when the package is not running from a checkout or it is absent."""
    here = Path(__file__).resolve()
    package, src, checkout = here.parents[0], here.parents[1], here.parents[2]
    if package.name != "dlsched" or src.name != "src" or not (checkout / "pyproject.toml").is_file():
        return None
    cand = checkout.parent / "shared" / "traces"
    return cand if cand.is_dir() else None


def traces_dir(explicit: str | Path | None = None) -> Path | None:
    """The traces root: `explicit`, else $DLSCHED_TRACES, else the checkout's ../shared/traces."""
    if explicit is not None:
        p = Path(explicit).expanduser()
        if not p.is_dir():
            raise ConfigError(f"traces folder {p} does not exist (--traces / {ENV})")
        return p
    env = os.environ.get(ENV)
    if env:
        p = Path(env).expanduser()
        return p if p.is_dir() else None
    return checkout_traces_dir()


def describe_traces(root: Path | None) -> str:
    """One line for a report: which traces root served the measured tables, and why."""
    if root is not None:
        return f"Traces root: {root} (measured throughput tables are read from it)."
    env = os.environ.get(ENV)
    why = f"${ENV}={env} is not a folder" if env else f"no --traces, no ${ENV}, no ../shared/traces beside the checkout"
    return f"Traces root: none ({why}); jobs use the analytic throughput models (see throughput_model in jobs.csv)."
