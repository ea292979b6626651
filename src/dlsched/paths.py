"""Where the shared real traces live: $DLSCHED_TRACES, else a `shared/traces` folder beside the
checkout or any parent of the working directory. None when absent (a fresh machine)."""

from __future__ import annotations

import os
from pathlib import Path


def traces_dir() -> Path | None:
    env = os.environ.get("DLSCHED_TRACES")
    if env:
        p = Path(env)
        return p if p.is_dir() else None
    here = Path(__file__).resolve()
    for base in [Path.cwd(), *Path.cwd().parents, *here.parents]:
        for cand in (base / "shared" / "traces", base / "traces"):
            if (cand / "README.md").is_file() and (cand / "philly-pollux").is_dir():
                return cand
    return None
