"""OASiS' model of training speed (Sec. III), so that its plans and the simulator agree.

Why a separate model: OASiS reasons in worker-slots. Asynchronous PS training makes every worker
process one mini-batch every tau + 2e/b seconds (compute, then push and pull of the e-MB gradient
over the worker's reserved bandwidth b), independently of the other workers, as long as the PSs'
total bandwidth covers the workers' (constraint (6): sum(y) b <= sum(z) B). So a job's rate is
linear in its worker count, which is exactly what OASiS' DP assumes. When the PSs cannot carry the
workers' traffic, only the share they can carry makes progress (sum(z) B / b workers' worth).

One iteration is one mini-batch; a job has E N M of them (E epochs over N chunks of M mini-batches).
Parameters live in `spec.extra` under the names in `PARAMS`.
"""

from __future__ import annotations

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.throughput.base import ThroughputModel

MODEL_KEY = "oasis:ps"

#: extra keys: epochs E, chunks N, mini-batches per chunk M, compute s/mini-batch tau,
#: gradient MB e, worker bandwidth b (Gbps), PS bandwidth B (Gbps)
PARAMS = ("epochs", "chunks", "minibatches", "tau_s", "grad_mb", "worker_gbps", "ps_gbps")


def minibatch_seconds(extra: dict) -> float:
    """tau + 2e/b: one mini-batch of one worker, in seconds (1 Gbit = 125 MB)."""
    return float(extra["tau_s"]) + 2.0 * float(extra["grad_mb"]) * 8.0 / 1000.0 / float(extra["worker_gbps"])


class OASiSModel(ThroughputModel):
    """Mini-batches per second of an async PS job: effective workers / (tau + 2e/b)."""

    name = "oasis-ps"

    def supports(self, spec: JobSpec) -> bool:
        return spec.model == MODEL_KEY

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        ex = spec.extra
        y, z = alloc.num_workers, alloc.num_ps
        if y == 0 or z == 0:
            return 0.0
        effective = min(float(y), z * float(ex["ps_gbps"]) / float(ex["worker_gbps"]))
        return effective / minibatch_seconds(ex)
