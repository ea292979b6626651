"""`dlsched experiment ...`: rerun a paper's evaluation on our simulator and write its figures.

One command per paper; the work itself lives in `dlsched.experiments.<paper>` so that benchmarks
and tests run the same code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from dlsched.cli_support import console as _console, friendly as _friendly

experiment_app = typer.Typer(
    help="Rerun a published system's evaluation (its setup, its baselines) and write tables and plots.",
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
)

# Commands are added below, one function per experiment, each decorated with
# @experiment_app.command("<name>") and dlsched.cli_support.friendly.


@experiment_app.command("dragon")
@_friendly
def dragon_experiment(
    out: Path = typer.Option(Path("dragon-results"), "--out", "-o", help="Folder for runs.csv, summary.csv, ablation.csv, RESULTS.md and dragon.png."),
    seeds: int = typer.Option(10, "--seeds", min=1, help="Workload seeds; figures are means (± std) over them, paired by seed."),
    jobs: int = typer.Option(40, "--jobs", min=1, help="TensorFlow-PS-like jobs per seed."),
    cluster: str = typer.Option("dragon", "--cluster", "-c", help="Cluster preset or YAML file for the paper-like workload."),
    real_trace: bool = typer.Option(True, "--real-trace/--no-real-trace", help="Also run on the embedded ITP trace slice (rigid and elastic)."),
    quick: bool = typer.Option(False, "--quick", help="Small smoke run: 2 seeds of 20 jobs, no real trace."),
) -> None:
    """Rerun DRAGON's evaluation: DRAGON vs the default Kubernetes scheduler and gang FIFO, with each
    of its capabilities (gang, locality, scaling) switched off in turn, on a DRAGON-like TF-PS
    workload with a locality-sensitive throughput model; and on a real trace."""
    from rich.progress import Progress

    from dlsched.experiments.dragon import PAPER_JCT_RATIO, run_dragon_experiment

    if quick:
        seeds, jobs, real_trace = 2, 20, False
    with Progress(console=_console, transient=True) as bar:
        task = bar.add_task("DRAGON", total=seeds + (2 if real_trace else 0))
        report = run_dragon_experiment(
            out, seeds=seeds, num_jobs=jobs, cluster=cluster, real_trace=real_trace,
            on_step=lambda d: bar.update(task, advance=1, description=d),
        )
    h = report.headline
    _console.print(
        f"mean JCT DRAGON / kube-default: {h['jct_ratio_vs_kube']:.3f} ± {h['jct_ratio_vs_kube_std']:.3f} "
        f"(paper: ≤ {PAPER_JCT_RATIO}); GPU utilization gain: allocated {h['util_allocated_gain_rel']:+.1%}, "
        f"compute {h['util_compute_gain_rel']:+.1%} (paper: +20–30%)"
    )
    _console.print(
        f"nodes spanned per job: DRAGON {h['nodes_spanned_dragon']:.2f}, kube-default {h['nodes_spanned_kube']:.2f}; "
        f"held GPU·h: DRAGON {h['held_gpu_hours_dragon']:.2f}, kube-default {h['held_gpu_hours_kube']:.2f}"
    )
    _console.print(report.ablation.round(3).to_string(index=False))
    _console.print(f"wrote {', '.join(str(f) for f in report.files)}")


@experiment_app.command("dl2")
@_friendly
def dl2_experiment(
    out: Path = typer.Option(Path("dl2-results"), "--out", "-o", help="Folder for runs.csv, summary.csv, RESULTS.md (and real_trace.csv)."),
    model: Optional[Path] = typer.Option(None, "--model", help="Model from `dlsched train dl2` (default: the shipped model)."),
    warmup_only: Optional[Path] = typer.Option(None, "--warmup-only-model", help="Ablation: a model trained with --rl-episodes 0."),
    rl_only: Optional[Path] = typer.Option(None, "--rl-only-model", help="Ablation: a model trained with --warmup-traces 0."),
    traces: int = typer.Option(10, "--traces", min=1, help="Held-out DL2 workloads (test seeds, never used in training)."),
    real_trace: bool = typer.Option(True, "--real-trace/--no-real-trace", help="Also run the model on the embedded ITP trace slice."),
) -> None:
    """Rerun DL2's comparison: mean JCT vs DRF and Optimus on held-out DL2 workloads (mean ± std),
    the ablations when their models are given, and generalisation to a real trace."""
    from rich.progress import Progress

    from dlsched.experiments.dl2 import PAPER, run_dl2_experiment

    with Progress(console=_console, transient=True) as bar:
        task = bar.add_task("DL2", total=traces + (1 if real_trace else 0))
        report = run_dl2_experiment(
            out, str(model) if model else None, str(warmup_only) if warmup_only else None,
            str(rl_only) if rl_only else None, traces, real_trace, on_step=lambda d: bar.update(task, advance=1, description=d),
        )
    _console.print(report.summary.round(3).to_string(index=False))
    for k, v in report.ratios.items():
        _console.print(f"{k}: {v:.3f}")
    _console.print(f"paper: dl2/drf ≤ {PAPER['vs_drf']}, dl2/optimus ≤ {PAPER['vs_optimus']}")
    if report.trace is not None:
        _console.print(report.trace.round(2).to_string(index=False))
    _console.print(f"wrote {', '.join(str(f) for f in report.files)}")
