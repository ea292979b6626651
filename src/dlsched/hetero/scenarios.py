"""Named environments from a homogeneous cluster to a strongly heterogeneous, fluctuating one.

Why: a claim like "a fluctuation-aware placement helps, more so when machines vary" needs the same
jobs on a ladder of clusters where one thing changes at a time (dualagent.md §4.5, S1-S4):
the GPU types (hetero-small vs its all-V100 control), then a static per-machine spread, then
fluctuation over time. `build` makes the cluster and its speed events for a seed; `workload` makes
the jobs: a window of one of Gavel's Philly-derived per-VC traces, the arrivals rescaled so that
the window offers `load` on the cluster (`traces.load.offered_load`, under Gavel's matrix).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import GPU, Cluster
from dlsched.core.errors import ConfigError, did_you_mean
from dlsched.core.job import JobSpec
from dlsched.framework.packing import fit_count
from dlsched.hetero.prices import node_prices
from dlsched.hetero.speeds import VARIABILITY, Variability
from dlsched.paths import missing_traces_hint, traces_dir
from dlsched.presets import load_cluster
from dlsched.sim.engine import NodeEvent

#: Gavel's per-VC traces under the traces root.
GAVEL_TRACES = Path("gavel-philly-derived") / "seed0"
LOAD = 0.8


@dataclass(frozen=True)
class Scenario:
    """A cluster preset, how its machines vary (`speeds.Variability`) and the offered load its
    workloads are scaled to."""

    name: str
    preset: str
    variability: Variability
    load: float = LOAD
    description: str = ""


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("homogeneous-steady", "hetero-homogeneous", VARIABILITY["steady"],
             description="32 x 4 V100, every machine exactly nominal: the sanity check"),
    Scenario("types", "hetero-small", VARIABILITY["steady"],
             description="PAI 2020 type mix on Gavel's K80/P100/V100, machines of a type identical"),
    Scenario("static", "hetero-small", VARIABILITY["static"],
             description="types + a static per-machine spread (SC'22: ~8% average, 1.5x outliers), racks correlated"),
    Scenario("fluctuating", "hetero-small", VARIABILITY["fluctuating"],
             description="static + OU drift (sd 5%, tau 45 min), stragglers 1/day, co-located-tenant contention 2/day"),
    Scenario("strong", "hetero-small", VARIABILITY["strong"],
             description="fluctuating, stronger: OU sd 8%, stragglers 3/day, 5% outliers, contention 6/day"),
)}


def scenario(name: str | Scenario) -> Scenario:
    """A scenario by name (or the Scenario itself); ConfigError naming the choices."""
    if isinstance(name, Scenario):
        return name
    if name not in SCENARIOS:
        raise ConfigError(f"unknown scenario {name!r}{did_you_mean(str(name), SCENARIOS)}; "
                          f"scenarios: {', '.join(SCENARIOS)}")
    return SCENARIOS[name]


def build(which: str | Scenario, seed: int, horizon_s: float) -> tuple[Cluster, list[NodeEvent]]:
    """The scenario's cluster with its static speed factors and per-node prices (`prices`), and its
    speed events over (0, horizon_s); one seed, one draw."""
    sc = scenario(which)
    return vary(load_cluster(sc.preset), sc.variability, seed, horizon_s)


#: The most speed events `vary` draws: beyond, a run spends its time on events (1,213 nodes
#: fluctuating for 150 days would be ~20 million).
MAX_EVENTS = 3_000_000


def vary(base: Cluster, variability: Variability | str, seed: int, horizon_s: float) -> tuple[Cluster, list[NodeEvent]]:
    """`base` with machine speed factors drawn from `variability` (a `VARIABILITY` name or one),
    its GPU types' prices, and the speed events over (0, horizon_s). What `dlsched simulate
    --variability` applies to any cluster."""
    if isinstance(variability, str):
        if variability not in VARIABILITY:
            raise ConfigError(f"unknown variability {variability!r}{did_you_mean(variability, VARIABILITY)}; "
                              f"known: {', '.join(VARIABILITY)}")
        variability = VARIABILITY[variability]
    if variability.fluctuates:
        expected = base.num_nodes * horizon_s / variability.step_s
        if expected > MAX_EVENTS:
            raise ConfigError(f"fluctuating speeds on {base.num_nodes} nodes over {horizon_s / 86400:.0f} days are "
                              f"~{expected / 1e6:.0f} million events: use --limit (fewer jobs, a shorter span) or a "
                              "variability without fluctuation (static)")
    rng = np.random.default_rng(seed)
    factors = variability.static_factors(base, rng)
    cluster = replace(base, speed=factors, price=node_prices(base), memo={})
    return cluster, variability.events(cluster, factors, horizon_s, rng)


def _trace_files(traces: str | Path | None) -> list[Path]:
    root = traces_dir(traces)
    folder = root / GAVEL_TRACES if root is not None else None
    files = sorted(folder.glob("*.csv")) if folder is not None and folder.is_dir() else []
    if not files:
        where = folder if folder is not None else f"<traces root>/{GAVEL_TRACES} (no traces root found)"
        raise ConfigError(f"hetero workloads need Gavel's Philly-derived traces in {where}; "
                          f"{missing_traces_hint(str(GAVEL_TRACES) + '/')}")
    return files


def _capped(spec: JobSpec, cap: int) -> JobSpec:
    if spec.num_workers <= cap:
        return spec
    return replace(spec, num_workers=cap, min_workers=cap, max_workers=cap,
                   arch="single" if cap == 1 else "allreduce",
                   extra={**spec.extra, "workers_capped_from": spec.num_workers})


#: Longest job of an episode, in hours of work on its fastest GPU type at its requested size.
MAX_JOB_HOURS = 24.0


def _shortened(spec: JobSpec, cluster: Cluster, throughput, hours: float) -> JobSpec:
    """`spec` with at most `hours` of work on its fastest GPU type (one node of it, as profiled)."""
    best = max(throughput.rate(spec, Allocation.single_node(int(n), spec.num_workers, spec.num_ps), cluster)
               for n in cluster.type_groups()[2])
    if not best > 0 or spec.iterations <= best * hours * 3600.0:
        return spec
    return replace(spec, iterations=best * hours * 3600.0,
                   extra={**spec.extra, "work_capped_from": spec.iterations})


def workload(
    which: str | Scenario,
    cluster: Cluster,
    seed: int,
    jobs: int = 300,
    load: float | None = None,
    *,
    vc: str | None = None,
    traces: str | Path | None = None,
    max_hours: float | None = MAX_JOB_HOURS,
) -> list[JobSpec]:
    """`jobs` consecutive jobs of one Gavel per-VC trace, arrivals rescaled to offer `load`.

    - The VC (unless `vc` names one, e.g. to hold VCs out for testing) is drawn by `seed` among the
      traces with at least `jobs` jobs, and so is the window's first job.
    - Workers are capped at what the whole cluster holds (a job may span GPU types; it then runs at
      the pace of its slowest GPU), the original count kept in `extra["workers_capped_from"]`.
    - A job whose work would take more than `max_hours` on its fastest GPU type at its size (Gavel's
      Philly-derived step counts reach thousands of GPU-hours: one such job makes a 120-job
      episode last months) does `max_hours` of it; the original count is kept in
      `extra["work_capped_from"]`. None keeps every job's work.
    - Arrivals start at 0 and are stretched or compressed by one factor so that the offered load on
      `cluster` (`traces.load.offered_load` under the default throughput models: Gavel's matrix,
      nominal speeds) is `load` (default: the scenario's).
    ConfigError when the shared traces are absent."""
    from dlsched.throughput.registry import default_throughput
    from dlsched.traces import load_trace
    from dlsched.traces.load import offered_load

    sc = scenario(which)
    target = sc.load if load is None else load
    if not (isinstance(target, (int, float)) and np.isfinite(target) and target > 0):
        raise ConfigError(f"load must be a finite number > 0, got {target!r}")
    if jobs < 2:
        raise ConfigError(f"a workload needs at least 2 jobs (an arrival window), got {jobs}")
    files = _trace_files(traces)
    rng = np.random.default_rng(seed)
    if vc is not None:
        chosen = [f for f in files if f.stem == vc]
        if not chosen:
            raise ConfigError(f"no Gavel trace for VC {vc!r}; VCs: {', '.join(f.stem for f in files)}")
        path = chosen[0]
    else:
        sizes = {f: sum(1 for _ in f.open()) - 1 for f in files}
        big = [f for f in files if sizes[f] >= jobs]
        if not big:
            raise ConfigError(f"no Gavel VC trace has {jobs} jobs (the largest has {max(sizes.values())})")
        path = big[int(rng.integers(len(big)))]
    root = traces_dir(traces)
    w = load_trace(path, "gavel", elastic=False, profiles="off", traces=root)
    if len(w.jobs) < jobs:
        raise ConfigError(f"VC {path.stem} has {len(w.jobs)} jobs, fewer than the {jobs} asked for")
    first = int(rng.integers(len(w.jobs) - jobs + 1))
    window = w.jobs[first:first + jobs]
    cap = int(fit_count(cluster.capacity, np.asarray(window[0].worker_demand)).sum())
    if cap < 1 or cluster.capacity[:, GPU].sum() <= 0:
        raise ConfigError(f"cluster {cluster.name!r} holds no worker of the trace's shape")
    t0 = window[0].submit_time
    window = [_capped(replace(j, submit_time=j.submit_time - t0), cap) for j in window]
    throughput = default_throughput(root)
    if max_hours is not None:
        window = [_shortened(j, cluster, throughput, max_hours) for j in window]
    offered = offered_load(window, cluster, throughput)
    if not np.isfinite(offered.load) or offered.load <= 0:
        raise ConfigError(f"cannot scale {path.stem} jobs {first}..{first + jobs - 1} to a load: {offered.describe()}")
    stretch = offered.load / target
    return [replace(j, submit_time=j.submit_time * stretch) for j in window]
