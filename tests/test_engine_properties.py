"""Property tests of the engine over random clusters, workloads and policies.

The invariants: no node is ever over-allocated, no work is created or lost, every job ends
(done, or rejected/unfinished with a reason), and a run is a pure function of its seed.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.core import Cluster, JobSpec, Policy
from dlsched.core.job import Architecture
from dlsched.core.policy import Wrapper
from dlsched.policies.phased import PhasedPolicy
from dlsched.policies.fifo import fifo
from dlsched.policies.phases.placement import LeastLoaded, Pack, Spread, pack
from dlsched.policies.phases.sizing import Requested, ps_for
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.duration_only import DurationOnly


class RandomOrder:
    """An ordering that shuffles with the snapshot's seeded RNG: exercises preemption and resizes."""

    def order(self, snap, jobs):
        idx = snap.rng.permutation(len(jobs))
        return [jobs[i] for i in idx]


class RandomSize:
    """Elastic jobs get a random size in [min, max]: exercises resize restarts."""

    def size(self, snap, jobs):
        out = []
        for j in jobs:
            w = int(snap.rng.integers(j.spec.min_workers, j.spec.max_workers + 1))
            out.append((j, w, ps_for(j.spec, w, j.spec.max_ps, per_worker=True)))
        return out


class Checked(Wrapper):
    """Wraps a policy and checks the snapshot it is shown: free resources never below zero."""

    def schedule(self, snap):
        assert (snap.free >= -1e-6).all(), "a node is over-allocated"
        for j in snap.running:
            assert 0 <= j.progress <= j.spec.iterations + 1e-6
        return self.inner.schedule(snap)


def random_policy(kind: str) -> Policy:
    placement = {"pack": Pack(), "spread": Spread(), "least": LeastLoaded()}
    if kind == "fifo":
        return fifo()
    if kind == "fifo-backfill":
        return fifo(backfill=True)
    place = placement[kind.split("-")[1]]
    return PhasedPolicy(None, RandomOrder(), RandomSize() if "elastic" in kind else Requested(),
                        place, name=kind, preempt="replan", shrink=True)


POLICY_KINDS = ["fifo", "fifo-backfill", "random-pack", "random-spread", "elastic-least", "elastic-pack"]


@st.composite
def scenario(draw):
    nodes = draw(st.integers(1, 6))
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    cluster = Cluster.homogeneous("h", nodes, gpus, 8 * gpus, 64 * gpus, nodes_per_rack=draw(st.integers(1, 3)))
    n = draw(st.integers(1, 25))
    jobs = []
    for i in range(n):
        arch = draw(st.sampled_from(["single", "allreduce", "ps"]))
        w = 1 if arch == "single" else draw(st.integers(1, 2 * gpus + 1))
        lo = w if arch == "single" else draw(st.integers(1, w))
        jobs.append(JobSpec(
            job_id=f"j{i}", submit_time=float(draw(st.integers(0, 500))),
            iterations=float(draw(st.integers(1, 400))), num_workers=w, min_workers=lo,
            max_workers=w, arch=arch, num_ps=1 if arch == "ps" else 0,
            worker_demand=(1.0, draw(st.sampled_from([1.0, 4.0])), 8.0), ps_demand=(0.0, 2.0, 4.0),
        ))
    return cluster, jobs, draw(st.sampled_from(POLICY_KINDS)), draw(st.integers(0, 3))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_engine_invariants(sc):
    cluster, jobs, kind, seed = sc
    cfg = SimConfig(seed=seed, restart_overhead=3.0)
    r = simulate(jobs, cluster, Checked(random_policy(kind)), DurationOnly(), cfg)
    t = r.jobs
    # every job ends, and a job that did not finish says why
    assert set(t.status) <= {"done", "rejected", "unfinished"}
    assert (t.loc[t.status != "done", "reason"].str.len() > 0).all()
    # no work created or lost: done jobs did exactly their work, others no more than it
    done = t[t.status == "done"]
    assert np.allclose(done.progress, done.iterations)
    assert (t.progress <= t.iterations + 1e-6).all()
    # a job at its requested size runs at 1 it/s, and no faster at any size below max, so it
    # cannot finish before (iterations / speedup(max)) seconds of running
    assert (done.end - done.start >= done.iterations / (np.maximum(done.gpus_requested, 1) ** 0.85) - 1e-6).all()
    # the utilization timeline never exceeds the cluster
    assert (r.timeline.used_gpus <= cluster.total_gpus + 1e-6).all()
    # rigid FIFO finishes every job whose requested size fits the empty cluster (a job whose
    # minimum fits but whose requested size does not waits: FIFO never shrinks a job)
    if kind.startswith("fifo"):
        for spec, status in zip(jobs, t.status):
            if pack(cluster, cluster.capacity, spec, spec.num_workers, spec.num_ps) is not None:
                assert status == "done", spec.job_id


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_same_seed_same_result(sc):
    cluster, jobs, kind, seed = sc
    cfg = SimConfig(seed=seed, restart_overhead=3.0)
    a = simulate(jobs, cluster, random_policy(kind), DurationOnly(), cfg)
    b = simulate(jobs, cluster, random_policy(kind), DurationOnly(), cfg)
    assert a.jobs.equals(b.jobs)
    assert a.timeline.equals(b.timeline)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    workers=st.sampled_from([1, 2, 3, 4, 8, 16]),
    ps=st.sampled_from([0, 0, 1, 3]),
    cpu=st.sampled_from([1.0, 2.5, 4.0]),
    fractional=st.booleans(),
)
def test_pack_same_answer_on_small_and_large_paths(seed, workers, ps, cpu, fractional):
    """`pack` walks the nodes in plain Python on small clusters (up to SCAN), takes 2-D passes up
    to SMALL and column-by-column ones above; all must place every job exactly alike (same nodes,
    same counts, same ties)."""
    from dlsched.framework import packing

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    cluster = Cluster.homogeneous("t", n, 8, 32, 256, nodes_per_rack=int(rng.integers(1, 6)))
    frac = rng.random(cluster.capacity.shape) if fractional else rng.integers(0, 3, cluster.capacity.shape) / 2
    free = np.floor(cluster.capacity * frac) if seed % 2 else cluster.capacity * frac
    spec = JobSpec("j", 0.0, 10.0, num_workers=workers, num_ps=ps, worker_demand=(1.0, cpu, 16.0),
                   arch=Architecture.PS if ps else Architecture.ALLREDUCE)
    small, saved = packing.pack(cluster, free, spec, workers, ps), (packing.SCAN, packing.SMALL)
    try:
        packing.SCAN = 0
        assert packing.pack(cluster, free, spec, workers, ps) == small  # 2-D passes
        packing.SMALL = 0
        assert packing.pack(cluster, free, spec, workers, ps) == small  # column by column
    finally:
        packing.SCAN, packing.SMALL = saved
