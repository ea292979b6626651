"""Run the cells of a sweep that are not finished yet, in-process or as Ray tasks.

Each cell is one Ray task (one CPU); at most `workers` are in flight, so the driver never queues
the whole grid in Ray and a kill loses only the cells that were running. Results are written by
the driver as each cell finishes (`ResultsStore.record`: atomic), so a killed sweep resumes
where it stopped. A cell's result does not depend on where it ran: it is a pure function of its
content (the test suite checks Ray against one-by-one runs, cell by cell).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Callable, Hashable, Sequence

import pandas as pd

from dlsched.core.errors import ConfigError
from dlsched.sweep.cell import Cell, CellResult, execute
from dlsched.sweep.store import ResultsStore


def pending(cells: Sequence[Cell], store: ResultsStore) -> list[Cell]:
    """The cells of `cells` not finished in `store`, in grid order; a duplicate cell once."""
    seen: set[str] = set()
    out = []
    for c in cells:
        if c.key not in seen and not store.done(c):
            out.append(c)
        seen.add(c.key)
    return out


def run_cells(
    cells: Sequence[Cell],
    store: ResultsStore | Path,
    *,
    workers: int = 1,
    address: str | None = None,
    use_ray: bool | None = None,
    on_done: Callable[[Cell, dict], None] | None = None,
) -> pd.DataFrame:
    """Run every cell not yet in `store`; returns the store's table. `use_ray` None: Ray when an
    `address` is given or `workers` > 1, else in this process (no Ray needed). With Ray and no
    address, a private local Ray of `workers` CPUs is started and stopped (`ray_session`).
    `on_done(cell, row)` after each cell is stored. A failing cell stops the sweep after the
    cells in flight are stored, and its error is raised (a DlschedError as itself)."""
    store = store if isinstance(store, ResultsStore) else ResultsStore(store)
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, not {workers}")
    todo = pending(cells, store)
    if use_ray is None:
        use_ray = address is not None or workers > 1
    if not todo:
        return store.table()

    def record(cell: Cell, result: CellResult) -> None:
        row = store.record(cell, result)
        if on_done is not None:
            on_done(cell, row)

    if not use_ray:
        for cell in todo:
            record(cell, execute(cell))
        return store.table()
    _run_on_ray(todo, record, workers, address)
    return store.table()


def run_afresh(
    cells: Sequence[Cell],
    folder: Path,
    *,
    workers: int = 1,
    address: str | None = None,
    on_done: Callable[[Cell, dict], None] | None = None,
) -> ResultsStore:
    """Run every cell into the store at `folder`, emptied first, and return the store: an
    experiment's output folder is its run's own (`OutputFolder`), so an earlier run's cells there
    are not reused (`dlsched sweep` and `experiment real-traces` resume instead: `run_cells`)."""
    store = ResultsStore(folder)
    store.clear()
    run_cells(cells, store, workers=workers, address=address, on_done=on_done)
    return store


def when_groups_finish(cells: Sequence[Cell], group: Callable[[Cell], Hashable],
                       say: Callable[[Hashable], None] | None) -> Callable[[Cell, dict], None] | None:
    """An `on_done` for `run_cells` that calls `say(g)` once the last cell of group `g` (as
    `group(cell)` names it) has finished: progress by workload, whatever order the cells end in."""
    if say is None:
        return None
    left = Counter(group(c) for c in cells)

    def done(cell: Cell, _row: dict) -> None:
        g = group(cell)
        left[g] -= 1
        if not left[g]:
            say(g)

    return done


def _run_on_ray(todo: list[Cell], record: Callable[[Cell, CellResult], None], workers: int, address: str | None) -> None:
    import ray

    from dlsched.ray_session import ray_session

    with ray_session(address, workers):
        task = ray.remote(num_cpus=1, max_retries=0)(execute)
        queue = list(reversed(todo))
        running: dict = {}
        failure: BaseException | None = None
        while queue or running:
            while queue and failure is None and len(running) < workers:
                cell = queue.pop()
                running[task.remote(cell)] = cell
            if not running:
                break
            ready, _ = ray.wait(list(running), num_returns=1)
            for ref in ready:
                cell = running.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:  # the cell's own error, not Ray's wrapper
                    failure = failure or getattr(exc, "cause", None) or exc
                    continue
                record(cell, result)
        if failure is not None:
            raise failure
