"""One cell of a sweep: a picklable description of one run, with a stable key and a `run()`.

A cell's key is a hash of its canonical content (not its position in the grid), so a sweep
resumes by content: reordering a grid, or adding a seed, never confuses one cell for another.
Kinds of cell live beside what they run: `SimCell` (here) is `dlsched compare` for one policy;
the real-traces and DL2 experiments define their own.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd


def content_key(content: dict[str, Any]) -> str:
    """16 hex digits of the SHA-256 of `content` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class CellResult:
    """A cell's summary row (flat: names, numbers, strings) and its per-job table (None: it has none)."""

    row: dict[str, Any]
    jobs: pd.DataFrame | None = None


class Cell(Protocol):
    """What the runner needs of a cell."""

    @property
    def key(self) -> str: ...  # stable, from content

    @property
    def name(self) -> str: ...  # file stem of its per-job table; readable, unique within a grid

    def labels(self) -> dict[str, Any]: ...  # what a report groups and names it by

    def run(self) -> CellResult: ...


def execute(cell: Cell) -> CellResult:
    """Run `cell` and stamp its row with where and when it ran (the runner calls this in-process
    or as a Ray task, so both paths stamp the same way)."""
    started = time.time()
    t0 = time.perf_counter()
    result = cell.run()
    result.row = {**result.row, "key": cell.key, "name": cell.name, "started_at": started,
                  "wall_s": time.perf_counter() - t0, "pid": os.getpid(), "host": socket.gethostname()}
    return result


#: Row columns that say how a cell ran rather than what it produced (they differ between two runs).
RUN_STAMPS = ("started_at", "wall_s", "pid", "host")


@dataclass(frozen=True)
class SimCell:
    """`dlsched compare` for one policy: `config` is a RunConfig (as JSON: trace, cluster, load,
    limit, elastic, profiles, sim with the seed, throughput, and this policy's options);
    `scored_with` the utility-driven policies of the grid, which decide how every policy of it is
    scored (`experiment.prepare_run`); `root` the shared traces folder (environment, not content)."""

    config: dict[str, Any]
    policy: str
    scored_with: tuple[str, ...] = ()
    trace_label: str = "default"
    root: str | None = None

    @property
    def key(self) -> str:
        return content_key({"kind": "sim", "config": self.config, "policy": self.policy,
                            "scored_with": list(self.scored_with)})

    @property
    def name(self) -> str:
        return f"{self.policy}-{self.key}"

    def labels(self) -> dict[str, Any]:
        c = self.config
        return {"trace": self.trace_label, "cluster": c.get("cluster") or "trace's own",
                "load": c.get("load"), "seed": c.get("sim", {}).get("seed", 0), "policy": self.policy}

    def run(self) -> CellResult:
        from pathlib import Path

        from dlsched.experiment import prepare_run, run_policies
        from dlsched.metrics.table import comparison_table
        from dlsched.run_config import RunConfig

        cfg = RunConfig.model_validate(self.config)
        prepared = prepare_run(cfg, [self.policy, *self.scored_with], Path(self.root) if self.root else None)
        run = run_policies(prepared.workload.jobs, prepared.cluster, [self.policy], prepared.throughput, cfg.sim,
                           prepared.options).runs[0]
        row = comparison_table([run.result]).iloc[0].to_dict()
        row = {"label": row.pop("policy"), **row, "oracle": bool(run.result.summary.get("oracle")),
               "gpus": prepared.cluster.total_gpus, "offered_load": prepared.sizing.offered.effective}
        return CellResult({**self.labels(), **row}, run.result.jobs)
