"""`dlsched sweep`: the grid, cells equal to one-by-one runs (through Ray), resume after a kill, report."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
from typer.testing import CliRunner

from dlsched.cli import app
from dlsched.core.errors import ConfigError
from dlsched.sweep.cell import RUN_STAMPS, execute
from dlsched.sweep.grid import SweepGrid, load_grid
from dlsched.metrics.intervals import t_interval
from dlsched.sweep.report import summarize
from dlsched.sweep.runner import run_cells
from dlsched.sweep.store import ResultsStore

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _grid(tmp_path: Path, text: str, name: str = "grid.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _results(table: pd.DataFrame) -> pd.DataFrame:
    """A results table without how and when each cell ran, one row per cell in key order."""
    drop = [c for c in (*RUN_STAMPS, "finished_at") if c in table.columns]
    return table.drop(columns=drop).sort_values("key").reset_index(drop=True)


def test_a_typo_in_the_grid_is_one_line_error(tmp_path):
    for text, said in [("policies: [fifo]\nseed: 3\n", "seed"),
                       ("policies: [fifo, tiresas]\n", "tiresias"),
                       ("policies: [fifo]\npolicy_options: {fifo: {nope: 1}}\n", "nope"),
                       ("policies: [fifo]\nreference: drf\n", "reference"),
                       ("policies: [fifo]\nloads: [0]\n", "load"),
                       ("policies: [fifo]\nloads: [0.8, 3]\n", "load must be a number from 0.05 to 2")]:
        with pytest.raises(ConfigError, match=said):
            load_grid(_grid(tmp_path, text))
    result = CliRunner().invoke(app, ["sweep", str(_grid(tmp_path, "policies: [fifo]\nsede: 3\n"))])
    assert result.exit_code == 2 and "sede" in result.output and "Traceback" not in result.output


def test_an_unreachable_ray_address_is_one_line_error_at_once(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    grid = _grid(tmp_path, "policies: [fifo]\nlimit: 5\n")
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        result = CliRunner().invoke(app, ["sweep", str(grid), "--out", str(tmp_path / "out"), "--ray-address", address])
        assert result.exit_code == 2 and "cannot reach Ray" in result.output and "Traceback" not in result.output
    import ray

    assert not ray.is_initialized()


def test_cells_are_stable_and_keyed_by_content():
    a = SweepGrid(policies=["fifo", "drf"], seeds=2, loads=[1.0, 2.0])
    b = SweepGrid(policies=["drf", "fifo"], seeds=[1, 0], loads=[2.0, 1.0])
    assert [c.key for c in a.cells()] == [c.key for c in a.cells()]
    assert {c.key for c in a.cells()} == {c.key for c in b.cells()} and len(a.cells()) == 8
    assert [c.labels()["policy"] for c in a.cells()[:2]] == ["fifo", "drf"]  # policy varies fastest


def test_sweep_on_ray_equals_the_cells_run_one_by_one_and_compare(tmp_path):
    grid = SweepGrid(policies=["fifo", "optimus"], seeds=2, loads=[1.5], limit=120)
    cells = grid.cells()
    table = run_cells(cells, tmp_path / "sweep", workers=2, use_ray=True)
    assert len(table) == 4 and table["pid"].nunique() >= 1 and os.getpid() not in set(table["pid"])
    store = ResultsStore(tmp_path / "sweep")
    for cell in cells:
        alone = execute(cell)  # in this process, one by one
        row = table[table["key"] == cell.key].iloc[0]
        for k, v in alone.row.items():
            if k not in RUN_STAMPS:
                assert row[k] == v or (v != v and row[k] != row[k]), (cell.name, k)
        pd.testing.assert_frame_equal(store.jobs(cell), alone.jobs.reset_index(drop=True))
    # and a cell is `dlsched compare` for its one policy
    cell = cells[3]
    out = CliRunner().invoke(app, ["simulate", "-p", "optimus", "--load", "1.5", "--limit", "120", "--seed", "1",
                                   "--format", "json", "--out", str(tmp_path / "cmp")])
    assert out.exit_code == 0, out.output
    import json

    summary = json.loads(out.stdout[out.stdout.index("["):])[0]
    row = table[table["key"] == cell.key].iloc[0]
    assert cell.labels()["seed"] == 1 and row["mean_jct_h"] * 3600 == pytest.approx(summary["mean_jct_s"], rel=1e-12)
    assert row["finished"] == summary["finished"] and row["restarts"] == summary["restarts"]


def _tree(pid: int) -> set[int]:
    try:
        p = psutil.Process(pid)
        return {pid, *(c.pid for c in p.children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.long
def test_a_killed_sweep_resumes_without_rerunning_finished_cells(tmp_path):
    # 4 cells of ~1 s each (150 jobs of the trace): the kill after the first row leaves the other three
    # (3+ s, longer under load) unfinished, and it needs no more cells than that to catch them mid-way
    cells = 4
    path = _grid(tmp_path, f"name: kill\npolicies: [optimus]\nseeds: {cells}\nloads: [2.0]\nlimit: 150\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "dlsched.cli", "sweep", str(path), "--out", str(out), "--workers", "1"]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    store = ResultsStore(out)
    seen: set[int] = set()
    try:
        deadline = time.time() + 120
        rows = 0
        while time.time() < deadline and proc.poll() is None:
            seen |= _tree(proc.pid)
            if store.table_path.exists():
                rows = len(pd.read_parquet(store.table_path))
                if rows >= 1:
                    break
            time.sleep(0.05)
        seen |= _tree(proc.pid)
        assert proc.poll() is None and 1 <= rows < cells, (rows, proc.stderr.read() if proc.poll() is not None else "")
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep and every process of the Ray it started
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stderr.close()
    deadline = time.time() + 30
    while time.time() < deadline and any(_alive(p) for p in seen):
        time.sleep(0.2)
    assert not [p for p in seen if _alive(p)], "processes the sweep started survived it"
    assert len(seen) > 3  # the sweep had started its Ray (GCS, raylet, a worker)

    before = pd.read_parquet(store.table_path)
    done = set(before["key"])
    assert 1 <= len(done) < cells
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, again.stderr
    assert f"{len(done)} finished before, {cells - len(done)} to run" in again.stdout.replace("\n", " ")
    final = ResultsStore(out).table()
    assert set(final["key"]) == {c.key for c in load_grid(path).cells()}
    pd.testing.assert_frame_equal(  # the finished cells' rows (run stamps included) are untouched
        final[final["key"].isin(done)].sort_values("key").reset_index(drop=True),
        before.sort_values("key").reset_index(drop=True))
    log = pd.DataFrame(ResultsStore(out).run_log())
    assert log[log["key"].isin(done)]["key"].value_counts().eq(1).all()  # none of them ran again
    clean = run_cells(load_grid(path).cells(), tmp_path / "clean", use_ray=False)
    pd.testing.assert_frame_equal(_results(final), _results(clean))
    assert (out / "RESULTS.md").exists() and (out / "summary.csv").exists()


def test_a_folder_of_another_grid_needs_overwrite(tmp_path):
    a = _grid(tmp_path, "name: a\npolicies: [fifo]\nlimit: 30\n", "a.yaml")
    b = _grid(tmp_path, "name: a\npolicies: [drf]\nlimit: 30\n", "b.yaml")
    out = tmp_path / "out"
    runner = CliRunner()
    first = runner.invoke(app, ["sweep", str(a), "--out", str(out), "--in-process"])
    assert first.exit_code == 0, first.output
    refused = runner.invoke(app, ["sweep", str(b), "--out", str(out), "--in-process"])
    assert refused.exit_code == 2 and "--overwrite" in refused.output
    replaced = runner.invoke(app, ["sweep", str(b), "--out", str(out), "--in-process", "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert set(pd.read_parquet(out / "results.parquet")["policy"]) == {"drf"}
    for f in ("RESULTS.md", "summary.csv", "ratios.csv", "cells.csv", "mean_jct_h.png"):
        assert (out / f).exists(), f
    assert len(list((out / "jobs").glob("drf-*.csv"))) == 1


def test_t_interval_and_paired_ratios():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    mean, lo, hi = t_interval(x)
    half = 3.182446305284263 * x.std(ddof=1) / 2  # t(0.975, 3) * s / sqrt(4)
    assert mean == 2.5 and lo == pytest.approx(2.5 - half) and hi == pytest.approx(2.5 + half)
    assert t_interval(np.array([5.0]))[1] != t_interval(np.array([5.0]))[1]  # one seed: no interval
    cells = pd.DataFrame({"group": "g", "seed": [0, 1, 0, 1], "policy": ["a", "a", "b", "b"],
                          **{m: [1.0, 2.0, 2.0, 4.0] for m in ("mean_jct_h", "p95_jct_h", "makespan_h",
                                                              "gpu_utilization", "deadline_met_ratio", "total_utility")}})
    summary, ratios = summarize(cells, "a")
    r = ratios[ratios["metric"] == "mean_jct_h"].iloc[0]
    assert (r["policy"], r["ratio"], r["low"], r["high"]) == ("b", 2.0, 2.0, 2.0)  # b is 2x a on each seed
    assert len(summary) == 12
