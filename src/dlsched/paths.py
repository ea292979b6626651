"""Where the shared real traces (and the measured throughput tables in them) live.

The traces root decides whether a `gavel:`/`pollux:`/`dl2:` job runs on a measured table or an
analytic fallback, so it must not depend on where a command happens to run. In order:

1. an explicit folder (`--traces DIR` on the CLI), which must exist;
2. `$DLSCHED_TRACES` (a folder that does not exist means "no traces": how tests and users switch
   the measured tables off);
3. `../shared/traces` beside the source checkout the package runs from (an editable install of
   `<checkout>/src/dlsched`), found from this file's location, never from the working directory.

Otherwise None (an installed wheel on a fresh machine): only the data shipped in the package (the
embedded workload, ElasticFlow's curves) and the analytic models are available, and every report
says which model served each job. `dlsched trace sources` (docs/TRACES.md) says where to get the rest.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dlsched.core.errors import ConfigError

ENV = "DLSCHED_TRACES"


def source_checkout() -> Path | None:
    """The repository checkout the package runs from (the folder holding pyproject.toml above
    `src/dlsched`, as an editable install has it); None for an installed wheel."""
    here = Path(__file__).resolve()
    package, src, checkout = here.parents[0], here.parents[1], here.parents[2]
    if package.name != "dlsched" or src.name != "src" or not (checkout / "pyproject.toml").is_file():
        return None
    return checkout


def checkout_traces_dir() -> Path | None:
    """`../shared/traces` relative to the repository checkout (`source_checkout`); None when the
    package is not running from a checkout or it is absent."""
    checkout = source_checkout()
    if checkout is None:
        return None
    cand = checkout.parent / "shared" / "traces"
    return cand if cand.is_dir() else None


def traces_dir(explicit: str | Path | None = None) -> Path | None:
    """The traces root: `explicit`, else $DLSCHED_TRACES, else the checkout's ../shared/traces."""
    if explicit is not None:
        p = Path(explicit).expanduser()
        if not p.is_dir():
            raise ConfigError(f"traces folder {p} does not exist; {missing_traces_hint()}")
        return p
    env = os.environ.get(ENV)
    if env:
        p = Path(env).expanduser()
        return p if p.is_dir() else None
    return checkout_traces_dir()


def missing_traces_hint(holding: str | None = None) -> str:
    """The clause every error about a missing traces folder (or a file missing from it) ends with:
    both ways to point dlsched at the folder, and where to get what goes in it. One place, so that
    no message names only one of `--traces` and $DLSCHED_TRACES. `holding`: what the folder must
    hold, e.g. "dl2/workload_constants.json"."""
    folder = f"the traces folder that holds {holding}" if holding else "the shared traces folder"
    return (f"point dlsched at {folder} with --traces DIR or by setting {ENV}=DIR "
            "(where to get each trace: `dlsched trace sources`, docs/TRACES.md)")


def describe_traces(root: Path | None, served: Mapping[str, int] | None = None) -> str:
    """One line for a report: which traces root was used (or none, and why), and, when `served`
    is given (jobs per throughput model, as jobs.csv's `throughput_model` counts them), which models
    served the jobs. Without `served` it claims nothing about the models: with no root at all the
    embedded ElasticFlow curves still serve every job that names a measured model."""
    if root is not None:
        line = f"Traces root: {root} (the measured tables it holds are read from it)."
    else:
        env = os.environ.get(ENV)
        why = f"${ENV}={env} is not a folder" if env else f"no --traces, no ${ENV}, no ../shared/traces beside the checkout"
        line = f"Traces root: none ({why}); the only measured tables are the ones shipped in the package."
    if served:
        counts = ", ".join(f"{name} {n:,}" for name, n in sorted(served.items(), key=lambda kv: (-kv[1], kv[0])))
        line += f" Jobs per throughput model: {counts} (throughput_model in jobs.csv)."
    return line
