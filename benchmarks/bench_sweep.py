"""A 16-cell sweep on a local Ray with 1 worker, then with 2, side by side: times and speed-up.

Each cell is QoS on the embedded ITP slice (about 6 s of simulation on this machine), so Ray's
start-up (~3 s) and per-task overhead are small beside the work. The time with start-up is what a
user waits for (`dlsched sweep`: start Ray, run, stop it); the time without it is the cells alone,
measured from the first task submitted to the last result stored.

    PYTHONPATH=$PWD/src python benchmarks/bench_sweep.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from unittest import mock

from dlsched import ray_session as session_module
from dlsched.sweep.grid import SweepGrid
from dlsched.sweep.runner import run_cells

GRID = SweepGrid(name="bench", policies=["qos"], loads=[1.0, 1.5, 2.0, 2.5], seeds=4)


def timed(workers: int) -> tuple[float, float]:
    """(seconds with Ray's start-up and shutdown, seconds of the cells alone)."""
    marks: dict[str, float] = {}
    real = session_module.ray_session

    from contextlib import contextmanager

    @contextmanager
    def marked(address, n):
        with real(address, n):
            marks["up"] = time.perf_counter()
            yield
            marks["done"] = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(session_module, "ray_session", marked):
        t0 = time.perf_counter()
        table = run_cells(GRID.cells(), Path(tmp), workers=workers, use_ray=True)
        total = time.perf_counter() - t0
    assert len(table) == 16
    return total, marks["done"] - marks["up"]


def main() -> None:
    results = {w: timed(w) for w in (1, 2)}
    for w, (total, cells) in results.items():
        print(f"{w} worker{'s' * (w > 1)}: {total:6.1f} s with Ray start-up, {cells:6.1f} s cells alone")
    (t1, c1), (t2, c2) = results[1], results[2]
    print(f"speed-up 2 vs 1 workers: {t1 / t2:.2f}x with start-up, {c1 / c2:.2f}x cells alone")


if __name__ == "__main__":
    main()
