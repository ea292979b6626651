"""The `dlsched` command line.

Every user error (bad trace row, unknown policy or preset, config typo, job larger than the
cluster) ends as one readable message and exit code 2, never a stack trace.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dlsched.cli_experiments import experiment_app
from dlsched.cli_k8s import k8s_app
from dlsched.cli_live import register_live
from dlsched.cli_replay import register_replay
from dlsched.cli_sweep import register_sweep
from dlsched.cli_train import train_app
from dlsched.cli_options import (_CLUSTER, _COLUMNS, _CONFIG, _ELASTIC, _FORMAT, _LIMIT, _LOAD, _OUT, _OVERWRITE,
                                 _PROFILES, _SEED, _SEEDS, _TRACE, _TRACE_FORMAT, _TRACES, _VARIABILITY)
from dlsched.cli_support import console, err_console, friendly as _friendly, safe
from dlsched.core.errors import DlschedError

if TYPE_CHECKING:
    from dlsched.traces.load import Sizing

app = typer.Typer(
    help="Schedule and autoscale distributed deep-learning training jobs: run scheduling policies "
    "over real cluster traces in an event-driven simulator and compare them.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)
trace_app = typer.Typer(help="Inspect and check trace files.", add_completion=False, pretty_exceptions_enable=False)
app.add_typer(trace_app, name="trace")
app.add_typer(experiment_app, name="experiment")
app.add_typer(train_app, name="train")
app.add_typer(k8s_app, name="k8s")

# --------------------------------------------------------------------------- simulate / compare


def _run(
    trace: Optional[str],
    trace_format: Optional[str],
    cluster_name: Optional[str],
    policies: Optional[str],
    out: Optional[Path],
    seed: Optional[int],
    config: Optional[Path],
    limit: Optional[int],
    elastic: Optional[bool],
    output_format: str,
    traces: Optional[Path] = None,
    profiles: Optional[str] = None,
    load: Optional[float] = None,
    overwrite: bool = False,
    variability: Optional[str] = None,
    columns: Optional[str] = None,
    seeds: Optional[int] = None,
) -> None:
    from collections import Counter

    from dlsched.experiment import prepare_run, run_policies
    from dlsched.metrics.report import holds_report, write_report
    from dlsched.output_folder import OutputFolder
    from dlsched.metrics.table import (FORMATS, column_keys, format_rows, interval_rows, render_intervals,
                                       render_table, seed_intervals)
    from dlsched.policies.registry import DEFAULT_POLICIES, check_options, parse_policy_list
    from dlsched.paths import describe_traces, traces_dir
    from dlsched.run_config import dump_run_config, load_run_config, with_flags
    from dlsched.traces.profiles import PROFILE_MODES

    if output_format not in FORMATS:
        raise DlschedError(f"--format must be one of {', '.join(FORMATS)}, not {output_format!r}")
    shown_columns = column_keys(columns)
    if profiles is not None and profiles not in PROFILE_MODES:
        raise DlschedError(f"--profiles must be one of {', '.join(PROFILE_MODES)}, not {profiles!r}")
    cfg = with_flags(load_run_config(config), trace=trace, trace_format=trace_format, cluster=cluster_name,
                     policies=None if policies is None else parse_policy_list(policies), limit=limit,
                     elastic=elastic, profiles=profiles, seed=seed, variability=variability, traces=traces,
                     seeds=seeds)
    names = cfg.policies or list(DEFAULT_POLICIES)
    for n in names:  # every policy's options checked before the first one runs
        check_options(n, cfg.policy_options.get(n, {}))
    folder = OutputFolder(out or (Path(cfg.out) if cfg.out else None), "dlsched-report", overwrite, holds_report,
                          what="a report")
    folder.check()  # before loading the trace and running, not after
    quiet = output_format != "table"  # stdout carries only the rows
    root = traces_dir(cfg.traces)

    prepared = prepare_run(cfg, names, root, load)
    workload, cluster, throughput, sizing = prepared.workload, prepared.cluster, prepared.throughput, prepared.sizing
    options, utility_note, oracle_note, slot_note = (prepared.options, prepared.utility_note, prepared.oracle_note,
                                                     prepared.slot_note)
    if not quiet:
        console.print(f"[bold]workload[/] {safe(workload.name)}: {len(workload.jobs)} jobs from {safe(workload.source)}")
        console.print(f"[bold]cluster[/]  {cluster.describe()}")
    _show_load(sizing, quiet)
    if not quiet:
        console.print(f"[bold]policies[/] {', '.join(names)}")
        for note in workload.notes:
            console.print(f"[bold]data[/]     {note}", highlight=False)
        if utility_note:
            console.print(f"[bold]utility[/]  {utility_note}")
        if oracle_note:
            console.print(f"[bold]oracle[/]   {oracle_note}")
        if slot_note:
            console.print(f"[bold]slots[/]    {slot_note}")
        if prepared.rigid_note:
            console.print(f"[bold]rigid[/]    {prepared.rigid_note}", highlight=False)
        if prepared.variability_note:
            console.print(f"[bold]machines[/] {prepared.variability_note}")

    seed_list = [cfg.sim.seed + k for k in range(cfg.seeds)]
    runs_of_seeds: list[list] = []
    with Progress(
        TextColumn("{task.description:<14}"), BarColumn(), MofNCompleteColumn(), TextColumn("jobs ended"),
        TimeElapsedColumn(), console=err_console, disable=quiet,
    ) as bar:
        for k, s in enumerate(seed_list):
            # each seed its own workload draws (profiles, speeds) and engine: the first is the report's run
            seeded = cfg.model_copy(update={"sim": cfg.sim.model_copy(update={"seed": s})})
            this = prepared if k == 0 else prepare_run(seeded, names, root, load)
            total = len(this.workload.jobs)
            label = "" if len(seed_list) == 1 else f" seed {s}"
            tasks = {n: bar.add_task(n + label, total=total) for n in names}
            last = {"t": 0.0}

            def progress(name: str, t: float, ended: int) -> None:
                now = time.monotonic()
                if now - last["t"] > 0.1:
                    last["t"] = now
                    bar.update(tasks[name], completed=ended)

            done = run_policies(
                this.workload.jobs, this.cluster, names, this.throughput, seeded.sim, this.options,
                on_progress=progress,
                node_events=this.node_events,
            )
            for run in done.runs:
                bar.update(tasks[run.name], completed=total)
            runs_of_seeds.append(done.results)
            if k == 0:
                comparison = done

    results = comparison.results
    notes = [n for n in (workload.attribution, *workload.notes, oracle_note and f"Oracles: {oracle_note}.",
                         utility_note and f"Utility: {utility_note}.", slot_note and f"Slots: {slot_note}.",
                         prepared.rigid_note and f"Rigid jobs: {prepared.rigid_note}.",
                         prepared.variability_note and f"Machines: {prepared.variability_note}.",
                         describe_traces(root, Counter(throughput.served_by(j) for j in workload.jobs))) if n]
    notes += sizing.notes() + [f"simulated in {r.wall_seconds:.1f} s wall time: {r.name}" for r in comparison.runs]
    said = [n for r in comparison.runs for n in r.notes]
    notes += said
    if not quiet:
        for note in said:
            console.print(f"[bold]policy[/]   {note}", highlight=False)
    out_dir, moved = folder.claim()
    if moved:
        (err_console if quiet else console).print(f"[bold]report[/]   {moved}", highlight=False, soft_wrap=True)
    run_file = dump_run_config(cfg, out_dir, policies=names, load=load, traces=root)  # run.yaml: re-runs this report
    if len(seed_list) > 1:
        long, mean, half = seed_intervals(runs_of_seeds, seed_list)
        notes.append(f"Seeds {', '.join(map(str, seed_list))}: the plots, jobs.csv and summary.csv are seed "
                     f"{seed_list[0]}'s run; seeds.csv holds every seed's summary row and intervals.csv the mean "
                     "over the seeds with its 95% Student-t interval (the console table shows those).")
    index = write_report(
        results, out_dir, title=f"dlsched: {workload.name} on {cluster.name}", workload=f"{workload.name} "
        f"({len(workload.jobs)} jobs, {workload.source})", cluster_desc=cluster.describe(), notes=notes, run=run_file,
    )
    title = f"{workload.name} on {cluster.name}"
    if len(seed_list) > 1:
        long.to_csv(out_dir / "seeds.csv", index=False)
        (out_dir / "intervals.csv").write_text(interval_rows(mean, half, "csv"))
        if quiet:
            print(interval_rows(mean, half, output_format, shown_columns), end="")
            return
        console.print(render_intervals(mean, half, seed_list, title=title, columns=shown_columns))
        console.print(f"report: [bold]{index}[/] (seed {seed_list[0]}'s run; seeds.csv, intervals.csv)")
        return
    if quiet:
        print(format_rows(results, output_format, shown_columns), end="")
        return
    console.print(render_table(results, title=title, columns=shown_columns))
    console.print(f"report: [bold]{index}[/] (plots, per-job CSV/Parquet, summary.csv)")


def _show_load(sizing: "Sizing", quiet: bool) -> None:
    """The offered load beside the cluster line, and the low-load warning (stderr only in JSON mode,
    so stdout stays parseable)."""
    if not quiet:
        for line in sizing.notes(warning=False):
            console.print(f"[bold]load[/]     {line}", highlight=False, soft_wrap=True)
    if sizing.warning:
        (err_console if quiet else console).print(f"[bold yellow]warning:[/] {sizing.warning}", highlight=False, soft_wrap=True)


@app.command()
@_friendly
def simulate(
    trace: Optional[str] = _TRACE,
    trace_format: Optional[str] = _TRACE_FORMAT,
    cluster: Optional[str] = _CLUSTER,
    policies: Optional[str] = typer.Option(None, "--policies", "-p", help="Comma-separated policy names (default: the six baselines and the published systems dragon, qos, oasis, dl2, dual-agent)."),
    out: Optional[Path] = _OUT,
    seed: Optional[int] = _SEED,
    config: Optional[Path] = _CONFIG,
    limit: Optional[int] = _LIMIT,
    elastic: Optional[bool] = _ELASTIC,
    output_format: str = _FORMAT,
    traces: Optional[Path] = _TRACES,
    profiles: Optional[str] = _PROFILES,
    load: Optional[float] = _LOAD,
    overwrite: bool = _OVERWRITE,
    variability: Optional[str] = _VARIABILITY,
    columns: Optional[str] = _COLUMNS,
    seeds: Optional[int] = _SEEDS,
) -> None:
    """Simulate policies on a workload (default: the baselines and the published systems on the embedded ITP slice) and write a report."""
    _run(trace, trace_format, cluster, policies, out, seed, config, limit, elastic, output_format, traces, profiles, load,
         overwrite, variability, columns, seeds)


@app.command()
@_friendly
def compare(
    trace: str = typer.Option(..., "--trace", "-t", help="Trace file to compare the policies on."),
    policies: str = typer.Option(..., "--policies", "-p", help="Comma-separated policy names, e.g. fifo,tiresias,optimus."),
    out: Optional[Path] = _OUT,
    trace_format: Optional[str] = _TRACE_FORMAT,
    cluster: Optional[str] = _CLUSTER,
    seed: Optional[int] = _SEED,
    config: Optional[Path] = _CONFIG,
    limit: Optional[int] = _LIMIT,
    elastic: Optional[bool] = _ELASTIC,
    output_format: str = _FORMAT,
    traces: Optional[Path] = _TRACES,
    profiles: Optional[str] = _PROFILES,
    load: Optional[float] = _LOAD,
    overwrite: bool = _OVERWRITE,
    variability: Optional[str] = _VARIABILITY,
    columns: Optional[str] = _COLUMNS,
    seeds: Optional[int] = _SEEDS,
) -> None:
    """Run several policies on one trace: prints the comparison and writes the report folder."""
    _run(trace, trace_format, cluster, policies, out, seed, config, limit, elastic, output_format, traces, profiles, load,
         overwrite, variability, columns, seeds)


# --------------------------------------------------------------------------- listings


@app.command("policies")
@_friendly
def list_policies() -> None:
    """List the scheduling policies (installed plugins too: docs/PLUGINS.md)."""
    from dlsched.policies.registry import describe_policies

    rows = describe_policies()
    width = max(len(name) for name, _, _ in rows) + 2
    for name, desc, kind in rows:  # a plugin's text is its author's: printed through safe()
        mark = f" ({kind})" if kind else ""
        console.print(f"[bold]{safe(name):<{width}}[/]{safe(desc)}{safe(mark)}")


@app.command("presets")
@_friendly
def list_presets() -> None:
    """List the cluster presets."""
    from dlsched.presets import PRESETS

    for name, desc in PRESETS.items():
        console.print(f"[bold]{name:<14}[/]{desc}")


# --------------------------------------------------------------------------- trace tools


@trace_app.command("formats")
@_friendly
def trace_formats() -> None:
    """List the trace formats dlsched reads."""
    from dlsched.traces import FORMATS

    for name, desc in FORMATS.items():
        console.print(f"[bold]{name:<14}[/]{desc}")


@trace_app.command("sources")
@_friendly
def trace_sources(
    output_format: str = typer.Option("table", "--format", "-f", help="'table' or 'json'."),
    traces: Optional[Path] = _TRACES,
) -> None:
    """Where each supported trace and measured table comes from: public copy, licence, folder, command."""
    from dlsched.traces.sources import print_sources

    print_sources(output_format, traces, console)


@trace_app.command("validate")
@_friendly
def trace_validate(
    file: Path = typer.Argument(..., help="Trace file to check."),
    trace_format: Optional[str] = _TRACE_FORMAT,
) -> None:
    """Check every row of a trace; print problems as file:row: column: problem (exit 1 if any)."""
    from dlsched.traces import validate_trace

    problems = validate_trace(file, trace_format)
    if problems:
        for line in problems:
            console.print(safe(line), highlight=False, soft_wrap=True)  # a line quotes the trace's cells
        err_console.print(f"[bold red]{safe(file)}: {len(problems)} problem line(s)[/]")
        raise typer.Exit(1)
    console.print(f"{safe(file)}: OK")


@trace_app.command("info")
@_friendly
def trace_info_cmd(
    file: Path = typer.Argument(..., help="Trace file to describe."),
    trace_format: Optional[str] = _TRACE_FORMAT,
    output_format: str = typer.Option("table", "--format", "-f", help="'table' or 'json'."),
) -> None:
    """Summarise a trace: jobs, time span, GPU mix, models, deadlines."""
    from dlsched.traces import load_trace, trace_info

    info = trace_info(load_trace(file, trace_format))
    if output_format == "json":
        print(json.dumps(info, indent=2, default=str))
        return
    for key, value in info.items():
        console.print(f"[bold]{key:<22}[/]{safe(value)}", highlight=False)


register_live(app)  # serve, submit, status, cancel
register_sweep(app)
register_replay(app)  # after the workload options it shares with compare


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
