"""A DRAGON-like workload: TensorFlow parameter-server jobs with min/max worker instances.

DRAGON (Lin, Yeh, Chou; CLOSER 2019) ran distributed TensorFlow PS jobs on a small Kubernetes
testbed; its job mix and cluster size are not public (research notes, section 5). What we build,
and why each choice:
- models: the 8 DL2 models (ResNet-50, VGG-16, ResNeXt-110, Inception-BN, Seq2Seq, CNN text
  classification, DSSM, WLM) with DL2's per-model compute time, model size and measured
  intra-/inter-server bandwidths, so the analytic PS throughput model (`dl2="analytic"`) makes
  cross-node traffic cost what it cost on DL2's testbed;
- every worker asks for 1 GPU, 2 CPUs and 8 GiB; every PS for 2 CPUs and 8 GiB (a TensorFlow
  GPU worker and a CPU parameter server, as tf-operator jobs declare them);
- 1 PS (70%) or 2 PSs (30%), fixed for the job's life (DRAGON scales workers only);
- requested workers 2, 4, 6 or 8 (uniform); `min-instances` = half of that (at least 1),
  `max-instances` = twice that, capped at 12;
- work: a job would run `duration` seconds, drawn uniformly from 10–40 minutes, at its requested
  size with every task on one node (a reference speed; the simulator charges the real placement);
- Poisson arrivals, one every `mean_interarrival_s` (90 s) on average, so jobs overlap and the
  default 8 × 4-GPU testbed is oversubscribed at times and idle at others: the regime where
  gang scheduling, locality and load-aware scaling each matter.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.throughput.dl2_constants import load_dl2_constants
from dlsched.throughput.parameter_server import ParameterServerModel
from dlsched.traces.dl2 import ATTRIBUTION, constants_path
from dlsched.traces.workload import Workload

WORKER_DEMAND = (1.0, 2.0, 8.0)
PS_DEMAND = (0.0, 2.0, 8.0)
REQUESTED_WORKERS = (2, 4, 6, 8)
MAX_INSTANCES_CAP = 12


def dragon_workload(
    num_jobs: int = 40,
    seed: int = 0,
    *,
    mean_interarrival_s: float = 90.0,
    duration_range_s: tuple[float, float] = (600.0, 2400.0),
    two_ps_fraction: float = 0.3,
    constants: str | Path | None = None,
) -> Workload:
    """`num_jobs` TensorFlow-PS-like jobs; see the module docstring for every choice."""
    if num_jobs < 1:
        raise ConfigError(f"dragon workload: num_jobs must be >= 1, got {num_jobs}")
    if not mean_interarrival_s > 0:
        raise ConfigError("dragon workload: mean_interarrival_s must be > 0")
    lo, hi = duration_range_s
    if not 0 < lo <= hi:
        raise ConfigError(f"dragon workload: need 0 < min duration <= max duration, got {duration_range_s}")
    if not 0 <= two_ps_fraction <= 1:
        raise ConfigError("dragon workload: two_ps_fraction must be within [0, 1]")
    path = constants_path(constants)
    table = load_dl2_constants(path)
    names = sorted(table)
    model = ParameterServerModel(table)
    probe = Cluster.homogeneous("probe", 1, gpus=64, cpus=256, mem=1024)

    rng = np.random.default_rng(seed)
    submit = np.concatenate([[0.0], np.cumsum(rng.exponential(mean_interarrival_s, num_jobs - 1))])
    picks = rng.integers(0, len(names), num_jobs)
    requested = rng.choice(REQUESTED_WORKERS, num_jobs)
    ps = np.where(rng.random(num_jobs) < two_ps_fraction, 2, 1)
    duration = rng.uniform(lo, hi, num_jobs)
    jobs = []
    for i in range(num_jobs):
        w, p = int(requested[i]), int(ps[i])
        name = "dl2:" + names[picks[i]]
        ref = JobSpec(job_id="ref", submit_time=0.0, iterations=1.0, num_workers=w, arch="ps", model=name, num_ps=p)
        speed = model.rate(ref, Allocation.single_node(0, w, p), probe)
        jobs.append(JobSpec(
            job_id=f"tf-{i + 1:03d}",
            submit_time=round(float(submit[i]), 3),
            iterations=max(1.0, round(float(duration[i]) * speed)),
            num_workers=w,
            min_workers=max(1, w // 2),
            max_workers=min(2 * w, MAX_INSTANCES_CAP),
            arch="ps",
            model=name,
            num_ps=p,
            min_ps=p,
            max_ps=p,
            worker_demand=WORKER_DEMAND,
            ps_demand=PS_DEMAND,
            extra={"reference_duration_s": round(float(duration[i]), 1)},
        ))
    return Workload(
        name="dragon-tf-ps",
        jobs=jobs,
        source=f"dlsched DRAGON-like generator (seed {seed}, {mean_interarrival_s:g} s mean inter-arrival) on {path}",
        cluster="dragon",
        attribution=ATTRIBUTION,
        notes=["run with the analytic PS throughput model: default_throughput(root, dl2='analytic')"],
    )
