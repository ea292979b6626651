"""One check for the experiments that run their grids on the sweep runner: the same cells run in
this process and as Ray tasks give the same rows and per-job tables, cell by cell."""

from __future__ import annotations

import os
from typing import Sequence

import pandas as pd

from dlsched.sweep.cell import RUN_STAMPS, Cell
from dlsched.sweep.store import ResultsStore


def assert_same_cells(cells: Sequence[Cell], alone: ResultsStore, on_ray: ResultsStore, wall: Sequence[str] = ()) -> None:
    """`alone` and `on_ray` hold equal results for every cell of `cells`, ignoring how and when each
    ran (`RUN_STAMPS`, `finished_at`) and the wall-time columns `wall` (rows and per-job tables);
    `on_ray`'s cells ran in other processes."""
    skip = {*RUN_STAMPS, "finished_at", "key", *wall}  # rows are looked up by key
    a, b = alone.table(), on_ray.table()
    assert len(a) == len(b) == len({c.key for c in cells})
    assert os.getpid() in set(a["pid"]) and os.getpid() not in set(b["pid"])
    cols = [c for c in a.columns if c not in skip]
    assert set(cols) == {c for c in b.columns if c not in skip}
    pd.testing.assert_frame_equal(alone.rows(cells, cols), on_ray.rows(cells, cols))
    for cell in cells:
        x, y = alone.jobs(cell), on_ray.jobs(cell)
        assert (x is None) == (y is None), cell.name
        if x is not None:
            drop = [c for c in wall if c in x.columns]
            pd.testing.assert_frame_equal(x.drop(columns=drop), y.drop(columns=drop), obj=cell.name)
