"""The engine's per-decision shortcuts give what the plain code they replaced gave.

Each shortcut (settle written out, best-node narrowing, the no-PS walk of `pack`, preemptions in
run order, the timeline's typed arrays, the frozen collector) is checked against a reference
written the slow, obvious way, or against the behaviour the simulator must keep.
"""

from __future__ import annotations

import gc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.core import Cluster, JobSpec
from dlsched.core.allocation import Allocation
from dlsched.core.plan import Plan
from dlsched.core.snapshot import Clock, JobState, JobStatus
from dlsched.framework import packing
from dlsched.framework.actions import Kind
from dlsched.framework.state import ClusterState
from dlsched.policies.fifo import fifo
from dlsched.sim.engine import Simulator
from dlsched.throughput.duration_only import DurationOnly


def _lexsort_best(free: np.ndarray, total: np.ndarray) -> int | None:
    """The best whole node as first written: a lexsort of (index, CPU left, GPU left)."""
    cand = np.flatnonzero((free + 1e-9 >= total).all(axis=1))
    if not len(cand):
        return None
    left = free[cand] - total
    return int(cand[np.lexsort((cand, left[:, 1], left[:, 0]))[0]])


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 10_000), size=st.sampled_from(["scan", "2-d", "columns"]))
def test_best_whole_node_is_the_lexsort_answer(seed, size):
    """All three paths: the plain-Python walk (up to SCAN nodes), 2-D passes, column by column."""
    rng = np.random.default_rng(seed)
    lo, hi = {"scan": (1, packing.SCAN), "2-d": (packing.SCAN + 1, packing.SMALL), "columns": (packing.SMALL + 1, packing.SMALL + 60)}[size]
    n = int(rng.integers(lo, hi + 1))
    free = rng.integers(0, 4, (n, 3)) * np.array([2.0, 8.0, 32.0])
    if seed % 3 == 0:
        free = free + rng.random((n, 3))  # fractional room: ties broken on CPU, then index
    total = rng.integers(0, 3, 3) * np.array([1.0, 4.0, 16.0])
    assert packing.best_whole_node(free, total) == _lexsort_best(free, total)
    assert packing.best_whole_node(free, tuple(total.tolist())) == _lexsort_best(free, total)  # pack passes a tuple


def _walk_with_counts(cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int) -> Allocation | None:
    """`pack`'s multi-node walk as first written (NumPy count vectors), for a job without PSs."""
    wd = np.asarray(spec.worker_demand)
    w_fit = packing.fit_count(free, wd)
    if int(np.minimum(w_fit, workers).sum()) < workers:
        return None
    rack_room = np.bincount(cluster.rack, weights=np.minimum(w_fit, workers))
    order = np.flatnonzero(w_fit > 0)
    order = order[np.lexsort((order, -w_fit[order], -rack_room[cluster.rack[order]]))]
    counts, left = np.zeros(len(w_fit), dtype=np.int64), workers
    for n in order:
        if left == 0:
            break
        k = int(min(w_fit[n], left))
        counts[n], left = k, left - k
    return Allocation.from_counts(counts) if not left else None


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10_000), workers=st.integers(2, 40))
def test_pack_without_ps_walks_like_the_count_vectors(seed, workers):
    rng = np.random.default_rng(seed)
    cluster = Cluster.homogeneous("t", int(rng.integers(2, 30)), 8, 48, 384, nodes_per_rack=int(rng.integers(1, 5)))
    free = rng.integers(0, 9, (cluster.num_nodes, 1)) * np.array([1.0, 6.0, 48.0])
    spec = JobSpec("j", 0.0, 10.0, num_workers=workers, worker_demand=(1.0, 4.0, 16.0))
    got = packing.pack(cluster, free, spec, workers, 0)
    total = np.array(spec.worker_demand) * workers
    single = packing.best_whole_node(free, total)
    want = Allocation.single_node(single, workers) if single is not None else _walk_with_counts(cluster, free, spec, workers)
    assert got == want


@settings(max_examples=300, deadline=None)
@given(status=st.sampled_from([JobStatus.RUNNING, JobStatus.PENDING, JobStatus.DONE]),
       last=st.floats(0, 100), resume=st.floats(0, 150), now=st.floats(0, 200), rate=st.floats(0, 5),
       progress=st.floats(0, 400), held=st.booleans())
def test_settle_folds_what_the_properties_read(status, last, resume, now, rate, progress, held):
    clock = Clock(now)
    js = JobState(spec=JobSpec("j", 0.0, 500.0), index=0, clock=clock, status=status, rate=rate,
                  last_update=last, resume_at=resume, alloc_gpus=2.0, alloc_nodes=1, held_gpus=1.0,
                  held=Allocation.single_node(0, 1) if held else None)
    js._progress, js._attained, js._run_time, js._waited = progress, 7.0, 3.0, 5.0
    want = (js.progress, js.attained_service, js.run_time, js.held_gpu_seconds, js.node_seconds, js.waited)
    js.settle(now)
    assert (js._progress, js._attained, js._run_time, js._held_gpu_seconds, js._node_seconds, js._waited) == want
    assert js.last_update == now


def test_preemptions_come_in_the_order_jobs_started_running():
    cluster = Cluster.homogeneous("t", 8, 8, 48, 384)
    state = ClusterState(cluster)
    jobs = [JobState(spec=JobSpec(f"j{i}", 0.0, 10.0), index=i, clock=state.clock) for i in range(5)]
    for js in jobs:
        state.arrive(js, 0.0)
    for i in (3, 0, 4, 1):
        state.start(jobs[i], Allocation.single_node(i, 1), 0.0)
    state.stop(jobs[0], 1.0)
    state.start(jobs[0], Allocation.single_node(0, 1), 2.0)  # restarted: now the last to have started
    plan = Plan(allocations={}, keep_running=True, preempt={"j0", "j1", "j3", "j4"})
    stops = [a.job_id for a in state.diff(plan, 3.0, "test") if a.kind is Kind.STOP]
    assert stops == [jid for jid in state.running if jid in plan.preempt] == ["j3", "j4", "j1", "j0"]


def test_a_run_leaves_the_collector_as_it_found_it():
    cluster = Cluster.homogeneous("t", 2, 8, 48, 384)
    jobs = [JobSpec(f"j{i}", float(i), 10.0, num_workers=2) for i in range(6)]
    before = gc.get_freeze_count()
    result = Simulator(cluster, DurationOnly(), fifo()).run(jobs)
    assert gc.get_freeze_count() == before
    assert result.summary["finished"] == 6
    steps = Simulator(cluster, DurationOnly(), fifo()).steps(jobs)
    next(steps)
    assert gc.get_freeze_count() > 0  # frozen while the run is under way
    steps.close()
    assert gc.get_freeze_count() == before
