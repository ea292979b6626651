"""`dlsched replay`: a trace replayed on a real Kubernetes API server beside its simulation.

The workload is prepared exactly as `dlsched compare` prepares it (trace, preset, --load,
profiles), a local control plane is started with kwok nodes mirroring the cluster, and each policy
is replayed in compressed time (`--speedup`); `kube-scheduler` is the real one. The report holds
each simulated run beside its replay (named `<policy>@k8s`) and the gaps between them.
"""

from __future__ import annotations

import json
import math
import shlex
import tempfile
from pathlib import Path
from typing import Optional

import typer

from dlsched.cli_options import (_CLUSTER, _CONFIG, _ELASTIC, _FORMAT, _LIMIT, _LOAD, _OUT, _OVERWRITE, _PROFILES, _SEED,
                                 _TRACE, _TRACE_FORMAT, _TRACES)
from dlsched.cli_support import console, err_console, friendly, safe
from dlsched.core.errors import DlschedError

#: The issue's comparison: the real default scheduler, dlsched's imitation of it, and the two
#: published systems that measured themselves against it.
DEFAULT_REPLAY = "kube-scheduler,kube-default,dragon,qos"


def register_replay(app: typer.Typer) -> None:
    """Add `dlsched replay` to `app` (its workload options are `dlsched compare`'s own)."""
    @app.command()
    @friendly
    def replay(
        trace: Optional[str] = _TRACE,
        trace_format: Optional[str] = _TRACE_FORMAT,
        cluster: Optional[str] = _CLUSTER,
        policies: str = typer.Option(DEFAULT_REPLAY, "--policies", "-p", help="Comma-separated policies to replay; "
                                     "'kube-scheduler' is the real kube-scheduler (its simulated twin is kube-default)."),
        speedup: float = typer.Option(600.0, "--speedup", help="Trace seconds per wall second (600: 1 h of trace "
                                      "in 6 s): each round moves the trace clock to the next arrival, job end or "
                                      "policy timer, at most tick x speedup seconds on, so higher is faster. A round "
                                      "slower than --tick holds the trace clock: the result never depends on this "
                                      "machine's speed, only the wall time does."),
        tick: float = typer.Option(0.25, "--tick", help="Wall seconds of the longest round (tick x speedup trace "
                                   "seconds); a round that ends at an earlier event takes its share."),
        simulate: bool = typer.Option(True, "--simulate/--no-simulate", help="Also simulate each policy on the same "
                                      "nodes, for the side-by-side comparison."),
        timeout: float = typer.Option(3600.0, "--timeout", help="Wall seconds a replay may take; jobs not ended "
                                      "by then are reported unfinished."),
        workdir: Optional[Path] = typer.Option(None, "--workdir", help="Keep the control plane's logs and each "
                                               "replay's store here (default: a temporary folder, removed)."),
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
    ) -> None:
        """Replay a trace on a real Kubernetes API server (kwok nodes, optionally the real kube-scheduler) in
        compressed time, beside its simulation: the same jobs.csv, summary and report for both."""
        _replay(trace, trace_format, cluster, policies, speedup, tick, simulate, timeout, workdir, out, seed, config,
                limit, elastic, output_format, traces, profiles, load, overwrite)


def _replay(trace, trace_format, cluster_name, policies, speedup, tick, simulate, timeout, workdir, out, seed,
            config, limit, elastic, output_format, traces, profiles, load, overwrite) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from dlsched.experiment import prepare_run
    from dlsched.k8s.replay import KUBE_SCHEDULER, describe
    from dlsched.k8s.replay_compare import SIM_TWIN, run_replays
    from dlsched.metrics.report import holds_report, write_report
    from dlsched.output_folder import OutputFolder
    from dlsched.paths import traces_dir
    from dlsched.policies.registry import check_options, parse_policy_list
    from dlsched.run_config import dump_run_config, load_run_config, with_flags

    if output_format not in ("table", "json"):
        raise DlschedError(f"--format must be 'table' or 'json', not {output_format!r}")
    if not (math.isfinite(speedup) and speedup > 0):
        raise DlschedError(f"--speedup must be a positive number, not {speedup!r}")
    if not (0.01 <= tick <= 60):
        raise DlschedError(f"--tick must be between 0.01 and 60 seconds, not {tick!r}")
    if not timeout > 0:
        raise DlschedError(f"--timeout must be > 0 seconds, not {timeout!r}")
    names = [n.strip() for n in policies.split(",") if n.strip()]
    known = parse_policy_list(",".join(SIM_TWIN.get(n, n) for n in names))  # unknown names: one clear error
    if len(known) != len(names):
        raise DlschedError("--policies names a policy twice")
    cfg = with_flags(load_run_config(config), trace=trace, trace_format=trace_format, cluster=cluster_name,
                     limit=limit, elastic=elastic, profiles=profiles, seed=seed, traces=traces)
    for n in names:
        if n != KUBE_SCHEDULER:
            check_options(n, cfg.policy_options.get(n, {}))
    folder = OutputFolder(out or (Path(cfg.out) if cfg.out else None), "dlsched-report", overwrite, holds_report,
                          what="a report")
    folder.check()
    quiet = output_format == "json"
    root = traces_dir(cfg.traces)
    prepared = prepare_run(cfg, known, root, load)
    workload, cluster = prepared.workload, prepared.cluster
    subs = [j.submit_time for j in workload.jobs]
    span = (max(subs) - min(subs)) if subs else 0.0
    say = (lambda text: None) if quiet else (lambda text: console.print(f"[bold]replay[/]   {safe(text)}",
                                                                        highlight=False))
    if not quiet:
        console.print(f"[bold]workload[/] {safe(workload.name)}: {len(workload.jobs)} jobs from {safe(workload.source)}")
        console.print(f"[bold]cluster[/]  {cluster.describe()}")
        for note in prepared.sizing.notes():
            console.print(f"[bold]load[/]     {note}", highlight=False)
    say(f"{span / 3600:.1f} h of arrivals at {speedup:g}x: at least {span / speedup:.0f} s of wall time, then the "
        f"queue drains, per policy; a round at each arrival, job end and policy timer, at most {tick * speedup:g} s "
        f"of trace apart ({tick:g} s wall for that much, less for less)")

    with tempfile.TemporaryDirectory(prefix="dlsched-replay-") as tmp, Progress(
        TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(), TextColumn("jobs ended"),
        TimeElapsedColumn(), console=err_console, disable=quiet,
    ) as bar:
        tasks = {n: bar.add_task(n + "@k8s", total=len(workload.jobs)) for n in names}
        comparison = run_replays(workload.jobs, cluster, names, prepared.throughput, cfg.sim, prepared.options,
                                 speedup=speedup, tick=tick, simulate=simulate, timeout=timeout,
                                 work_dir=Path(workdir) if workdir else Path(tmp),
                                 on_progress=lambda n, e, t: bar.update(tasks[n], completed=e), say=say)
    results = comparison.results
    notes = [n for n in (workload.attribution, *workload.notes) if n] + prepared.sizing.notes() + describe(
        comparison.replays) + [f"Each simulated run used the replay's own nodes, as the API server describes them "
                               f"({comparison.cluster.describe()}); kube-scheduler's simulated twin is "
                               f"kube-default, dlsched's imitation of it."]
    out_dir, moved = folder.claim()
    if moved:
        (err_console if quiet else console).print(f"[bold]report[/]   {moved}", highlight=False, soft_wrap=True)
    replay_options = {"policies": ",".join(names), "speedup": speedup, "tick": tick, "simulate": simulate,
                      "timeout": timeout}
    run_file = dump_run_config(
        cfg, out_dir, policies=None, load=load, traces=root, extra={"replay": replay_options},
        rerun=f"dlsched replay --config {{run}} -p {shlex.quote(replay_options['policies'])} --speedup {speedup:g} "
              f"--tick {tick:g} --timeout {timeout:g}" + ("" if simulate else " --no-simulate"),
        rerun_gives="the same jobs and simulated runs; the replays on the API server follow its timing, so "
                    "their numbers can move slightly")
    index = write_report(results, out_dir, title=f"dlsched replay: {workload.name} on Kubernetes",
                         workload=f"{workload.name} ({len(workload.jobs)} jobs, {workload.source})",
                         cluster_desc=comparison.cluster.describe(), notes=notes, run=run_file)
    gaps = comparison.gaps()
    (out_dir / "replay.json").write_text(json.dumps({"gaps": gaps, "replays": [
        {"policy": r.result.policy, **r.figures(), "notes": r.notes} for r in comparison.replays]}, indent=2))
    if quiet:
        print(json.dumps(gaps, indent=2))
        return
    table = Table(title=f"{workload.name}: simulated vs replayed on Kubernetes", title_justify="left")
    for col in ("replayed", "simulated", "mean JCT h (sim)", "mean JCT h (k8s)", "gap", "GPU util (sim)",
                "GPU util (k8s)", "gap ", "done (k8s)"):
        table.add_column(col, justify="left" if col in ("replayed", "simulated") else "right")
    for g in gaps:
        table.add_row(safe(g["replay"]), safe(g.get("simulated") or "-"), _f(g.get("sim_mean_jct_h")),
                      _f(g["replay_mean_jct_h"]), _pct(g.get("jct_gap")), _f(g.get("sim_gpu_utilization")),
                      _f(g["replay_gpu_utilization"]), _pct(g.get("utilization_gap")),
                      f"{g['replay_finished']}/{len(workload.jobs)}")
    console.print(table)
    for r in comparison.replays:
        for note in r.notes:
            console.print(f"[bold]note[/]     {safe(r.result.policy)}: {safe(note)}", highlight=False)
    console.print(f"report: [bold]{index}[/] (every run's jobs.csv, summary.csv, replay.json with the gaps)")


def _f(x: float | None) -> str:
    return "-" if x is None or x != x else f"{x:.3f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"
