"""`dlsched experiment ...`: rerun a paper's evaluation on our simulator and write its figures.

One command per paper; the work itself lives in `dlsched.experiments.<paper>` so that benchmarks
and tests run the same code.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

import typer

from dlsched.cli_support import console as _console, friendly as _friendly
from dlsched.output_folder import OutputFolder, check_writable_folder

experiment_app = typer.Typer(
    help="Rerun a published system's evaluation (its setup, its baselines) and write tables and plots.",
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
)


_OVERWRITE = typer.Option(False, "--overwrite", help="Write into an --out folder that already holds files (replacing "
                          "them by name); without --out: use the default folder even if an earlier run left results.")


_WORKERS = typer.Option(1, "--workers", "-w", min=1, help="Cells run at once: 1 (default) runs them one by one in this "
                        "process; more runs them as tasks on a private local Ray (127.0.0.1) of that many CPUs.")
_RAY_ADDRESS = typer.Option(None, "--ray-address", help="Run the cells on this Ray cluster ('auto', 'host:port' or "
                            "'ray://host:port'), at most --workers at once (docs/SWEEP.md).")


def _out_help(default: str, what: str) -> str:
    return (f"{what} Default: {default}, or the first {default}-N that is empty: an earlier run's results are "
            "never replaced silently (a named folder holding files needs --overwrite).")


def _results_folder(out: Optional[Path], default: str, overwrite: bool) -> Path:
    """The experiment's folder, created now (`dlsched.output_folder`); says so when a numbered one is used."""
    path, moved = OutputFolder(out, default, overwrite).claim()
    if moved:
        _console.print(f"[bold]results[/] {moved}", highlight=False, soft_wrap=True)
    return path


def _print_frame(df, digits: int = 3, title: str = "", index: bool = False) -> None:
    """A results frame on the console through the comparison's renderer (`frame_renderables`):
    blocks that fit the terminal, never a frame wrapped into fragments."""
    from dlsched.metrics.table import frame_renderables

    for table in frame_renderables(df.reset_index() if index else df, _console.width, title, digits):
        _console.print(table)


@contextmanager
def _steps(label: str, total: int) -> Iterator[Callable[[str], None]]:
    """A transient progress bar of `total` steps; the callback advances it, showing what was done."""
    from rich.progress import Progress

    with Progress(console=_console, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done: bar.update(task, advance=1, description=done)


# One command per experiment below, each decorated with @experiment_app.command("<name>") and
# dlsched.cli_support.friendly.


@experiment_app.command("oasis")
@_friendly
def oasis_experiment(
    out: Optional[Path] = typer.Option(None, "--out", "-o", help=_out_help("oasis-results", "Folder for the CSV/markdown tables and PNG plots.")),
    jobs: str = typer.Option("100,200,300,400", "--jobs", help="Comma-separated job counts for Fig. 3 (paper: 100,200,300,400)."),
    seeds: int = typer.Option(3, "--seeds", min=1, help="Workload seeds per setting; results are averaged over them."),
    quick: bool = typer.Option(False, "--quick", help="Small smoke run: 40 and 80 jobs, one seed (about a minute)."),
    trace: Optional[str] = typer.Option(None, "--trace", help="Instead of the paper's figures, run the policies on this real trace "
                                        "(jobs get a utility derived from their duration)."),
    limit: Optional[int] = typer.Option(200, "--limit", help="With --trace: first N jobs."),
    policies: str = typer.Option("oasis,fifo,drf,rrh", "--policies", help="With --trace: policies to compare."),
    variants: bool = typer.Option(False, "--variants", help="Instead of the figures, run OASiS' design variants "
                                  "(order, L floor, release, U/L scale, restart overhead) and RRH/Dorm on the Fig. 3 "
                                  "workload at the largest --jobs count and seed 0 (80 jobs with --quick)."),
    overwrite: bool = _OVERWRITE,
    workers: int = _WORKERS,
    ray_address: Optional[str] = _RAY_ADDRESS,
) -> None:
    """Rerun OASiS' Fig. 3 (total utility vs jobs, T=300) and Fig. 4 (completion vs target, T=100) on the
    paper's setup against FIFO, DRF, RRH and Dorm; or, with --trace, compare on a real trace; or, with
    --variants, measure the design choices of docs/OASIS.md."""
    from pydantic import PositiveInt

    from dlsched.config import check_flag
    from dlsched.core.errors import ConfigError
    from dlsched.experiments import oasis as exp
    from dlsched.policies.registry import parse_policy_list

    if trace:
        names = parse_policy_list(policies)
        if limit is not None:
            check_flag(limit, PositiveInt, "--limit")
        out = _results_folder(out, "oasis-results", overwrite)
        with _steps("trace", len(names)) as step:
            df = exp.run_trace(trace, limit, names, out, step=step, workers=workers, address=ray_address)
        _print_frame(df)
        _console.print(f"wrote {out}/trace_table.csv")
        return
    try:
        counts = [int(x) for x in jobs.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--jobs must be comma-separated integers, got {jobs!r}") from None
    seed_list = list(range(seeds))
    if quick:
        counts, seed_list = [40, 80], [0]
    out = _results_folder(out, "oasis-results", overwrite)
    if variants:
        if not counts:
            raise ConfigError("--jobs needs a positive job count")
        with _steps("OASiS variants", len(exp.VARIANTS)) as step:
            df, stats = exp.run_variants(out, max(counts), seed=0, step=step, workers=workers,
                                         address=ray_address)
        _print_frame(df, digits=4)
        _console.print("workload: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in stats.items()))
        _console.print(f"wrote {out}/variants_table.csv and {out}/variants.md")
        return
    total = (len(counts) + 1) * len(seed_list) * len(exp.POLICIES)
    with _steps("OASiS Fig. 3 + Fig. 4", total) as step:
        res = exp.run_experiment(out, counts, seed_list, step=step, workers=workers, address=ray_address)
    _print_frame(res["fig3"], index=True, title="Fig. 3")
    _print_frame(res["fig4"], digits=2, title="Fig. 4")
    t = res["timing"]
    _console.print(f"OASiS decision time per arrival: mean {t['mean_ms']:.1f} ms, max {t['max_ms']:.1f} ms")
    _console.print(f"wrote tables and plots to {out}/")


@experiment_app.command("dragon")
@_friendly
def dragon_experiment(
    out: Optional[Path] = typer.Option(None, "--out", "-o", help=_out_help("dragon-results", "Folder for runs.csv, summary.csv, ablation.csv, RESULTS.md and dragon.png.")),
    seeds: int = typer.Option(10, "--seeds", min=1, help="Workload seeds; figures are means (± std) over them, paired by seed."),
    jobs: int = typer.Option(40, "--jobs", min=1, help="TensorFlow-PS-like jobs per seed."),
    cluster: str = typer.Option("dragon", "--cluster", "-c", help="Cluster preset or YAML file for the paper-like workload."),
    real_trace: bool = typer.Option(True, "--real-trace/--no-real-trace", help="Also run on the embedded ITP trace slice (rigid and elastic)."),
    quick: bool = typer.Option(False, "--quick", help="Small smoke run: 2 seeds of 20 jobs, no real trace."),
    overwrite: bool = _OVERWRITE,
    workers: int = _WORKERS,
    ray_address: Optional[str] = _RAY_ADDRESS,
) -> None:
    """Rerun DRAGON's evaluation: DRAGON vs the default Kubernetes scheduler and gang FIFO, with each
    of its capabilities (gang, locality, scaling) switched off in turn, on a DRAGON-like TF-PS
    workload with a locality-sensitive throughput model; and on a real trace."""
    from dlsched.experiments.dragon import PAPER_JCT_RATIO, run_dragon_experiment

    if quick:
        seeds, jobs, real_trace = 2, 20, False
    out = _results_folder(out, "dragon-results", overwrite)
    with _steps("DRAGON", seeds + (2 if real_trace else 0)) as step:
        report = run_dragon_experiment(out, seeds=seeds, num_jobs=jobs, cluster=cluster, real_trace=real_trace,
                                       on_step=step, workers=workers, address=ray_address)
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
    _print_frame(report.ablation, title="ablation")
    _console.print(f"wrote {', '.join(str(f) for f in report.files)}")


@experiment_app.command("dual-agent")
@_friendly
def dual_agent_experiment(
    out: Optional[Path] = typer.Option(None, "--out", "-o", help=_out_help("dual-agent-results", "Folder for runs.csv, summary.csv, ratios.csv and RESULTS.md.")),
    seeds: int = typer.Option(10, "--seeds", min=2, help="Held-out workloads per scenario (seeds 0..N-1; training and validation use other seeds)."),
    jobs: int = typer.Option(120, "--jobs", min=2, help="Jobs per workload (a window of Gavel's Philly-derived traces)."),
    scenarios: str = typer.Option("homogeneous-steady,types,static,fluctuating,strong", "--scenarios",
                                  help="Scenarios (hetero.scenarios), comma-separated."),
    policies: Optional[str] = typer.Option(None, "--policies", "-p", help="Policies, comma-separated. Default: the "
                                           "heuristics (tiresias-ll, tiresias-random, gavel-style, pal-style), "
                                           "dual-agent, its ablations (-no-comm, -no-gp, -static-gp), "
                                           "ordering-agent-only, placement-agent-only and dual-agent-teachers."),
    models: Optional[Path] = typer.Option(None, "--models", help="Folder of trained models (<variant>/model.pt, as "
                                          "`dlsched train dual-agent --out FOLDER/<variant>` writes); default: the shipped ones."),
    quick: bool = typer.Option(False, "--quick", help="Small smoke run: 2 seeds of 40 jobs, fluctuating only."),
    traces: Optional[Path] = typer.Option(None, "--traces", help="Shared traces folder (Gavel's matrix and jobs)."),
    overwrite: bool = _OVERWRITE,
    workers: int = _WORKERS,
    ray_address: Optional[str] = _RAY_ADDRESS,
) -> None:
    """Dual-Agent-style scheduling (after Xing et al., KDD'23) on heterogeneous, fluctuating
    clusters: against Tiresias with least-loaded or random placement, Gavel-style and PAL-style
    placement, the single-agent variants (ordering only, placement only) and the ablations (no
    communication, no GP, no fluctuation-awareness), on scenarios from homogeneous and steady to
    strongly heterogeneous and fluctuating. Mean JCT and total fee, paired by seed, 95% intervals;
    RESULTS.md says which of the issue's claims hold."""
    from dlsched.cli_support import use_shared_traces
    from dlsched.core.errors import ConfigError
    from dlsched.experiments import dual_agent as exp
    from dlsched.hetero.scenarios import SCENARIOS

    use_shared_traces(traces, "this experiment")
    names = tuple(x.strip() for x in scenarios.split(",") if x.strip())
    bad = [x for x in names if x not in SCENARIOS]
    if bad or not names:
        raise ConfigError(f"unknown scenario {bad[0] if bad else '(none)'}; known: {', '.join(SCENARIOS)}")
    chosen = tuple(exp.HEURISTICS) + tuple(exp.LEARNED)
    if policies:
        chosen = tuple(x.strip() for x in policies.split(",") if x.strip())
        bad = [x for x in chosen if x not in exp.HEURISTICS and x not in exp.LEARNED]
        if bad:
            raise ConfigError(f"unknown policy {bad[0]!r} here; known: {', '.join((*exp.HEURISTICS, *exp.LEARNED))}")
    if models is not None and not models.is_dir():
        raise ConfigError(f"--models {models}: not a folder")
    if quick:
        seeds, jobs, names = 2, 40, ("fluctuating",)
    out = _results_folder(out, "dual-agent-results", overwrite)
    with _steps("Dual-Agent scenarios", len(names)) as step:
        res = exp.run_experiment(out, scenarios=names, seeds=seeds, jobs=jobs, policies=chosen,
                                 models=str(models) if models else None, workers=workers, address=ray_address,
                                 on_step=step)
    for claim, verdict, figs in res["claims"]:
        _console.print(f"{verdict}: {claim} ({figs})")
    _console.print(f"wrote {out / 'RESULTS.md'}")


@experiment_app.command("qos")
@_friendly
def qos_experiment(
    out: Optional[Path] = typer.Option(None, "--out", "-o", help=_out_help("qos-results", "Folder for qos_results.csv/.md, gains, prediction errors and qos_deadlines.png.")),
    quick: bool = typer.Option(False, "--quick", help="Small smoke run: 24 synthetic jobs and the first 60 ITP jobs."),
    seed: int = typer.Option(0, "--seed", help="First seed of the synthetic workload (also the simulator's seed)."),
    seeds: int = typer.Option(5, "--seeds", min=1, help="Synthetic workloads drawn (seeds seed..seed+N-1); figures are means over them. --quick uses 1."),
    itp: Optional[Path] = typer.Option(None, "--itp", help="One ITP deadline trace to use instead of the default two (shared traces' elasticflow/195job.csv and cluster10.csv)."),
    traces: Optional[Path] = typer.Option(None, "--traces", help="Shared traces folder (the ITP deadline traces, measured tables). Default: $DLSCHED_TRACES, else ../shared/traces."),
    restart_overhead: float = typer.Option(10.0, "--restart-overhead", min=0, help="Seconds a resized job pauses (the prototype's start-up + load delay)."),
    overwrite: bool = _OVERWRITE,
    workers: int = _WORKERS,
    ray_address: Optional[str] = _RAY_ADDRESS,
) -> None:
    """Rerun the QoS deadline framework's evaluation (Xing et al., IJCNN'19): deadline completion rate,
    JCT and utilization of allocated resources for QoS vs default Kubernetes, FIFO, EDF and the
    autoscaler alone, on a paper-like synthetic workload and the ITP deadline trace, each with
    insufficient and sufficient resources; plus the completion predictor's error."""
    from dlsched.cli_support import use_shared_traces
    from dlsched.config import Seed, check_flag
    from dlsched.experiments.qos import run_qos

    check_flag(seed, Seed, "--seed")
    check_flag(seed + seeds - 1, Seed, "--seed + --seeds - 1")
    if traces is not None:  # exported, so that the cells (in this process or on Ray) read the same root
        use_shared_traces(traces, "the QoS experiment")
    out = _results_folder(out, "qos-results", overwrite)
    res = run_qos(out, quick=quick, seed=seed, seeds=1 if quick else seeds, itp=itp,
                  restart_overhead=restart_overhead, console=_console, workers=workers,
                  address=ray_address)
    cols = ["workload", "resources", "nodes", "policy", "runs", "deadline_met", "feasible_met", "rejected", "mean_jct_s", "alloc_util"]
    _print_frame(res["summary"][cols], title="summary")
    g = res["gain_summary"]
    _print_frame(g[g.baseline.isin(["kube-default", "kube-autoscale"])], title="gains over the Kubernetes baselines")
    e = res["errors"]
    if len(e):
        _print_frame(e[e.source == "all"], title="prediction error")
    _console.print(f"wrote tables and plot to {out}/")


@experiment_app.command("dl2")
@_friendly
def dl2_experiment(
    out: Optional[Path] = typer.Option(None, "--out", "-o", help=_out_help("dl2-results", "Folder for runs.csv, summary.csv, RESULTS.md (and real_trace.csv).")),
    model: Optional[Path] = typer.Option(None, "--model", help="Model from `dlsched train dl2` (default: the shipped model)."),
    warmup_only: Optional[Path] = typer.Option(None, "--warmup-only-model", help="Ablation: a model trained with --rl-episodes 0."),
    rl_only: Optional[Path] = typer.Option(None, "--rl-only-model", help="Ablation: a model trained with --warmup-traces 0."),
    traces: int = typer.Option(10, "--traces", min=1, help="Held-out DL2 workloads (test seeds, never used in training)."),
    real_trace: bool = typer.Option(True, "--real-trace/--no-real-trace", help="Also run the model on the embedded ITP trace slice."),
    overwrite: bool = _OVERWRITE,
    workers: int = _WORKERS,
    ray_address: Optional[str] = _RAY_ADDRESS,
) -> None:
    """Rerun DL2's comparison: mean JCT vs DRF and Optimus on held-out DL2 workloads (mean ± std),
    the ablations when their models are given, and generalisation to a real trace."""
    from dlsched.experiments.dl2 import PAPER, run_dl2_experiment

    out = _results_folder(out, "dl2-results", overwrite)
    with _steps("DL2", traces + (1 if real_trace else 0)) as step:
        report = run_dl2_experiment(out, str(model) if model else None, str(warmup_only) if warmup_only else None,
                                    str(rl_only) if rl_only else None, traces, real_trace, on_step=step,
                                    workers=workers, address=ray_address)
    _print_frame(report.summary)
    for k, v in report.ratios.items():
        _console.print(f"{k}: {v:.3f}")
    _console.print(f"paper: dl2/drf ≤ {PAPER['vs_drf']}, dl2/optimus ≤ {PAPER['vs_optimus']}")
    if report.trace is not None:
        _print_frame(report.trace, digits=2, title="real trace")
    _console.print(f"wrote {', '.join(str(f) for f in report.files)}")


@experiment_app.command("fidelity")
@_friendly
def fidelity_experiment(
    out: Optional[Path] = typer.Option(None, "--out", "-o", help=_out_help("fidelity-results", "Folder for fidelity.csv and each policy's live run (jobs, logs, database).")),
    policies: str = typer.Option("fifo,drf,optimus", "--policies", "-p", help="Comma-separated policies, each run live then simulated."),
    jobs: int = typer.Option(10, "--jobs", min=1, help="Real training jobs in the workload."),
    span: float = typer.Option(120.0, "--span", min=0, help="Seconds over which the jobs arrive."),
    scale: float = typer.Option(1.0, "--scale", min=0.01, help="Multiply every job's steps (0.2 for a quick look)."),
    seed: int = typer.Option(0, "--seed", help="Workload seed."),
    overwrite: bool = _OVERWRITE,
) -> None:
    """Run a small workload of real PyTorch jobs live on the local backend under each policy, then
    replay it in the simulator with the speeds and pauses measured live; print the mean-JCT gap
    (goal: within 15%). Takes several minutes per policy."""
    from rich.progress import Progress

    from dlsched.config import Seed, check_flag
    from dlsched.experiments.fidelity import run_fidelity
    from dlsched.policies.registry import parse_policy_list

    check_flag(seed, Seed, "--seed")
    names = parse_policy_list(policies)
    out = _results_folder(out, "fidelity-results", overwrite)
    with Progress(console=_console, transient=True) as bar:
        tasks = {n: bar.add_task(f"live {n}", total=jobs) for n in names}
        rows = run_fidelity(names, out, jobs=jobs, span_s=span, seed=seed, scale=scale,
                            on_tick=lambda p, done, n: bar.update(tasks[p], completed=done))
    _console.print("policy      live JCT s  sim JCT s   gap     done  restarts  pause s  decision ms")
    for r in rows:
        pause = f"{r.median_pause:.2f}" if r.median_pause is not None else "-"
        dec = f"{r.median_decision_ms:.2f}" if r.median_decision_ms is not None else "-"
        _console.print(f"{r.policy:<11} {r.live_mean_jct:10.1f} {r.sim_mean_jct:10.1f} {r.gap:+7.1%} "
                       f"{r.live_done:>3}/{r.jobs:<3} {r.resizes:>8}  {pause:>7}  {dec:>11}")
    _console.print(f"wrote {out / 'fidelity.csv'}")


def _shared_traces(traces: Path | None, experiment: str) -> Path:
    """The shared traces folder an experiment on real traces reads, or an error saying how to get it."""
    from dlsched.core.errors import ConfigError
    from dlsched.paths import missing_traces_hint, traces_dir

    root = traces_dir(traces)
    if root is None:
        raise ConfigError(f"the {experiment} experiment needs the shared traces: {missing_traces_hint()}")
    return root


def _pick(known: dict, names: str | None, kind: str) -> dict:
    """The entries of `known` named in the comma-separated `names` (all of them without), in that order."""
    from dlsched.core.errors import ConfigError

    if not names:
        return dict(known)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ConfigError(f"unknown {kind} {unknown[0]!r}; known: {', '.join(known)}")
    return {n: known[n] for n in wanted}


@experiment_app.command("real-traces")
@_friendly
def real_traces_experiment(
    out: Path = typer.Option(Path("real-traces-results"), "--out", "-o", help="Folder for results.parquet and cells/ (a row "
                             "and a file per run, so a killed or repeated run resumes: it runs only the cells not there yet), runs.csv, summary.csv, claims.csv, RESULTS.md and one PNG per metric."),
    policies: Optional[str] = typer.Option(None, "--policies", "-p", help="Comma-separated policies (default: the baselines, "
                                           "the published systems, kube-autoscale and edf)."),
    cases: Optional[str] = typer.Option(None, "--cases", help="Comma-separated workloads (default: all; see --help text)."),
    quick: bool = typer.Option(False, "--quick", help="Small smoke run: ITP 195job and 300 Philly jobs (two draws)."),
    traces: Optional[Path] = typer.Option(None, "--traces", help="Shared traces folder (default: $DLSCHED_TRACES, else ../shared/traces)."),
    report_only: bool = typer.Option(False, "--report-only", help="Run nothing: write the tables from the cells already "
                                     "in --out (a policy missing a draw reads 'not run')."),
    workers: int = _WORKERS,
    ray_address: Optional[str] = _RAY_ADDRESS,
) -> None:
    """Run every policy on real traces whose jobs run on measured scaling curves (ITP deadline clusters
    195job, cluster03 and cluster02; the first 2,000 Philly jobs with three seeded profile draws), each on a
    cluster sized to offered load 0.8; write per-metric tables and plots with 95% bootstrap confidence
    intervals, and check the issue's claims (qos vs kube-default deadlines, dragon JCT, dl2 vs drf, oasis
    utility vs fifo). The full run takes about 1.5 hours on 2 cores; --quick takes a few minutes."""
    from dlsched.experiments import real_traces as exp
    from dlsched.policies.registry import parse_policy_list

    check_writable_folder(out)  # not an OutputFolder: rerunning into it resumes, by design
    root = _shared_traces(traces, "real-traces")
    chosen = _pick(exp.QUICK_CASES if quick else exp.CASES, cases, "case")
    names = tuple(parse_policy_list(policies)) if policies else exp.POLICIES
    total = sum(c.seeds for c in chosen.values()) * len(names)
    with _steps("real traces", total) as step:
        runs = exp.run(out, root, cases=chosen, policies=names, step=step, report_only=report_only, workers=workers,
                       address=ray_address)
    _console.print((out / "RESULTS.md").read_text(), markup=False, highlight=False)
    _console.print(f"{len(runs)} runs; wrote {out}/RESULTS.md, summary.csv, claims.csv and plots")


@experiment_app.command("robustness")
@_friendly
def robustness_experiment(
    out: Path = typer.Option(Path("robustness-results"), "--out", "-o", help="Folder for results.parquet and cells/ "
                             "(resumes: runs only the cells not there yet), runs.csv, summary.csv (every cell x policy "
                             "x metric with its 95% interval), claims.csv and RESULTS.md."),
    policies: Optional[str] = typer.Option(None, "--policies", "-p", help="Comma-separated policies (default: the "
                                           "baselines, the published systems, kube-autoscale and edf)."),
    forms: Optional[str] = typer.Option(None, "--forms", help="Comma-separated trace forms (default: all: itp-raw, "
                                        "itp-raw-rigid, itp-raw-elastic, itp-deadline, philly-draw)."),
    sizes: Optional[str] = typer.Option(None, "--sizes", help="Comma-separated cluster sizes (default: both: preset, "
                                        "load0.8)."),
    quick: bool = typer.Option(False, "--quick", help="Small smoke run: the first 200 jobs of each form, one draw."),
    docs: Optional[Path] = typer.Option(None, "--docs", help="Also write the page to this file (docs/ROBUSTNESS.md), "
                                        "keeping the reasons its claims table already gives."),
    traces: Optional[Path] = typer.Option(None, "--traces", help="Shared traces folder (default: $DLSCHED_TRACES, else ../shared/traces)."),
    report_only: bool = typer.Option(False, "--report-only", help="Run nothing: write the tables from the cells already in --out."),
    workers: int = _WORKERS,
    ray_address: Optional[str] = _RAY_ADDRESS,
) -> None:
    """Run every policy on each trace form (ITP cluster03 raw in its default form on drawn curves, raw
    rigid, raw elastic and deadline; the first 2,000 Philly jobs on drawn curves, two draws) on two cluster sizes (the trace's preset, and sized to
    offered load 0.8), and check the published systems' claims on every cell (dl2 vs drf, oasis vs drf,
    dual-agent and every published system vs the best baseline, dragon vs kube-default), each reported as
    measured with its 95% interval: the regression net for policies that hold on one workload only."""
    from dlsched.experiments import robustness as exp
    from dlsched.policies.registry import parse_policy_list

    check_writable_folder(out)  # not an OutputFolder: rerunning into it resumes, by design
    root = _shared_traces(traces, "robustness")
    chosen = _pick(exp.QUICK_FORMS if quick else exp.FORMS, forms, "form")
    names = tuple(parse_policy_list(policies)) if policies else exp.POLICIES
    grid_sizes = tuple(x.strip() for x in sizes.split(",") if x.strip()) if sizes else exp.SIZES
    exp.grid(chosen, grid_sizes)  # an unknown size is an input error before anything runs
    total = sum(f.case.seeds for f in chosen.values()) * len(grid_sizes) * len(names)
    with _steps("robustness", total) as step:
        runs = exp.run(out, root, forms=chosen, sizes=grid_sizes, policies=names, step=step, report_only=report_only,
                       workers=workers, address=ray_address, docs=docs)
    _console.print((out / "RESULTS.md").read_text(), markup=False, highlight=False)
    _console.print(f"{len(runs)} runs; wrote {out}/RESULTS.md, summary.csv, claims.csv"
                   + (f" and {docs}" if docs else ""))
