"""A sweep's results on disk: one table (`results.parquet`, a row per finished cell), each cell's
per-job table (`cells/<name>.parquet`) and a log of every cell run (`runs.jsonl`).

Written so that a kill at any instant leaves a readable folder: every file is written to a
temporary name and renamed over the old one (atomic on POSIX), the job table before the row that
points at it. A cell is finished when its row is in the table and its job table (if it has one)
exists; a cell killed half-way is simply not finished and runs again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

import pandas as pd

from dlsched.output_folder import atomic_write
from dlsched.sweep.cell import Cell, CellResult

TABLE = "results.parquet"
CELLS = "cells"
LOG = "runs.jsonl"


class ResultsStore:
    """The results of the cells run into `folder` (created on first write)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._table: pd.DataFrame | None = None

    @property
    def table_path(self) -> Path:
        return self.folder / TABLE

    def cell_path(self, name: str) -> Path:
        return self.folder / CELLS / f"{name}.parquet"

    def table(self) -> pd.DataFrame:
        """Every finished cell's row (empty when nothing ran yet)."""
        if self._table is None:
            self._table = pd.read_parquet(self.table_path) if self.table_path.exists() else pd.DataFrame()
        return self._table

    def done(self, cell: Cell) -> bool:
        t = self.table()
        if not len(t):
            return False
        hit = t[t["key"] == cell.key]
        if not len(hit):
            return False
        return not bool(hit["has_jobs"].iloc[-1]) or self.cell_path(cell.name).exists()

    def rows(self, cells: Sequence[Cell], columns: Sequence[str]) -> pd.DataFrame:
        """The rows of `cells` (all finished), in their order, with `columns` in that order: an
        experiment's table read back as its loop would have built it, whatever order the cells
        finished in (column by column, so each keeps the dtype it has in the store)."""
        t = self.table().set_index("key")
        return t.loc[[c.key for c in cells], list(columns)].reset_index(drop=True)

    def stacked_jobs(self, cells: Sequence[Cell]) -> pd.DataFrame:
        """The per-job tables of `cells` stacked in their order (a cell without one adds nothing;
        empty when none has one)."""
        tables = [t for t in (self.jobs(c) for c in cells) if t is not None]
        return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()

    def jobs(self, cell: Cell) -> pd.DataFrame | None:
        """The per-job table of a finished cell (None: it has none)."""
        path = self.cell_path(cell.name)
        return pd.read_parquet(path) if path.exists() else None

    def record(self, cell: Cell, result: CellResult) -> dict:
        """Store a finished cell: log line, then job table, then its row in the table. Returns the row."""
        self.folder.mkdir(parents=True, exist_ok=True)
        row = {**result.row, "has_jobs": result.jobs is not None, "finished_at": time.time()}
        with open(self.folder / LOG, "a") as log:
            log.write(json.dumps({k: row.get(k) for k in ("key", "name", "started_at", "finished_at", "pid")}) + "\n")
        if result.jobs is not None:
            self.cell_path(cell.name).parent.mkdir(exist_ok=True)
            atomic_write(self.cell_path(cell.name), lambda p: result.jobs.to_parquet(p, index=False))
        t = self.table()
        if len(t):
            t = t[t["key"] != cell.key]
        new = pd.DataFrame([row])
        t = new if not len(t) else pd.concat([t, new], ignore_index=True)
        atomic_write(self.table_path, lambda p: t.to_parquet(p, index=False))
        self._table = t
        return row

    def run_log(self) -> list[dict]:
        """Every cell run recorded here, in order (a cell run twice appears twice). A line torn by a
        kill in the middle of its append is skipped: the log is a record, not the results."""
        path = self.folder / LOG
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def clear(self) -> None:
        """Forget every result (the caller's --overwrite)."""
        for f in (self.table_path, self.folder / LOG):
            f.unlink(missing_ok=True)
        cells = self.folder / CELLS
        if cells.is_dir():
            for f in cells.iterdir():
                f.unlink()
        self._table = None
