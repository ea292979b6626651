"""Offered load: how much GPU time a workload asks of a cluster while its jobs arrive, and a
cluster sized to a chosen load.

A policy comparison means something only when jobs compete: at 11% load every policy starts every
job at once and they all tie; at twice the cluster the queue grows for the whole arrival span and
waits measure the backlog more than the policy. So every run says its offered load, warns below
`LOW_LOAD` and above `HIGH_LOAD`, and `--load X` (X in `LOAD_RANGE`) builds a cluster of the base
cluster's own node shapes that the workload loads to X.

Definitions (also in docs/DECISIONS.md):

    GPU-time demanded = sum over jobs of gpus_requested x run time at the requested size
    load          = GPU-time demanded / (cluster GPUs x (last submit - first submit))
    horizon load  = GPU-time demanded / (cluster GPUs x (latest submit + run time - first submit))

A job's run time at its requested size is its trace duration when known (the throughput models
keep it at that size), else iterations / rate, with the rate the throughput model gives at a packed
allocation of its requested size in the empty cluster (as the SRTF oracle ranks jobs; nominal node
speed). A job with neither, or that cannot be placed at its size, is left out and counted.

`load` is over the arrival span, not the makespan: the makespan depends on the policy, the arrival
span does not, and a load above 1 then means the queue grows while jobs arrive. The horizon load
is over the time until the last job could end if every job started on arrival (an unbounded
cluster's makespan): also the same for every policy, never above `load`, and it does not explode
when the arrivals are a burst. It is what the cluster sees at most: no policy running the jobs at
their requested sizes keeps the cluster busier on average from the first arrival to its last end,
and above 1 no policy finishes by then.

When the arrivals are a *burst* (the arrival span is shorter than the median job's run time, e.g.
`--limit 40`: 40 jobs in two minutes, jobs of hours), `load` measures the burst, not queueing:
the warnings judge, and `--load` sizes to, the horizon load instead (`OfferedLoad.effective`).
Separately from any load, a cluster with at least as many GPUs as the jobs ever ask at once (each
started on arrival) lets every job start at once; the run says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import GPU, Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.framework.packing import fit_count, pack

if TYPE_CHECKING:
    from dlsched.throughput.base import ThroughputModel

#: Below this offered load jobs rarely queue, so policies barely differ.
LOW_LOAD = 0.3
#: Above this offered load the queue grows for the whole arrival span: waits measure the backlog.
HIGH_LOAD = 1.2
#: The loads `--load` / `load:` may ask for (inclusive). Below 0.05 the cluster is twenty times
#: what the jobs use on average and nobody waits; above 2 the arrivals leave more queued work than
#: the whole arrival span could serve, so every policy's waits are mostly the backlog. 0.3 .. 1.2
#: is where policies differ; the ends of the range are allowed, and warned about.
LOAD_RANGE = (0.05, 2.0)
#: A sized cluster further than this (relative) from the asked load says why in its note.
NEAR = 0.05


def check_load(load: object) -> float:
    """`load` as a float when it is a number in LOAD_RANGE, else ConfigError (one line)."""
    lo, hi = LOAD_RANGE
    ok = isinstance(load, (int, float)) and not isinstance(load, bool) and math.isfinite(load) and lo <= load <= hi
    if not ok:
        raise ConfigError(f"load must be a number from {lo:g} to {hi:g} (the offered load: 0.8 keeps a cluster busy "
                          f"with a short queue, above {HIGH_LOAD:g} the queue grows for the whole arrival span), "
                          f"got {load!r}")
    return float(load)


@dataclass(frozen=True)
class OfferedLoad:
    """The offered load of `jobs` on a cluster (see the module docstring). `load` is over the
    arrival span: NaN when all jobs arrive at once or the cluster has no GPUs; `horizon_load` over
    the time until the last job could end; `effective` is the one of the two the warnings judge and
    `--load` sizes to (the horizon load when the arrivals are a `burst`)."""

    gpu_seconds: float  # GPU-time demanded by the counted jobs
    window_seconds: float  # last submit - first submit
    cluster_gpus: int
    jobs: int  # jobs counted in gpu_seconds
    left_out: int = 0  # jobs whose run time at their requested size is unknown
    horizon_seconds: float = math.nan  # latest (submit + run time) - first submit, counted jobs
    median_run_seconds: float = math.nan  # median run time at the requested size, counted jobs
    peak_gpus: float = math.nan  # most GPUs the counted jobs ask at once, each started on arrival

    @property
    def load(self) -> float:
        return self._over(self.window_seconds)

    @property
    def horizon_load(self) -> float:
        return self._over(self.horizon_seconds)

    def _over(self, seconds: float) -> float:
        if not seconds > 0 or self.cluster_gpus <= 0:
            return math.nan
        return self.gpu_seconds / (self.cluster_gpus * seconds)

    @property
    def burst(self) -> bool:
        """Whether the jobs arrive within less than the median job's run time, so that the load
        over the arrival span measures the burst, not queueing."""
        return self.window_seconds < self.median_run_seconds  # False when the median is unknown

    @property
    def effective_seconds(self) -> float:
        """The window `effective` spreads the demand over: the horizon for a burst, else the arrivals."""
        return self.horizon_seconds if self.burst else self.window_seconds

    @property
    def effective(self) -> float:
        """The load the warnings judge and `--load` sizes to (see the module docstring)."""
        return self._over(self.effective_seconds)

    @property
    def measure(self) -> str:
        """Which load `effective` is, in words, for the lines that quote it."""
        return " until the last job could end" if self.burst else ""

    def describe(self) -> str:
        gpu_h = _amount(self.gpu_seconds / 3600)
        left = (f"; {self.left_out} job(s) left out: no duration and no throughput model rate at their size"
                if self.left_out else "")
        if self.cluster_gpus <= 0:
            return f"offered load undefined: the cluster has no GPUs ({gpu_h} GPU-h demanded{left})"
        horizon = ("" if math.isnan(self.horizon_load) else
                   f"; {self.horizon_load:.2f} over the {_span(self.horizon_seconds)} until the last job could end")
        if math.isnan(self.load):
            return (f"offered load undefined: all {self.jobs + self.left_out} jobs arrive at the same time, so "
                    f"there is no arrival window ({gpu_h} GPU-h demanded on {self.cluster_gpus:,} GPUs{left})"
                    + horizon)
        return (f"offered load {self.load:.2f} ({gpu_h} GPU-h demanded over {_span(self.window_seconds)} "
                f"of arrivals on {self.cluster_gpus:,} GPUs{left})" + horizon)

    def burst_note(self) -> str | None:
        """Why the load over the arrivals means nothing here, when the arrivals are a burst."""
        if not self.burst or math.isnan(self.effective):
            return None
        n = self.jobs + self.left_out
        came = (f"all {n} jobs arrive at once" if self.window_seconds <= 0 else
                f"the arrivals are a burst: {n} jobs within {_span(self.window_seconds)}")
        return (f"{came}, while the median job runs {_span(self.median_run_seconds)}, so the load over the arrivals "
                f"measures the burst, not queueing; the load until the last job could end "
                f"({self.effective:.2f}) is the one the warnings judge and --load sizes to")

    def roomy_note(self) -> str | None:
        """When the cluster holds every job at once (at least as many GPUs as the jobs ever ask at
        the same time, each started on arrival at its requested size): then jobs hardly wait,
        whatever the load says. None when some job's run time is unknown (the peak would be low)."""
        if self.left_out or not self.cluster_gpus >= self.peak_gpus > 0:
            return None
        return (f"the cluster's {self.cluster_gpus:,} GPUs are {self.cluster_gpus / self.peak_gpus:.1f}x the most the "
                f"jobs ever ask at once ({_amount(self.peak_gpus)} GPUs, each job started on arrival at its requested "
                "size): every job can start when it arrives, so policies can differ only in how they place and size "
                "jobs")


def _amount(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:,.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _shape(spec: JobSpec) -> tuple:
    """What decides where `pack` puts a job of its requested size in an empty cluster."""
    return (spec.worker_demand, spec.ps_demand, spec.num_workers, spec.num_ps, spec.gpu_type)


def _packed(cluster: Cluster, spec: JobSpec, cache: dict) -> Allocation | None:
    key = _shape(spec)
    if key not in cache:
        cache[key] = pack(cluster, cluster.capacity, spec, spec.num_workers, spec.num_ps)
    return cache[key]


def run_seconds(jobs: Sequence[JobSpec], cluster: Cluster, throughput: "ThroughputModel | None" = None) -> np.ndarray:
    """Each job's run time at its requested size on `cluster` (NaN where it cannot be known)."""
    out = np.array([np.nan if j.duration is None else j.duration for j in jobs], dtype=float)
    if throughput is None:
        return out
    allocs: dict = {}
    for i in np.flatnonzero(np.isnan(out)).tolist():
        spec = jobs[i]
        if not throughput.supports(spec):
            continue
        alloc = _packed(cluster, spec, allocs)
        rate = 0.0 if alloc is None else float(throughput.rate(spec, alloc, cluster))
        if rate > 0:
            out[i] = spec.iterations / rate
    return out


def offered_load(jobs: Sequence[JobSpec], cluster: Cluster, throughput: "ThroughputModel | None" = None) -> OfferedLoad:
    """The offered load of `jobs` on `cluster` (definition in the module docstring)."""
    if not len(jobs):
        raise ConfigError("the workload has no jobs, so it offers no load")
    secs = run_seconds(jobs, cluster, throughput)
    gpus = np.array([j.gpus_requested for j in jobs], dtype=float)
    submit = np.array([j.submit_time for j in jobs], dtype=float)
    known = ~np.isnan(secs)
    first = float(submit.min())
    ends = submit[known] + secs[known]
    return OfferedLoad(
        gpu_seconds=float(np.sum(gpus[known] * secs[known])),
        window_seconds=float(submit.max() - first),
        cluster_gpus=cluster.total_gpus,
        jobs=int(known.sum()),
        left_out=int((~known).sum()),
        horizon_seconds=float(ends.max() - first) if known.any() else math.nan,
        median_run_seconds=float(np.median(secs[known])) if known.any() else math.nan,
        peak_gpus=_peak(submit[known], ends, gpus[known]),
    )


def _peak(starts: np.ndarray, ends: np.ndarray, gpus: np.ndarray) -> float:
    """The most GPUs asked at once by jobs holding `gpus` from `starts` to `ends` (a job ending
    when another starts does not overlap it). NaN for no jobs."""
    if not len(starts):
        return math.nan
    times = np.concatenate([ends, starts])
    delta = np.concatenate([-gpus, gpus])
    order = np.lexsort((delta, times))  # by time, releases before claims at the same instant
    return float(np.cumsum(delta[order]).max())


def load_warning(ol: OfferedLoad) -> str | None:
    """One line when the effective load is below LOW_LOAD or above HIGH_LOAD (None otherwise, and
    when it is undefined)."""
    x = ol.effective
    if x < LOW_LOAD:
        return (f"offered load {x:.2f}{ol.measure} is below {LOW_LOAD:g}: jobs will barely wait, so policies will "
                "barely differ; size the cluster with --load 0.8")
    if x > HIGH_LOAD:
        grows = ("the queue grows until the last job could end and holds work after it" if ol.burst else
                 f"the queue grows for the whole arrival span ({_span(ol.window_seconds)}), so waits measure the "
                 "backlog more than the policy")
        return (f"offered load {x:.2f}{ol.measure} is above {HIGH_LOAD:g}: overloaded: {grows}; --load 0.8 sizes a "
                "cluster that keeps up")
    return None


# --------------------------------------------------------------------------- sizing a cluster


@dataclass(frozen=True)
class _Group:
    """A run of identical nodes in the base cluster (what one preset node group became)."""

    count: int
    row: np.ndarray  # gpu, cpu, mem
    gpu_type: str
    speed: float
    nodes_per_rack: int


def _groups(base: Cluster) -> list[_Group]:
    """Node groups recovered from the cluster's arrays: consecutive identical nodes, as
    `presets.build_cluster` lays them out. Nodes per rack is the most nodes of the group one rack
    holds: racks keep their size as the cluster grows (a rack is a switch, it does not stretch).
    Groups that shared a rack in the base get racks of their own (the Cluster does not say which
    preset field did it)."""
    cap, gt, sp = base.capacity, base.gpu_type, base.speed
    new = np.ones(base.num_nodes, dtype=bool)
    new[1:] = (cap[1:] != cap[:-1]).any(axis=1) | (gt[1:] != gt[:-1]) | (sp[1:] != sp[:-1])
    starts = np.flatnonzero(new).tolist() + [base.num_nodes]
    out = []
    for a, b in zip(starts, starts[1:]):
        per_rack = int(np.unique(base.rack[a:b], return_counts=True)[1].max())
        out.append(_Group(b - a, cap[a], str(gt[a]), float(sp[a]), per_rack))
    return out


def _build(base: Cluster, groups: list[_Group], ref: _Group, k: int, name: str) -> Cluster:
    """The base's node groups scaled so the largest (by GPUs) has `k` nodes and the others keep
    their proportion to it (at least one node each, so no GPU type disappears)."""
    from dataclasses import asdict

    from dlsched.presets import build_cluster
    from dlsched.presets.schema import NetworkSpec, NodeGroup, PresetSpec

    node_groups = [
        NodeGroup(count=k if g is ref else max(1, round(g.count * k / ref.count)), gpus=g.row[0], cpus=g.row[1],
                  mem=g.row[2], gpu_type=g.gpu_type or "generic", speed=g.speed, nodes_per_rack=g.nodes_per_rack)
        for g in groups
    ]
    return build_cluster(PresetSpec(name=name, network=NetworkSpec(**asdict(base.network)), node_groups=node_groups))


@dataclass(frozen=True)
class Sizing:
    """A cluster sized to a target load (or the cluster as given, `target` None), its offered load,
    and `note`: why the load is further than NEAR from the target (the largest job needs more
    nodes, or whole nodes allow no closer load)."""

    cluster: Cluster
    offered: OfferedLoad
    target: float | None = None
    note: str | None = None

    @property
    def warning(self) -> str | None:
        return load_warning(self.offered)

    def notes(self, warning: bool = True) -> list[str]:
        """What a run prints and its report repeats: the offered load, why it misses the target,
        why the arrival-span load means nothing for a burst, that the cluster holds every job at
        once, and the load warning."""
        line = self.offered.describe()
        if self.target is not None:
            line += f"; the cluster was sized from whole nodes for load {self.target:g}{self.offered.measure}"
        extra = (self.note, self.offered.burst_note(), self.offered.roomy_note(), self.warning if warning else None)
        return [n for n in (line, *extra) if n]


def size_for_load(
    jobs: Sequence[JobSpec], base: Cluster, load: float, throughput: "ThroughputModel | None" = None
) -> Sizing:
    """`cluster_for_load`, with the offered load it gives and the note when it cannot give `load`.
    The load sized to is `OfferedLoad.effective`: over the arrival span, or for a burst until the
    last job could end."""
    load = check_load(load)
    if not len(jobs):
        raise ConfigError("the workload has no jobs, so no cluster size gives it a load")
    groups = _groups(base)
    ref = max(groups, key=lambda g: g.count * g.row[GPU])
    name = f"{base.name}@load{load:g}"

    @lru_cache(maxsize=None)
    def build(k: int) -> Cluster:
        return _build(base, groups, ref, k, name)

    k_fit = _fewest_nodes(jobs, base, groups, ref, build)
    first = offered_load(jobs, build(k_fit), throughput)
    if first.gpu_seconds <= 0:
        raise ConfigError(f"cannot size a cluster for load {load:g}: no job's run time is known ({first.describe()})")
    if math.isnan(first.effective):
        raise ConfigError(f"cannot size a cluster for load {load:g}: {first.describe()}")
    # the fewest nodes with at most the target load (GPUs grow with k), or one fewer if that is closer
    window = first.effective_seconds
    want = first.gpu_seconds / (window * load)  # GPUs

    def load_at(c: int) -> float:
        return first.gpu_seconds / (window * build(c).total_gpus)

    k_hi = _first_k(lambda c: build(c).total_gpus >= want, k_fit)
    k = min((c for c in (k_hi - 1, k_hi) if c >= k_fit), key=lambda c: abs(load_at(c) - load))
    cluster = build(k)
    offered = offered_load(jobs, cluster, throughput)
    note = None
    if abs(offered.effective - load) > NEAR * load:
        note = f"load {offered.effective:.2f}, not {load:g}: "
        if k == k_fit and want < cluster.total_gpus:
            biggest = max(j.gpus_requested for j in jobs)
            note += (f"{cluster.total_gpus:,} GPUs is the smallest cluster of {base.name}'s node shapes that holds "
                     f"the largest job ({biggest:g} GPUs) at its size"
                     + (", with a node of every group" if len(groups) > 1 else ""))
        else:
            near = " and ".join(f"{load_at(c):.2f}" for c in (k - 1, k + 1) if c >= k_fit)
            note += f"whole nodes allow no closer load (the next smaller and larger clusters give {near})"
    return Sizing(cluster, offered, load, note)


def _fewest_nodes(jobs: Sequence[JobSpec], base: Cluster, groups: list[_Group], ref: _Group, build) -> int:
    """The fewest reference-group nodes whose cluster holds every job at its requested size (jobs
    whose one worker fits no node of their GPU type are left to the engine, which rejects them)."""
    shapes = {}
    for j in jobs:
        key = _shape(j)
        if key not in shapes and (fit_count(base.capacity[base.type_mask(j.gpu_type)], np.asarray(j.worker_demand)) > 0).any():
            shapes[key] = j

    def holds(k: int) -> bool:
        c = build(k)
        return all(pack(c, c.capacity, s, s.num_workers, s.num_ps) is not None for s in shapes.values())

    tasks = max((s.num_workers + s.num_ps for s in shapes.values()), default=1)
    limit = (tasks + 1) * max(math.ceil(ref.count / g.count) for g in groups)  # past this, more nodes never help
    return _first_k(holds, 1, limit, f"no number of {base.name}'s nodes holds every job of the workload at its requested size")


def _first_k(ok: Callable[[int], bool], lo: int, limit: int | None = None, why: str = "") -> int:
    """The least k >= lo with ok(k), for ok monotone in k: doubling, then bisection. ConfigError
    `why` when ok is still false past `limit`."""
    step, hi = 1, lo
    while not ok(hi):
        if limit is not None and hi >= limit:
            raise ConfigError(why)
        lo, hi, step = hi + 1, hi + step if limit is None else min(hi + step, limit), step * 2
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo


def cluster_for_load(
    jobs: Sequence[JobSpec], base: Cluster, load: float, throughput: "ThroughputModel | None" = None
) -> Cluster:
    """A cluster of the base's node shapes (whole nodes; several groups keep their proportions) on
    which `jobs` offer a load as close to `load` as whole nodes allow, never too small to hold the
    largest job at its requested size (see `size_for_load` for the note when that raises the size)."""
    return size_for_load(jobs, base, load, throughput).cluster


def at_load(
    jobs: Sequence[JobSpec], cluster: Cluster, load: float | None, throughput: "ThroughputModel | None" = None
) -> Sizing:
    """What a run uses: `cluster` as given when `load` is None, else sized to `load` from its node shapes."""
    if load is None:
        return Sizing(cluster, offered_load(jobs, cluster, throughput))
    return size_for_load(jobs, cluster, load, throughput)
