"""DL2's analytic parameter-server speed model, with placement and racks.

Why: DL2 (and DRAGON, Optimus-style policies) size PS jobs by how many PSs and workers they get and
where they land. DL2's simulator (`job.py`, REAL_SPEED_TRACE=False) prices one synchronous step of a
worker as

    iteration time = local compute + max(inter-node transfer, intra-node transfer)
    transfer       = 2 · (model_size / p) / bandwidth     (push + pull of one PS shard)

with bandwidth shared among the tasks co-located on a node: the intra-node bandwidth is divided by
max(#PS, #workers) on the worker's node; the inter-node bandwidth by the number of remote PSs the
worker talks to (worker side) and by the number of remote workers a PS node serves (PS side). The job
runs at the pace of its slowest worker, and its rate is w / max(iteration time) steps/s, counting one
step per worker as DL2 does (the same unit as DL2's measured speeds).

Two deliberate extensions to DL2's code, so that placement matters the way it physically does:
- a worker whose PSs are all on its own node pays no inter-node transfer, and one with no local PS
  pays no intra-node transfer (DL2 always charges both; `dl2_exact=True` restores that);
- a PS on another rack is reached over the inter-rack link: that flow's bandwidth is also capped by
  inter-rack bandwidth / (number of cross-rack flows on that side).

Parameters come from the job's `spec.extra` (`compute_s`: seconds per step on one worker,
`model_size_mb`), with bandwidths from `cluster.network` (GB/s, 1 GB = 1000 MB); or, for "dl2:<name>"
jobs when `dl2_constants` are given, from DL2's per-model constants (compute time, model size and its
measured inter/intra-server bandwidths; inter-rack = inter-server × the cluster's inter-rack /
inter-node ratio). Note the scale: for resnet-50 with 1 PS + 1 worker on one node DL2's constants give
0.9 steps/s (0.37 with `dl2_exact`) where DL2's measured table gives 15.8, so never mix the analytic
and measured DL2 models in one comparison.
"""

from __future__ import annotations

from pathlib import Path

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.throughput.base import ThroughputModel
from dlsched.throughput.dl2_constants import DL2ModelConstants, load_dl2_constants
from dlsched.throughput.topology import Span, bandwidth_mbs, extra_params, has_extra

DL2_PREFIX = "dl2:"
PS_PREFIX = "ps:"

# (compute_s, model_size_mb, intra, inter, inter_rack bandwidths in MB/s)
Params = tuple[float, float, float, float, float]


class ParameterServerModel(ThroughputModel):
    name = "parameter-server"

    def __init__(
        self,
        dl2_constants: dict[str, DL2ModelConstants] | Path | str | None = None,
        *,
        dl2_exact: bool = False,
    ):
        """`dl2_constants`: a loaded table or a path to workload_constants.json; None = "dl2:*" jobs
        are not handled here (they belong to the measured DL2 table)."""
        if isinstance(dl2_constants, (str, Path)):
            dl2_constants = load_dl2_constants(dl2_constants)
        self.dl2 = dict(dl2_constants or {})
        self.dl2_exact = dl2_exact
        self._cache: dict[tuple, float] = {}

    def supports(self, spec: JobSpec) -> bool:
        m = spec.model
        if m.startswith(DL2_PREFIX):
            return m[len(DL2_PREFIX):] in self.dl2 or has_extra(spec)
        return m.startswith(PS_PREFIX) and has_extra(spec)

    # ------------------------------------------------------------------ parameters
    def params(self, spec: JobSpec, cluster: Cluster) -> Params:
        net = cluster.network
        if has_extra(spec):
            return (*extra_params(spec), *(bandwidth_mbs(net, where) for where in Span))
        c = self.dl2.get(spec.model[len(DL2_PREFIX):]) if spec.model.startswith(DL2_PREFIX) else None
        if c is None:
            raise ConfigError(
                f"job {spec.job_id!r}: the parameter-server model needs spec.extra "
                f"'compute_s' and 'model_size_mb' (or DL2 constants for a 'dl2:<name>' model)"
            )
        rack_ratio = net.inter_rack_gbps / net.inter_node_gbps
        return (c.compute_s, c.model_size_mb, c.intra_bw_mbs, c.inter_bw_mbs, c.inter_bw_mbs * rack_ratio)

    # ------------------------------------------------------------------ rate
    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        if alloc.num_workers == 0 or alloc.num_ps == 0:
            return 0.0
        params = self.params(spec, cluster)
        racks = cluster.rack[list(alloc.nodes)].tolist()
        # racks relabelled by first appearance: the rate depends on the shape, not the rack ids
        relabel: dict[int, int] = {}
        shape = tuple((relabel.setdefault(r, len(relabel)), w, p) for r, w, p in zip(racks, alloc.workers, alloc.ps))
        key = (params, tuple(sorted(shape)))
        v = self._cache.get(key)
        if v is None:
            v = alloc.num_workers / self.max_iteration_time(params, key[1])
            self._cache[key] = v
        return v

    def max_iteration_time(self, params: Params, shape: tuple[tuple[int, int, int], ...]) -> float:
        """Slowest worker's step time for tasks laid out as (rack, workers, ps) per node."""
        compute, size, intra_bw, inter_bw, rack_bw = params
        P = sum(p for _, _, p in shape)
        W = sum(w for _, w, _ in shape)
        shard = 2.0 * size / P
        ps_rack: dict[int, int] = {}
        w_rack: dict[int, int] = {}
        for r, w, p in shape:
            ps_rack[r] = ps_rack.get(r, 0) + p
            w_rack[r] = w_rack.get(r, 0) + w
        # PS side: the bandwidth a PS node can give each remote worker, per PS node
        ps_side: list[tuple[int, float]] = []  # (index of PS node, per-flow bandwidth)
        for i, (r, w, p) in enumerate(shape):
            if p == 0:
                continue
            remote = W - w
            if remote == 0:
                continue
            bw = inter_bw / remote
            cross = W - w_rack[r]
            if cross > 0:
                bw = min(bw, rack_bw / cross)
            ps_side.append((i, bw))
        if self.dl2_exact:
            return self._dl2_exact(compute, shard, intra_bw, inter_bw, shape, P, W)
        worst = 0.0
        for i, (r, w, p) in enumerate(shape):
            if w == 0:
                continue
            intra = shard / (intra_bw / max(p, w)) if p > 0 else 0.0
            remote = P - p
            inter = 0.0
            if remote > 0:
                bw = inter_bw / remote
                cross = P - ps_rack[r]
                if cross > 0:
                    bw = min(bw, rack_bw / cross)
                bw = min([bw] + [b for j, b in ps_side if j != i])
                inter = shard / bw
            worst = max(worst, compute + max(inter, intra))
        return worst

    @staticmethod
    def _dl2_exact(compute: float, shard: float, intra_bw: float, inter_bw: float,
                   shape: tuple[tuple[int, int, int], ...], P: int, W: int) -> float:
        """DL2's job.py formula verbatim in behaviour: both transfers always charged, no racks."""
        min_local_w = min(w for _, w, p in shape if p > 0)
        worst = 0.0
        for _, w, p in shape:
            if w == 0:
                continue
            eff_intra = intra_bw / max(p, w)
            if p == P:
                side = inter_bw
            else:
                side = min(inter_bw / (P - p), inter_bw / (W - min_local_w))
            worst = max(worst, compute + max(shard / side, shard / eff_intra))
        return worst

