"""`dlsched train ...`: train learned schedulers."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dlsched.cli_support import console, err_console, friendly, use_shared_traces


def _overridden(cfg, updates: dict):
    """`cfg` with the command line's values (None: not given) on top, validated as the file is."""
    from pydantic import ValidationError

    from dlsched.config import validation_problems
    from dlsched.core.errors import ConfigError

    updates = {k: v for k, v in updates.items() if v is not None}
    if not updates:
        return cfg
    try:
        return type(cfg)(**{**cfg.model_dump(), **updates})
    except ValidationError as exc:
        raise ConfigError("; ".join(validation_problems(exc))) from None


def _training_folder(out: Optional[Path], default: str, resume: bool, overwrite: bool) -> Path:
    """Where a training writes: with --resume the folder given (its checkpoint is the state to
    continue), else a fresh one (`OutputFolder`: never an earlier model replaced silently)."""
    from dlsched.output_folder import OutputFolder, check_writable_folder

    if resume:
        out = out or Path(default)
        check_writable_folder(out)
        return out
    out, moved = OutputFolder(out, default, overwrite).claim()
    if moved:
        console.print(f"[bold]output[/] {moved}", highlight=False, soft_wrap=True)
    return out


@contextmanager
def _phases() -> Iterator[Callable[[str, int, int, str], None]]:
    """One progress bar per training phase: `progress(phase, done, total, note)` adds or updates it."""
    with Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}"),
                  TimeElapsedColumn(), console=err_console) as bar:
        tasks: dict[str, int] = {}

        def progress(phase: str, done: int, total: int, note: str) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total, note="")
            bar.update(tasks[phase], completed=done, note=note)

        yield progress


train_app = typer.Typer(help="Train learned schedulers (DL2, Dual-Agent-style).", add_completion=False,
                        pretty_exceptions_enable=False, no_args_is_help=True)


@train_app.command("dl2")
@friendly
def train_dl2_cmd(
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Folder for model.pt, checkpoint.pt and validation.csv. "
                                       "Default: dl2-training, or the first dl2-training-N that is empty (an earlier "
                                       "model is never replaced silently); --resume continues in the folder given."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML with DL2TrainConfig keys (episodes, lr, window, teacher, seeds...)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUT/checkpoint.pt (same config required)."),
    rl_episodes: Optional[int] = typer.Option(None, "--rl-episodes", help="Override the config's RL episodes (0: warm-up only)."),
    warmup_traces: Optional[int] = typer.Option(None, "--warmup-traces", help="Override the teacher workloads recorded (0: no warm-up)."),
    traces: Optional[Path] = typer.Option(None, "--traces", help="Shared traces folder (DL2's measured speeds, the ITP deadline traces). Default: "
                                          "$DLSCHED_TRACES, else ../shared/traces beside the source checkout."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Train afresh in an --out folder that already holds files."),
    trace: Optional[str] = typer.Option(None, "--trace", help="Train on windows of these traces (FILE[,FILE...], any format "
                                        "`dlsched simulate -t` reads) on measured curves; validation on the last "
                                        "trace_holdout of each file unless the config names trace_validation."),
    workers: Optional[int] = typer.Option(None, "--workers", help="RL rollout workers playing episodes at once "
                                          "(config rollout_workers; 1: the serial learner). Ray actors by default."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Run the rollout workers on this Ray cluster "
                                              "(auto, host:port, ray://host:port) instead of a private local Ray."),
) -> None:
    """Train DL2: supervised warm-up on a teacher's decisions (DRF by default), then actor-critic RL
    with prioritised replay, validated on held-out workloads: DL2's (default), windows of the ITP
    deadline traces (`workloads: itp`) or of any trace (--trace) on measured curves. With --workers N
    the RL episodes are played by N rollout workers (Ray, or OS processes with `rollout_backend:
    process`). Resumable, also with another worker count; prints where the model is."""
    from dlsched.policies.dl2 import DL2Policy
    from dlsched.policies.registry import make_policy
    from dlsched.rl.train_dl2 import DL2TrainConfig, train_dl2

    from dlsched.config import read_yaml_model
    from dlsched.core.errors import ConfigError
    from dlsched.paths import traces_dir

    cfg = read_yaml_model(config, DL2TrainConfig, "DL2 training config") if config else DL2TrainConfig()
    root = traces_dir(traces)
    updates = {k: v for k, v in (("rl_episodes", rl_episodes), ("warmup_traces", warmup_traces), ("rollout_workers", workers),
                                 ("ray_address", ray_address)) if v is not None}
    if trace is not None:
        files = tuple(f.strip() for f in trace.split(",") if f.strip())
        if not files:
            raise ConfigError("--trace: give at least one trace file")
        updates.update(workloads="trace", trace_files=files)
    if ray_address is not None:
        updates["rollout_backend"] = "ray"
    cfg = _overridden(cfg, updates)
    cfg.check_workloads(root)  # a missing or too small trace: one line before anything starts
    out = _training_folder(out, "dl2-training", resume, overwrite)
    with _phases() as progress:
        meta = train_dl2(cfg, out, teacher=lambda: make_policy(cfg.teacher), student=DL2Policy, traces=root,
                         resume=resume, progress=progress)
    console.print(f"trained in {meta['training_seconds'] / 60:.1f} min; best validation mean JCT "
                  f"{meta['best_validation_jct_s'] / cfg.slot_seconds:.2f} slots")
    console.print(f"model: [bold]{out / 'model.pt'}[/] (use: dlsched compare ... --policies dl2 with policy option model=PATH)")


@train_app.command("dual-agent")
@friendly
def train_dual_agent_cmd(
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Folder for model.pt, checkpoint.pt and validation.csv. "
                                       "Default: dual-agent-training, or the first dual-agent-training-N that is empty; "
                                       "--resume continues in the folder given."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML with DualAgentTrainConfig keys (variant, scenarios, "
                                          "jobs, warm-up, PPO iterations, fee_weight, seeds...)."),
    variant: Optional[str] = typer.Option(None, "--variant", help="Override the config's variant: full, no-comm, no-gp, "
                                          "static-gp, ordering-only, placement-only."),
    rl_iterations: Optional[int] = typer.Option(None, "--rl-iterations", help="Override the PPO iterations (0: warm-up only)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUT/checkpoint.pt (same config required)."),
    traces: Optional[Path] = typer.Option(None, "--traces", help="Shared traces folder (Gavel's throughput matrix and "
                                          "Philly-derived jobs). Default: $DLSCHED_TRACES, else ../shared/traces beside the checkout."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Train afresh in an --out folder that already holds files."),
) -> None:
    """Train a Dual-Agent-style scheduler: residual actors over teachers (continuous Tiresias
    ordering that may wait for a better machine; the speed-aware placement over the GP), then MAPPO-style joint training of the ordering
    and placement agents with one shared critic, on seeded heterogeneous, fluctuating clusters
    (docs/DUAL_AGENT.md). Validated on held-out seeds; the best network is kept. Resumable."""
    from dlsched.config import read_yaml_model
    from dlsched.rl.dual_agent_config import DualAgentTrainConfig
    from dlsched.rl.train_dual_agent import train

    cfg = read_yaml_model(config, DualAgentTrainConfig, "Dual-Agent training config") if config else DualAgentTrainConfig()
    cfg = _overridden(cfg, {"variant": variant, "rl_iterations": rl_iterations})
    use_shared_traces(traces, "training")
    out = _training_folder(out, "dual-agent-training", resume, overwrite)
    with _phases() as progress:
        meta = train(cfg, out, resume=resume, progress=progress)
    console.print(f"trained {cfg.variant!r} in {meta['training_seconds'] / 60:.1f} min; validation score (mean JCT h + "
                  f"fee_weight × fee per job, over the teachers'; below 1: better) {meta['best_validation']:.3f}, "
                  f"warm-up {meta['warmup_validation']:.3f}")
    console.print(f"model: [bold]{out / 'model.pt'}[/] (use: dlsched compare ... -p dual-agent with policy options "
                  f"variant={cfg.variant} model=PATH)")
