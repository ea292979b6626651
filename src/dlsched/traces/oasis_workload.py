"""OASiS' simulation setup (Sec. V-A): its cluster, its job-parameter ranges and its utility mix.

Where the paper is silent or self-contradictory we choose, and say so here (and in docs/OASIS.md):

- **Pools.** The text puts workers on EC2 C4 (no GPU) and PSs on P2/G3 (GPU) although its model
  gives workers the GPUs; we follow the model: 50 worker servers drawn from p2.8xlarge / g3.16xlarge
  shapes, 50 PS servers c4.8xlarge. PS servers have no GPU, which is how OASiS tells the pools apart
  (`policies.oasis`, pools="split").
- **Worker GPUs** are 1..4, not 0..4, so that a worker can never land on a PS server under the core
  placements the baselines use (the Cluster has no pool notion).
- **tau** is read in seconds, not slots. Read as [0.001, 0.1] *slots* of one-hour slots, with the
  paper's E, N, M ranges the median job would need over 300 slots even at its maximum parallelism,
  so no job could meet a 1-15-slot target, contradicting Fig. 4. In seconds the communication term
  2e/b dominates (0.1..92 s per mini-batch) and jobs need from minutes to hundreds of hours. `work_scale`
  multiplies every job's epoch count if a different load is wanted (default 1, the paper's ranges).
- **Arrivals** follow the Google pattern from DL2's constants (75 slots), stretched over the first
  `arrival_slots` slots of the horizon (the paper does not say over how long).
- **NIC bandwidth** is only used through the PS/worker bandwidth coupling (constraint (6)), not as a
  fourth capacity: the core Cluster has three resources.
- FIFO/RRH's fixed worker count is drawn from [1, 30] (capped at N); its PS count is the fewest that
  carry the workers' bandwidth, ceil(w b / B).
"""

from __future__ import annotations

import math

import numpy as np

from dlsched.core.cluster import Cluster, Network
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.core.utility import UtilityClass, sample_utility
from dlsched.throughput.oasis_model import MODEL_KEY, minibatch_seconds

#: (gpu, vCPU, GiB) server shapes (EC2 p2.8xlarge, g3.16xlarge, c4.8xlarge)
WORKER_SHAPES = ((8.0, 32.0, 488.0), (4.0, 64.0, 488.0))
PS_SHAPE = (0.0, 36.0, 60.0)

PAPER_MIX = (0.10, 0.55, 0.35)  # insensitive, sensitive, critical
CLASSES = (UtilityClass.INSENSITIVE, UtilityClass.SENSITIVE, UtilityClass.CRITICAL)


def paper_cluster(worker_servers: int = 50, ps_servers: int = 50, seed: int = 0, shared: bool = False) -> Cluster:
    """50 GPU worker servers + 50 CPU PS servers; `shared=True` gives one pool of GPU servers (Kubernetes)."""
    if worker_servers <= 0 or (ps_servers <= 0 and not shared):
        raise ConfigError("the OASiS cluster needs at least one worker server and one PS server")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(WORKER_SHAPES), size=worker_servers)
    caps = [WORKER_SHAPES[i] for i in picks]
    types = ["p2" if i == 0 else "g3" for i in picks]
    if not shared:
        caps += [PS_SHAPE] * ps_servers
        types += [""] * ps_servers
    n = len(caps)
    return Cluster(
        name="oasis-ec2" + ("-shared" if shared else ""),
        capacity=np.array(caps, dtype=float),
        gpu_type=np.array(types, dtype=object),
        rack=np.zeros(n, dtype=int),
        speed=np.ones(n),
        node_names=tuple(f"{'w' if i < worker_servers else 'ps'}{i:03d}" for i in range(n)),
        network=Network(),
    )


def google_arrival_slots(n: int, arrival_slots: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival slot of each of `n` jobs, distributed like the Google trace's 75-slot pattern."""
    from dlsched.traces.dl2 import load_constants

    table = load_constants()["google_trace_arrival_patterns_75_slots_by_max_arrivals_per_slot"]
    pattern = np.asarray(table[max(table, key=int)], dtype=float)
    if pattern.sum() <= 0:
        raise ConfigError("the Google arrival pattern is all zeros")
    k = rng.choice(len(pattern), size=n, p=pattern / pattern.sum())
    width = arrival_slots / len(pattern)
    slots = np.floor((k + rng.uniform(0, 1, size=n)) * width).astype(int)
    return np.sort(np.clip(slots, 0, arrival_slots - 1))


def oasis_workload(
    num_jobs: int,
    seed: int = 0,
    slot_seconds: float = 3600.0,
    arrival_slots: int = 200,
    mix: tuple[float, float, float] = PAPER_MIX,
    work_scale: float = 1.0,
) -> list[JobSpec]:
    """`num_jobs` jobs with the paper's parameter ranges (see the module docstring for choices)."""
    if num_jobs <= 0:
        raise ConfigError(f"num_jobs must be > 0, got {num_jobs}")
    if arrival_slots <= 0 or slot_seconds <= 0 or work_scale <= 0:
        raise ConfigError("arrival_slots, slot_seconds and work_scale must be > 0")
    m = np.asarray(mix, dtype=float)
    if m.shape != (3,) or (m < 0).any() or m.sum() <= 0:
        raise ConfigError(f"utility mix must be three non-negative shares, got {mix}")
    rng = np.random.default_rng(seed)
    arrivals = google_arrival_slots(num_jobs, arrival_slots, rng)
    classes = rng.choice(3, size=num_jobs, p=m / m.sum())
    jobs = []
    for i in range(num_jobs):
        epochs = max(1, int(round(rng.integers(50, 201) * work_scale)))
        chunks = int(rng.integers(5, 101))
        extra = {
            "epochs": epochs,
            "chunks": chunks,
            "minibatches": int(rng.integers(10, 101)),
            "tau_s": float(rng.uniform(0.001, 0.1)),
            "grad_mb": float(rng.uniform(30, 575)),
            "worker_gbps": float(rng.uniform(0.1, 5.0)),
            "ps_gbps": float(rng.uniform(5.0, 20.0)),
        }
        cls = CLASSES[int(classes[i])]
        extra["utility_class"] = cls.value
        wd = (float(rng.integers(1, 5)), float(rng.integers(1, 11)), float(rng.integers(2, 33)))
        pd_ = (0.0, float(rng.integers(1, 11)), float(rng.integers(2, 33)))
        fixed = int(min(chunks, rng.integers(1, 31)))
        ps = max(1, min(fixed, math.ceil(fixed * extra["worker_gbps"] / extra["ps_gbps"])))
        extra["minibatch_s"] = minibatch_seconds(extra)
        jobs.append(
            JobSpec(
                job_id=f"oasis-{i:04d}",
                submit_time=float(arrivals[i]) * slot_seconds,
                iterations=float(epochs * chunks * extra["minibatches"]),
                num_workers=fixed,
                min_workers=1,
                max_workers=chunks,
                arch="ps",
                num_ps=ps,
                min_ps=1,
                max_ps=chunks,
                model=MODEL_KEY,
                worker_demand=wd,
                ps_demand=pd_,
                work_known=True,
                utility=sample_utility(rng, cls, slot_seconds),
                extra=extra,
            )
        )
    return jobs
