"""A deadline workload like the QoS framework's evaluation (Xing et al., IJCNN 2019), on CPUs.

Why synthetic: the paper's jobs (TensorFlow LSTM, GAN and autoencoder, parameter-server, CPU-only
Kubernetes) were never released as a trace; only the prototype's constants are known
(`ksdl`, see ../shared/research/seed-systems.md section 4). What is taken from the prototype:

- total steps 10,000 (LSTM), 100,000 (GAN), 30,000 (autoencoder), known to the framework
  (`work_known=True`: the prototype reads `total_steps` from the job);
- every job starts with 1 PS and 1 worker; worker caps 32 / 9 / 12;
- pods request 2 CPUs (2000m) and ~1 GiB; relative deadlines D = 600 + 40·i s, i = 0..30;
- min_predict_step 200 / 500 / 300 and c = 1.09 / 1 / 1 (in `extra`, read by the autoscaler);
- vertical PS scaling: GAN PS CPU 2000m at <= 4 workers, 4000m at 5-8, 6000m at 9-14, 8000m
  above; autoencoder 4000m above 7 workers. Our JobSpec has one fixed PS pod shape, so a PS CPU
  step of 2000m is one more PS pod of 2 CPUs (`extra["ps_steps"]`): the analytic PS model then
  shards the parameters over more PS tasks, which is what extra PS CPU buys a TensorFlow PS.

Ours (stated, chosen before any policy was run, not tuned to a result): per-step compute and
model sizes such that one worker needs roughly 2,000 s for every type (longer than every deadline
but the loosest, so a job given only a deadline really needs the framework to size it) and the
capped size finishes well inside 600 s on an empty cluster (so every deadline is feasible alone).
`dlsched.experiments.qos` prints both figures for the actual throughput model. Arrivals are a
Poisson process (the prototype ran one job at a time; the issue's multi-job comparison needs a
queue), types uniform, deadlines uniform over the 31 prototype values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlsched.core.cluster import Cluster, Network
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.traces.workload import Workload

POD = (0.0, 2.0, 1.0)  # gpu, cpu, mem GiB: the prototype's 2000m / ~1 GiB pods


@dataclass(frozen=True)
class QoSJobType:
    """One of the paper's three job kinds, with the prototype's constants and our speed figures."""

    name: str
    total_steps: int
    max_workers: int
    min_predict_steps: int
    c: float  # the scaling rule's calibration constant
    compute_s: float  # seconds of compute per step on one worker (ours)
    model_size_mb: float  # parameters pushed and pulled per step (ours)
    ps_steps: tuple[tuple[int, int], ...] = ()  # (up to this many workers, PS pods)


JOB_TYPES: dict[str, QoSJobType] = {
    "lstm": QoSJobType("lstm", 10_000, 32, 200, 1.09, compute_s=0.19, model_size_mb=4.0),
    "gan": QoSJobType(
        "gan", 100_000, 9, 500, 1.0, compute_s=0.019, model_size_mb=1.0,
        ps_steps=((4, 1), (8, 2), (14, 3), (10**9, 4)),
    ),
    "autoencoder": QoSJobType(
        "autoencoder", 30_000, 12, 300, 1.0, compute_s=0.064, model_size_mb=2.0,
        ps_steps=((7, 1), (10**9, 2)),
    ),
}

DEADLINES = tuple(600.0 + 40.0 * i for i in range(31))  # the prototype's D values, seconds


def qos_job(
    job_id: str, submit: float, relative_deadline: float, kind: str = "lstm", *, work_known: bool = True
) -> JobSpec:
    """A job submitted with only a deadline: the framework chooses its size.

    It asks for the prototype's default (1 PS + 1 worker) and allows up to the type's cap;
    `extra["size_by"] = "deadline"` says the user gave no size, so a size-picking policy may start
    it at any size in range while rigid baselines run it at the default.
    """
    if kind not in JOB_TYPES:
        raise ConfigError(f"unknown QoS job type {kind!r}; known: {', '.join(JOB_TYPES)}")
    if not relative_deadline > 0:
        raise ConfigError(f"job {job_id!r}: the deadline must be > 0 s after submission")
    t = JOB_TYPES[kind]
    max_ps = max((p for _, p in t.ps_steps), default=1)
    return JobSpec(
        job_id=job_id, submit_time=float(submit), iterations=float(t.total_steps), num_workers=1,
        arch="ps", model=f"ps:qos-{kind}", worker_demand=POD, ps_demand=POD, min_workers=1,
        max_workers=t.max_workers, num_ps=1, min_ps=1, max_ps=max_ps, work_known=work_known,
        deadline=float(submit) + float(relative_deadline),
        extra={
            "compute_s": t.compute_s, "model_size_mb": t.model_size_mb, "size_by": "deadline",
            "min_predict_steps": t.min_predict_steps, "scale_c": t.c,
            "ps_steps": [list(s) for s in t.ps_steps], "qos_type": kind,
        },
    )


def qos_workload(
    num_jobs: int = 60, mean_interarrival: float = 120.0, seed: int = 0, kinds: tuple[str, ...] = tuple(JOB_TYPES)
) -> Workload:
    """`num_jobs` deadline-only jobs, Poisson arrivals, types and deadlines drawn uniformly."""
    if num_jobs < 1:
        raise ConfigError(f"qos workload: num_jobs must be >= 1, got {num_jobs}")
    if not mean_interarrival > 0:
        raise ConfigError(f"qos workload: mean_interarrival must be > 0 s, got {mean_interarrival}")
    bad = [k for k in kinds if k not in JOB_TYPES]
    if bad or not kinds:
        raise ConfigError(f"qos workload: unknown job types {bad}; known: {', '.join(JOB_TYPES)}")
    rng = np.random.default_rng(seed)
    submits = np.cumsum(rng.exponential(mean_interarrival, num_jobs))
    submits -= submits[0]
    types = rng.choice(list(kinds), size=num_jobs)
    deadlines = rng.choice(DEADLINES, size=num_jobs)
    jobs = [qos_job(f"qos{i:04d}-{k}", float(s), float(d), str(k)) for i, (s, k, d) in enumerate(zip(submits, types, deadlines))]
    return Workload(
        name=f"qos-synthetic-{num_jobs}-s{seed}", jobs=jobs, source="dlsched.traces.qos_synthetic",
        cluster="", notes=["synthetic LSTM/GAN/autoencoder-like deadline jobs (QoS framework, IJCNN'19)"],
    )


def qos_cluster(nodes: int, cpus: float = 8.0, mem: float = 32.0) -> Cluster:
    """A CPU-only Kubernetes-like cluster: `nodes` nodes of `cpus` CPUs, 10 GbE between nodes."""
    if nodes < 1:
        raise ConfigError(f"qos cluster: nodes must be >= 1, got {nodes}")
    return Cluster.homogeneous(
        f"qos-cpu-{nodes}x{cpus:g}", nodes=nodes, gpus=0, cpus=cpus, mem=mem, gpu_type="",
        network=Network(intra_node_gbps=10.0, inter_node_gbps=1.25, inter_rack_gbps=1.25),
    )
