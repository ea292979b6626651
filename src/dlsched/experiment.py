"""Run several policies over one workload on one cluster: what `simulate` and `compare` do.

`prepare_run` is the one place that turns a run config into the workload, the load-sized cluster,
the throughput model and each policy's options (default utilities, oracles, OASiS slots); the
command line (`cli._run`) and a sweep's simulation cells (`sweep.cell`) both use it, so a sweep
cell is exactly `dlsched compare` for one policy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from dlsched.core.cluster import Cluster
from dlsched.core.job import Architecture, JobSpec
from dlsched.policies.registry import RESIZING, make_policy
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import NodeEvent, simulate
from dlsched.sim.results import SimResult
from dlsched.throughput.base import ThroughputModel

if TYPE_CHECKING:
    from dlsched.run_config import RunConfig
    from dlsched.traces.load import Sizing
    from dlsched.traces.workload import Workload


@dataclass
class PolicyRun:
    name: str
    result: SimResult
    wall_seconds: float
    notes: list[str] = field(default_factory=list)  # what the policy said about its run (e.g. DL2's model)


@dataclass
class Comparison:
    runs: list[PolicyRun] = field(default_factory=list)

    @property
    def results(self) -> list[SimResult]:
        return [r.result for r in self.runs]


def run_policies(
    jobs: list[JobSpec],
    cluster: Cluster,
    policies: list[str],
    throughput: ThroughputModel,
    config: SimConfig,
    policy_options: dict[str, dict[str, Any]] | None = None,
    on_progress: Callable[[str, float, int], None] | None = None,
    node_events: Sequence[NodeEvent] = (),
) -> Comparison:
    """Each policy gets a fresh policy object and the same jobs, cluster, throughput, machine speed
    events and seed."""
    options = policy_options or {}
    out = Comparison()
    for name in policies:
        policy = make_policy(name, **options.get(name, {}))
        cb = None
        if on_progress is not None:
            cb = lambda t, ended, _n=name: on_progress(_n, t, ended)  # noqa: E731
        start = time.perf_counter()
        result = simulate(jobs, cluster, policy, throughput, config, on_progress=cb, node_events=node_events)
        out.runs.append(PolicyRun(name, result, time.perf_counter() - start, list(getattr(policy, "notes", []))))
    return out


@dataclass
class PreparedRun:
    """What a comparison runs on, and what it must tell the user about how it was prepared."""

    workload: "Workload"
    cluster: Cluster
    throughput: ThroughputModel
    sizing: "Sizing"
    options: dict[str, dict[str, Any]]
    utility_note: str | None = None
    oracle_note: str | None = None
    slot_note: str | None = None
    rigid_note: str | None = None
    node_events: list[NodeEvent] = field(default_factory=list)
    variability_note: str | None = None


def prepare_run(cfg: "RunConfig", names: Sequence[str], root: Path | None, load: float | None = None) -> PreparedRun:
    """The workload of `cfg` (its trace, else the embedded slice), the cluster sized to `load`
    (else `cfg.load`; none: as given), and the options of the policies `names`. When one of `names`
    is utility-driven, every job without a utility gets the default one (so every policy of the
    comparison is scored on the same utilities) and, if jobs declare no work, the utility-driven
    policies run as labelled oracles; OASiS' slots come from the jobs unless the options set them."""
    from dlsched.core.utility import with_default_utilities
    from dlsched.policies.registry import UTILITY_DRIVEN
    from dlsched.presets import load_cluster, trace_cluster
    from dlsched.throughput.registry import default_throughput
    from dlsched.traces import default_workload, load_trace
    from dlsched.traces.load import at_load

    if cfg.trace:
        workload = load_trace(cfg.trace, cfg.trace_format, limit=cfg.limit, elastic=cfg.elastic, seed=cfg.sim.seed,
                              traces=root, profiles=cfg.profiles)
    else:
        workload = default_workload(measured=cfg.profiles != "off", elastic=cfg.elastic, limit=cfg.limit)
    cluster = load_cluster(cfg.cluster) if cfg.cluster else trace_cluster(workload)
    throughput = default_throughput(root, duration_alpha=cfg.throughput.duration_alpha, dl2=cfg.throughput.dl2)
    sizing = at_load(workload.jobs, cluster, cfg.load if load is None else load, throughput)  # it checks the load
    prepared = PreparedRun(workload, sizing.cluster, throughput, sizing,
                           {n: dict(o) for n, o in cfg.policy_options.items()})
    if cfg.variability:
        from dlsched.hetero.scenarios import vary

        subs = [j.submit_time for j in workload.jobs]
        horizon = (max(subs) - min(subs)) * 1.5 + 7 * 86400.0 if subs else 0.0
        prepared.cluster, prepared.node_events = vary(sizing.cluster, cfg.variability, cfg.sim.seed, horizon)
        prepared.variability_note = (f"machine speeds {cfg.variability!r} (hetero.speeds, seed {cfg.sim.seed}): "
                                     f"{len(prepared.node_events)} speed changes; fees at per-GPU-type prices")
    options = prepared.options
    driven = [n for n in names if n in UTILITY_DRIVEN]
    if driven:  # score every policy of the comparison on the same utilities
        workload.jobs, filled = with_default_utilities(workload.jobs)
        if filled:
            prepared.utility_note = (
                f"{filled} of {len(workload.jobs)} jobs had none, so all policies are scored on the default "
                f"from duration d (value 1, target 2d, decay 4/d), as {'/'.join(driven)} needs one"
            )
    undeclared = sum(1 for j in workload.jobs if not j.work_known)
    if driven and undeclared:  # they plan from each job's work: honest only as labelled oracles
        for n in driven:
            options.setdefault(n, {}).setdefault("oracle", True)
        prepared.oracle_note = (
            f"{undeclared} of {len(workload.jobs)} jobs declare no work and {'/'.join(driven)} plan "
            "each job from its work up front (as their paper assumes users declare it), so they run "
            "as oracles on the true work, marked (oracle); pass oracle: false under policy_options "
            "to have them reject such jobs instead")
    if "oasis" in names and not {"slot_seconds", "horizon"} & set(options.get("oasis", {})):
        from dlsched.policies.oasis_jobs import HORIZON_FACTOR, SLOT_DIVISOR, workload_slots

        if (picked := workload_slots(workload.jobs)) is not None:
            slot, horizon = picked
            options.setdefault("oasis", {}).update(slot_seconds=slot, horizon=horizon)
            prepared.slot_note = (
                f"oasis plans in {slot:g} s slots over a {horizon}-slot horizon, chosen from the jobs' "
                f"durations (1/{SLOT_DIVISOR:g} of the 10th percentile; {HORIZON_FACTOR:g}x the longest "
                "job); set slot_seconds/horizon under policy_options to override")
    prepared.rigid_note = rigid_note(workload.jobs, names, cfg.profiles, cfg.elastic)
    return prepared


def rigid_note(jobs: Sequence[JobSpec], names: Sequence[str], profiles: str, elastic: bool | None) -> str | None:
    """What a run says when a policy that works by resizing jobs meets jobs it cannot resize (None:
    no such policy, or no rigid job): how many, why they are rigid, and the flag that changes it."""
    resizers = [n for n in names if n in RESIZING]
    # a job on a measured curve that stops improving at its size is not held back by its form: not counted
    rigid = sum(1 for j in jobs if j.min_workers == j.max_workers and (j.arch is not Architecture.PS or j.min_ps == j.max_ps)
                and (elastic is False or "profile" not in j.extra))
    if not resizers or not rigid:
        return None
    if elastic is False:
        why, fix = "--rigid", "drop --rigid to let them"
    elif profiles == "draw":
        why, fix = "larger than every measured curve, duration-only", "--elastic lets them"
    else:
        why, fix = f"duration-only with --profiles {profiles}", "--profiles draw (the default) or --elastic lets them"
    return (f"{rigid} of {len(jobs)} jobs are rigid ({why}): {', '.join(resizers)} cannot resize them; "
            f"{fix} scale (docs/TRACES.md)")
