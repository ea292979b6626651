"""Offered load: how much GPU time a workload asks of a cluster while its jobs arrive, and a
cluster sized to a chosen load.

A policy comparison means something only when jobs compete: at 11% load every policy starts every
job at once and they all tie. So every run says its offered load, warns below `LOW_LOAD`, and
`--load X` builds a cluster of the base cluster's own node shapes that the workload loads to X.

Definition (also in docs/DECISIONS.md):

    load = GPU-time demanded / GPU-time available while jobs arrive
    GPU-time demanded = sum over jobs of gpus_requested x run time at the requested size
    GPU-time available = cluster GPUs x (last submit - first submit)

A job's run time at its requested size is its trace duration when known (the throughput models
keep it at that size), else iterations / rate, with the rate the throughput model gives at a packed
allocation of its requested size in the empty cluster (as the SRTF oracle ranks jobs; nominal node
speed). A job with neither, or that cannot be placed at its size, is left out and counted. The
window is the arrival span, not the makespan: the makespan depends on the policy, the arrival
span does not, and a load above 1 then means the queue grows while jobs arrive.
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
#: A sized cluster further than this (relative) from the asked load says why in its note.
NEAR = 0.05


@dataclass(frozen=True)
class OfferedLoad:
    """The offered load of `jobs` on a cluster (see the module docstring); `load` is NaN when all
    jobs arrive at once (no arrival window to spread the demand over) or the cluster has no GPUs."""

    gpu_seconds: float  # GPU-time demanded by the counted jobs
    window_seconds: float  # last submit - first submit
    cluster_gpus: int
    jobs: int  # jobs counted in gpu_seconds
    left_out: int = 0  # jobs whose run time at their requested size is unknown

    @property
    def load(self) -> float:
        if self.window_seconds <= 0 or self.cluster_gpus <= 0:
            return math.nan
        return self.gpu_seconds / (self.cluster_gpus * self.window_seconds)

    def describe(self) -> str:
        gpu_h = _amount(self.gpu_seconds / 3600)
        left = (f"; {self.left_out} job(s) left out: no duration and no throughput model rate at their size"
                if self.left_out else "")
        if self.cluster_gpus <= 0:
            return f"offered load undefined: the cluster has no GPUs ({gpu_h} GPU-h demanded{left})"
        if math.isnan(self.load):
            return (f"offered load undefined: all {self.jobs + self.left_out} jobs arrive at the same time, so "
                    f"there is no arrival window ({gpu_h} GPU-h demanded on {self.cluster_gpus:,} GPUs{left})")
        return (f"offered load {self.load:.2f} ({gpu_h} GPU-h demanded over {_span(self.window_seconds)} "
                f"of arrivals on {self.cluster_gpus:,} GPUs{left})")


def _amount(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _span(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


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
    return OfferedLoad(
        gpu_seconds=float(np.sum(gpus[known] * secs[known])),
        window_seconds=float(submit.max() - submit.min()),
        cluster_gpus=cluster.total_gpus,
        jobs=int(known.sum()),
        left_out=int((~known).sum()),
    )


def low_load_warning(ol: OfferedLoad) -> str | None:
    """One line when the load is below LOW_LOAD (None otherwise, and when the load is undefined)."""
    if not ol.load < LOW_LOAD:
        return None
    return (f"offered load {ol.load:.2f} is below {LOW_LOAD:g}: jobs will barely wait, so policies will barely "
            "differ; size the cluster with --load 0.8")


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
        return low_load_warning(self.offered)

    def notes(self, warning: bool = True) -> list[str]:
        """What a report repeats: the offered load, why it misses the target, the low-load warning."""
        line = self.offered.describe()
        if self.target is not None:
            line += f"; the cluster was sized for load {self.target:g} from whole nodes"
        return [n for n in (line, self.note, self.warning if warning else None) if n]


def size_for_load(
    jobs: Sequence[JobSpec], base: Cluster, load: float, throughput: "ThroughputModel | None" = None
) -> Sizing:
    """`cluster_for_load`, with the offered load it gives and the note when it cannot give `load`."""
    if not (isinstance(load, (int, float)) and math.isfinite(load) and load > 0):
        raise ConfigError(f"load must be a finite number > 0 (the offered load, e.g. 0.8), got {load!r}")
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
    if math.isnan(first.load):
        raise ConfigError(f"cannot size a cluster for load {load:g}: {first.describe()}")
    if first.gpu_seconds <= 0:
        raise ConfigError(f"cannot size a cluster for load {load:g}: no job's run time is known ({first.describe()})")
    # the fewest nodes with at most the target load (GPUs grow with k), or one fewer if that is closer
    want = first.gpu_seconds / (first.window_seconds * load)  # GPUs

    def load_at(c: int) -> float:
        return first.gpu_seconds / (first.window_seconds * build(c).total_gpus)

    k_hi = _first_k(lambda c: build(c).total_gpus >= want, k_fit)
    k = min((c for c in (k_hi - 1, k_hi) if c >= k_fit), key=lambda c: abs(load_at(c) - load))
    cluster = build(k)
    offered = offered_load(jobs, cluster, throughput)
    note = None
    if abs(offered.load - load) > NEAR * load:
        note = f"load {offered.load:.2f}, not {load:g}: "
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


def _closer(smaller: Cluster, first: OfferedLoad, load: float, offered: OfferedLoad) -> bool:
    """Whether a cluster too small for the largest job would have been closer to the target load."""
    return abs(first.gpu_seconds / (first.window_seconds * smaller.total_gpus) - load) < abs(offered.load - load)


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
