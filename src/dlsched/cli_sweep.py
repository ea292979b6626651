"""`dlsched sweep GRID.yaml`: a grid of simulations run as Ray tasks, resumable, with one report.

The folder is the sweep: rerunning the same grid into it resumes (only cells not finished run);
a folder holding another grid's results needs --overwrite, which discards them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer

from dlsched.cli_support import console, err_console, friendly, safe

GRID_FILE = "grid.json"

_HELP = """Run a grid of simulations (policies × traces × clusters × loads × seeds, from a YAML file; see
docs/SWEEP.md and examples/sweep-small.yaml) as Ray tasks, then write a report comparing the policies across
cells with 95% confidence intervals over seeds (RESULTS.md, summary.csv, ratios.csv, cells.csv, jobs/*.csv, plots).

By default dlsched starts a private local Ray (127.0.0.1 only) with --workers CPUs and stops it at the end;
--ray-address joins an existing cluster instead (e.g. one on Kubernetes through KubeRay, docs/KUBERAY.md).

Each cell's result is added to OUT/results.parquet as soon as it finishes, so a sweep that was killed or
interrupted resumes where it stopped: run the same command again (same grid, same --out) and only the cells
not finished yet run. An --out folder holding another grid's results is refused unless --overwrite is given,
which discards those results."""


def register_sweep(app: typer.Typer) -> None:
    """Add `sweep` to the `dlsched` app."""

    @app.command("sweep", help=_HELP)
    @friendly
    def sweep(
        grid_file: Path = typer.Argument(..., help="The grid: a YAML file (see examples/sweep-small.yaml)."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="The sweep's folder (default: sweep-<grid name>). "
                                           "Rerunning the same grid into it resumes the sweep."),
        workers: Optional[int] = typer.Option(None, "--workers", "-w", help="Cells run at once (default: this "
                                              "machine's CPUs, also with --ray-address: give it to use a cluster's)."),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Run on this Ray cluster ('auto', "
                                                  "'host:port' or 'ray://host:port') instead of a private local Ray."),
        in_process: bool = typer.Option(False, "--in-process", help="Run the cells one by one in this process, "
                                        "without Ray (for machines without Ray; --workers is then 1)."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Discard the results of another grid in --out."),
        traces: Optional[Path] = typer.Option(None, "--traces", help="Shared traces folder (default: $DLSCHED_TRACES, "
                                              "else ../shared/traces beside the source checkout)."),
    ) -> None:
        run_sweep(grid_file, out, workers, ray_address, in_process, overwrite, traces)


def run_sweep(grid_file: Path, out: Optional[Path], workers: Optional[int], ray_address: Optional[str],
              in_process: bool, overwrite: bool, traces: Optional[Path]) -> Path:
    """What `dlsched sweep` does; returns the report's path."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from dlsched.core.errors import ConfigError
    from dlsched.output_folder import atomic_write, check_writable_folder
    from dlsched.paths import traces_dir
    from dlsched.sweep.grid import load_grid
    from dlsched.sweep.report import write_report
    from dlsched.sweep.runner import pending, run_cells
    from dlsched.sweep.store import ResultsStore

    grid = load_grid(grid_file)
    if in_process and ray_address:
        raise ConfigError("--in-process and --ray-address exclude each other")
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    root = traces_dir(traces)
    cells = grid.cells(root, base=grid_file.resolve().parent)
    out = out or Path(f"sweep-{grid.name}")
    check_writable_folder(out)
    identity = {"grid": grid.identity(), "traces": str(root) if root else None}
    store = ResultsStore(out)
    earlier = out / GRID_FILE
    if earlier.is_file() and json.loads(earlier.read_text()) != identity or (
            not earlier.is_file() and store.table_path.exists()):
        if not overwrite:
            raise ConfigError(f"--out {out} holds the results of another grid; pass --overwrite to discard them, "
                              "or name another folder (the same grid there would resume)")
        store.clear()
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(earlier, lambda p: p.write_text(json.dumps(identity, indent=1)))
    unique = {c.key: c for c in cells}
    todo = pending(cells, store)
    if in_process:
        workers = 1
    elif workers is None:
        workers = os.cpu_count() or 1
    where = ("in this process" if in_process else f"on the Ray cluster at {ray_address}" if ray_address
             else "on a local Ray (127.0.0.1)")
    console.print(f"[bold]sweep[/]   {safe(grid.name)}: {len(unique)} cells, {len(unique) - len(todo)} finished before, "
                  f"{len(todo)} to run {where} with {workers} worker{'s' * (workers != 1)}", highlight=False)
    console.print(f"[bold]results[/] {safe(out)}", highlight=False)
    with Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TextColumn("cells"),
                  TimeElapsedColumn(), console=err_console) as bar:
        task = bar.add_task("sweep", total=len(unique), completed=len(unique) - len(todo))

        def done(cell, row) -> None:
            bar.update(task, advance=1, description=f"{cell.policy} seed {row.get('seed')}")

        run_cells(cells, store, workers=workers, address=ray_address, use_ray=not in_process, on_done=done)
    report = write_report(out, cells, store, f"Sweep {grid.name}", grid.reference_policy)
    console.print(f"report: [bold]{safe(report)}[/] (summary.csv, ratios.csv, cells.csv, jobs/, plots)")
    return report
