"""Node scores (framework/scoring.py), the task-by-task placer, and the one pod-by-pod binder."""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.core import Cluster, JobSpec
from dlsched.core.allocation import Allocation
from dlsched.core.cluster import CPU, GPU, MEM
from dlsched.core.snapshot import Clock, JobState, JobStatus, Snapshot
from dlsched.core.errors import ConfigError
from dlsched.policies.kube_default import kube_default
from dlsched.policies.phases.gang import bind_pods
from dlsched.policies.phases.placement import LeastLoaded, Spread
from dlsched.framework.scoring import best_node, least_allocated, least_loaded
from dlsched.policies.phases.sizing import ps_for

# three nodes (gpu, cpu, mem); node 2 has no memory at all
CAP = np.array([[4.0, 16.0, 64.0], [4.0, 8.0, 32.0], [2.0, 16.0, 0.0]])
FREE = np.array([[2.0, 8.0, 32.0], [4.0, 4.0, 16.0], [2.0, 12.0, 0.0]])
DEMAND = np.array([1.0, 2.0, 8.0])


def test_least_allocated_is_kubes_mean_free_fraction_after_placing_skipping_zero_capacity():
    # cpu (8-2)/16, mem (32-8)/64 | cpu (4-2)/8, mem (16-8)/32 | cpu (12-2)/16, mem left out
    assert least_allocated(FREE, CAP, DEMAND) == pytest.approx([0.375, 0.25, 0.625])
    # before placing: 8/16, 32/64 | 4/8, 16/32 | 12/16
    assert least_allocated(FREE, CAP, DEMAND, after=False) == pytest.approx([0.5, 0.5, 0.75])
    # GPUs scored too: (.25+.375+.375)/3 | (.75+.25+.25)/3 | (.5+.625)/2
    got = least_allocated(FREE, CAP, DEMAND, resources=(GPU, CPU, MEM))
    assert got == pytest.approx([1.0 / 3, 1.25 / 3, 0.5625])
    # a node with none of the scored resources scores 0
    assert least_allocated(np.zeros((1, 3)), np.zeros((1, 3)), DEMAND).tolist() == [0.0]


def test_least_loaded_is_minus_the_used_resources():
    # used: 2+8+32 | 0+4+16 | 0+4+0
    assert least_loaded(FREE, CAP, DEMAND).tolist() == [-42.0, -20.0, -4.0]


def test_best_node_filters_then_scores_with_masks_and_preferences():
    # node 2 has no memory for the task: only nodes 0 and 1 fit
    assert best_node(FREE, CAP, DEMAND, least_allocated) == 0
    assert best_node(FREE, CAP, DEMAND, least_loaded) == 1
    assert best_node(FREE, CAP, DEMAND, least_allocated, allowed=np.array([False, True, True])) == 1
    assert best_node(FREE, CAP, DEMAND, least_allocated, prefer=np.array([False, True, False])) == 1
    # a preferred node that does not fit is no preference at all
    assert best_node(FREE, CAP, DEMAND, least_allocated, prefer=np.array([False, False, True])) == 0
    assert best_node(FREE, CAP, np.array([5.0, 0.0, 0.0]), least_loaded) == -1


def ps_spec(job_id: str = "a", w: int = 3, ps: int = 1, submit: float = 0.0) -> JobSpec:
    return JobSpec(job_id=job_id, submit_time=submit, iterations=10.0, num_workers=w, min_workers=w,
                   max_workers=w, arch="ps", model="ps:test", num_ps=ps, min_ps=ps, max_ps=ps,
                   worker_demand=(1.0, 2.0, 8.0), ps_demand=(0.0, 4.0, 8.0))


def test_task_by_task_places_everything_or_nothing_and_leaves_free_alone():
    c = Cluster.homogeneous("t", nodes=3, gpus=4, cpus=16, mem=64)
    free = c.capacity.copy()
    free[0] = [1.0, 4.0, 16.0]  # node 0 is busy
    before = free.copy()
    a = Spread().place(c, free, ps_spec(w=3), 3, 1)
    # PS to node 1 (ties: lowest index); then workers by CPU/mem after placing: 2, 1, 2
    assert a == Allocation.of({1: (1, 1), 2: (2, 0)})
    assert (free == before).all()
    b = LeastLoaded().place(c, free, ps_spec(w=3), 3, 1)
    assert b == Allocation.of({1: (1, 1), 2: (2, 0)})
    assert Spread().place(c, free, ps_spec(w=20), 20, 1) is None


def test_kube_default_and_dragon_pod_by_pod_bind_identically():
    """Both go through TaskByTask.bind: kube-default's round equals bind_pods job after job."""
    c = Cluster.homogeneous("t", nodes=3, gpus=4, cpus=16, mem=64)
    free = c.capacity.copy()
    free[1] = [2.0, 6.0, 24.0]
    specs = [ps_spec("a", w=4, ps=1, submit=0.0), ps_spec("b", w=8, ps=2, submit=1.0)]
    clock = Clock(2.0)
    states = [JobState(spec=s, index=i, clock=clock, rank=i, status=JobStatus.PENDING) for i, s in enumerate(specs)]
    kube = kube_default(ties="lowest")  # bind_pods breaks ties by the lowest index
    kube.reset(c, 0)
    plan = kube.schedule(Snapshot(now=2.0, cluster=c, free=free.copy(), pending=states, running=[], restart_overhead=0.0))

    room = free.copy()
    want: dict[str, tuple[Allocation, bool]] = {}
    for s in specs:
        alloc, complete = bind_pods(c, room, s, None, s.num_workers, s.num_ps, local_first=False)
        want[s.job_id] = (alloc, complete)
        np.subtract.at(room, list(alloc.nodes), alloc.usage(np.asarray(s.worker_demand), np.asarray(s.ps_demand)))
    assert want["a"][1] and not want["b"][1]  # the case covers a complete and a held job
    assert plan.allocations == {"a": want["a"][0]}
    assert plan.held == {"b": want["b"][0]}


def test_ps_for_is_the_one_ps_rule():
    s = JobSpec(job_id="p", submit_time=0.0, iterations=1.0, num_workers=4, min_workers=1, max_workers=8,
                arch="ps", model="ps:test", num_ps=2, min_ps=1, max_ps=3,
                worker_demand=(1.0, 1.0, 1.0), ps_demand=(0.0, 1.0, 1.0))
    assert [ps_for(s, w) for w in (1, 4, 8)] == [2, 2, 2]  # the requested count
    assert [ps_for(s, w, s.max_ps, per_worker=True) for w in (1, 2, 5)] == [1, 2, 3]  # DL2's bundles
    assert [ps_for(s, w, 2, per_worker=True) for w in (1, 3)] == [1, 2]  # shrinking a job asked with 2
    assert ps_for(s, 4, 0) == 1 and ps_for(s, 4, 9) == 3  # always within [min_ps, max_ps]
    steps = JobSpec(job_id="q", submit_time=0.0, iterations=1.0, num_workers=4, min_workers=1, max_workers=8,
                    arch="ps", model="ps:test", num_ps=1, min_ps=1, max_ps=3, extra={"ps_steps": [[4, 1], [8, 2]]},
                    worker_demand=(1.0, 1.0, 1.0), ps_demand=(0.0, 1.0, 1.0))
    assert [ps_for(steps, w) for w in (4, 5, 9)] == [1, 2, 2]
    ring = JobSpec(job_id="r", submit_time=0.0, iterations=1.0, num_workers=2, worker_demand=(1.0, 1.0, 1.0))
    assert ps_for(ring, 2) == 0 and ps_for(ring, 2, 3, per_worker=True) == 0


def test_kube_default_breaks_ties_at_random_like_kube_scheduler_and_reproducibly():
    """On an empty cluster every node ties: `ties="lowest"` always takes node 0, the default draws
    a tied node from the run's seed (kube-scheduler's selectHost), the same one for the same seed."""
    c = Cluster.homogeneous("t", nodes=16, gpus=8, cpus=64, mem=512)
    spec = ps_spec("a", w=1, ps=1, submit=0.0)

    def node(seed: int, ties: str) -> int:
        kube = kube_default(ties=ties)
        kube.reset(c, seed)
        state = JobState(spec=spec, index=0, clock=Clock(0.0), rank=0, status=JobStatus.PENDING)
        plan = kube.schedule(Snapshot(now=0.0, cluster=c, free=c.capacity.copy(), pending=[state], running=[],
                                      restart_overhead=0.0))
        return next(iter(plan.allocations["a"].nodes))

    assert {node(s, "lowest") for s in range(8)} == {0}
    drawn = [node(s, "random") for s in range(8)]
    assert len(set(drawn)) > 1 and drawn == [node(s, "random") for s in range(8)]
    with pytest.raises(ConfigError, match="ties"):
        kube_default(ties="first")
