"""The heterogeneity placement baselines and the speed-aware placement they share.

A made-up cluster of two GPU types ("slow" nodes first, so index order and best fit would pick
them) and a made-up profile (a worker makes 1 it/s on "slow", 2 on "fast"; spanning nodes costs
10%), so what each placement knows decides where a job goes and how long it takes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import Clock, JobState, JobStatus, Snapshot
from dlsched.estimators.node_speeds import RunningMeanSpeeds
from dlsched.policies.hetero_random import RandomPlacement
from dlsched.policies.phases.placement import Pack
from dlsched.policies.phases.speed_aware import PATIENCE_S, SpeedAwarePlacement, SpeedEstimate, predicted_rate
from dlsched.policies.registry import HETERO_BASELINES, POLICIES, make_policy
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import NodeEvent, simulate
from dlsched.throughput.base import ThroughputModel

PER_WORKER = {"slow": 1.0, "fast": 2.0}


class TypeRate(ThroughputModel):
    """Per-worker rate of the slowest GPU type among the worker nodes; 10% less when spread."""

    name = "type-rate"

    def supports(self, spec: JobSpec) -> bool:
        return True

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        per = min(PER_WORKER.get(str(cluster.gpu_type[n]), 1.0) for n, w in zip(alloc.nodes, alloc.workers) if w)
        return per * alloc.num_workers * (0.9 if alloc.num_nodes > 1 else 1.0)


def hetero(slow: int = 2, fast: int = 2, gpus: int = 2, price: bool = False) -> Cluster:
    n = slow + fast
    types = ["slow"] * slow + ["fast"] * fast
    return Cluster(name="hetero", capacity=np.tile([float(gpus), 16.0, 64.0], (n, 1)),
                   gpu_type=np.array(types, dtype=object), rack=np.zeros(n, dtype=int), speed=np.ones(n),
                   node_names=tuple(f"n{i}" for i in range(n)),
                   price=np.array([1.0 if t == "slow" else 3.0 for t in types]) if price else None)


def job(i: int, workers: int = 1, t: float = 0.0, iters: float = 100.0, **kw) -> JobSpec:
    return JobSpec(job_id=f"j{i}", submit_time=t, iterations=iters, num_workers=workers, **kw)


def snap(cluster: Cluster, profile=None, now: float = 0.0, running=(), finished=()) -> Snapshot:
    return Snapshot(now, cluster, cluster.capacity.copy(), [], list(running), 0.0, profile=profile,
                    finished=tuple(finished))


def placed(p, cluster: Cluster, free: np.ndarray, spec: JobSpec, profile=TypeRate()) -> Allocation | None:
    if hasattr(p, "observe"):
        p.observe(snap(cluster, profile))
    before = free.copy()
    alloc = p.place(cluster, free, spec, spec.num_workers, spec.num_ps)
    assert np.array_equal(free, before), "place must not change free"
    return alloc


# --- SpeedAwarePlacement ----------------------------------------------------------------------


def test_a_job_goes_to_the_faster_type_where_type_blind_packing_does_not():
    c = hetero()
    spec = job(0)
    assert Pack().place(c, c.capacity.copy(), spec, 1, 0).nodes == (0,)  # the slow type: what is at stake
    alloc = placed(SpeedAwarePlacement(), c, c.capacity.copy(), spec)
    assert alloc.num_workers == 1 and alloc.nodes[0] in (2, 3)


def test_without_a_profile_every_node_scores_alike_and_the_job_is_consolidated_by_best_fit():
    c = hetero()
    free = c.capacity.copy()
    free[1, 0] = 1.0  # node 1 is the best fit of a 1-GPU job
    assert placed(SpeedAwarePlacement(), c, free, job(0), profile=None).nodes == (1,)


def test_a_multi_worker_job_never_spans_two_gpu_types():
    c = hetero()
    free = c.capacity.copy()
    free[2, 0], free[3, 0] = 1.0, 0.0  # fast: 1 GPU free; slow: 2 + 2
    a2 = placed(SpeedAwarePlacement(), c, free, job(0, workers=2))
    assert a2.nodes == (0,) and a2.workers == (2,)  # not the fast GPU + a slow one
    a4 = placed(SpeedAwarePlacement(), c, free, job(1, workers=4))
    assert a4.nodes == (0, 1) and a4.workers == (2, 2)
    free[3, 0] = 1.0  # fast: 1 + 1 free: two fast nodes (2 × 2 × 0.9 = 3.6 it/s) beat one slow (2)
    assert placed(SpeedAwarePlacement(), c, free, job(0, workers=2)).nodes == (2, 3)
    a4fast = placed(SpeedAwarePlacement(), c, c.capacity.copy(), job(2, workers=4))
    assert a4fast.nodes == (2, 3)  # with room, the fast type even across two nodes (7.2 > slow's 3.6)


def test_gpu_type_constraints_are_respected():
    c = hetero()
    alloc = placed(SpeedAwarePlacement(), c, c.capacity.copy(), job(0, workers=3, gpu_type="slow"))
    assert set(alloc.nodes) <= {0, 1} and alloc.num_workers == 3
    free = c.capacity.copy()
    free[:2, 0] = 0.0  # no slow GPU left
    assert placed(SpeedAwarePlacement(), c, free, job(1, gpu_type="slow")) is None
    assert placed(RandomPlacement(), c, free, job(1, gpu_type="slow")) is None


def test_parameter_servers_go_with_the_workers_and_count_in_the_slowest_node():
    c = hetero()
    spec = job(0, workers=2, arch="ps", num_ps=1)
    alloc = placed(SpeedAwarePlacement(), c, c.capacity.copy(), spec)
    assert alloc.num_workers == 2 and alloc.num_ps == 1 and set(alloc.nodes) <= {2, 3}
    slow_ps = Allocation((0, 2), (0, 2), (1, 0))
    f = np.array([0.5, 1.0, 1.0, 1.0])
    assert predicted_rate(TypeRate(), spec, slow_ps, c, f) == pytest.approx(2 * 2 * 0.9 * 0.5)


def test_per_dollar_prefers_the_type_with_more_iterations_per_usd():
    c = hetero(price=True)  # slow: 1 it/s for 1 USD/h; fast: 2 it/s for 3 USD/h
    assert placed(SpeedAwarePlacement(per_dollar=True), c, c.capacity.copy(), job(0)).nodes[0] in (0, 1)
    assert placed(SpeedAwarePlacement(per_dollar=False), c, c.capacity.copy(), job(0)).nodes[0] in (2, 3)


class Fixed:
    """A SpeedEstimate with given speeds."""

    def __init__(self, mean, sd):
        self.mean, self.sd = np.asarray(mean, float), np.asarray(sd, float)

    def observe(self, snap):
        pass

    def reset(self):
        pass

    def speeds(self, now, cluster):
        return self.mean, self.sd


def test_estimated_factors_and_risk_steer_the_choice():
    c = hetero(slow=0, fast=3)
    est = Fixed([0.6, 0.9, 0.95], [0.0, 0.0, 0.2])
    assert isinstance(est, SpeedEstimate)
    assert placed(SpeedAwarePlacement(estimate=est), c, c.capacity.copy(), job(0)).nodes == (2,)
    assert placed(SpeedAwarePlacement(estimate=est, risk=1.0), c, c.capacity.copy(), job(0)).nodes == (1,)
    # a 2-node job takes the two best nodes, not the slow one
    free = c.capacity.copy()
    free[:, 0] = 1.0
    assert placed(SpeedAwarePlacement(estimate=est), c, free, job(1, workers=2)).nodes == (1, 2)


# --- RunningMeanSpeeds ------------------------------------------------------------------------


def _running(spec: JobSpec, clock: Clock, started: float, speeds: dict[int, float]) -> JobState:
    js = JobState(spec=spec, index=0, clock=clock, status=JobStatus.RUNNING)
    js.last_start, js.node_speeds = started, dict(speeds)
    return js


def test_running_mean_speeds_time_weighted_by_hand():
    c = hetero(slow=0, fast=3)
    clock = Clock(0.0)
    est = RunningMeanSpeeds()
    a = _running(job(0, workers=2), clock, 0.0, {0: 0.5, 1: 1.0})
    est.observe(snap(c, now=0.0, running=[a]))  # the first call only starts the clock
    mean, sd = est.speeds(0.0, c)
    assert mean.tolist() == [1.0, 1.0, 1.0] and sd.tolist() == [0.1] * 3
    est.observe(snap(c, now=100.0, running=[a]))  # 100 s at 0.5 on node 0
    a.node_speeds = {0: 0.8, 1: 1.0}  # node 0 recovers partly
    est.observe(snap(c, now=400.0, running=[a]))  # 300 s at 0.8
    b = JobState(spec=job(1), index=1, clock=clock, status=JobStatus.DONE)
    b.last_start, b.end_time, b.node_speeds = 420.0, 450.0, {2: 0.6}
    est.observe(snap(c, now=500.0, finished=[b]))  # a finished job counts for the 30 s it ran
    mean, sd = est.speeds(500.0, c)
    assert mean == pytest.approx([(0.5 * 100 + 0.8 * 300) / 400, 1.0, 0.6])
    assert sd == pytest.approx([0.1 / math.sqrt(3), 0.1 / math.sqrt(3), 0.1 / math.sqrt(2)])
    est.reset()
    assert est.speeds(500.0, c)[0].tolist() == [1.0, 1.0, 1.0]


def test_running_mean_speeds_half_life_forgets():
    c = hetero(slow=0, fast=1)
    clock = Clock(0.0)
    est = RunningMeanSpeeds(halflife_s=100.0)
    a = _running(job(0), clock, 0.0, {0: 0.5})
    for t in (0.0, 100.0):
        est.observe(snap(c, now=t, running=[a]))
    a.node_speeds = {0: 1.0}
    est.observe(snap(c, now=200.0, running=[a]))
    # weight 100 at 0.5 halves to 50, then 100 at 1.0
    assert est.speeds(200.0, c)[0][0] == pytest.approx((0.5 * 50 + 1.0 * 100) / 150)


# --- the policies -----------------------------------------------------------------------------


def _jct(name: str, cluster: Cluster, jobs, events) -> dict[str, float]:
    res = simulate(jobs, cluster, make_policy(name), TypeRate(), SimConfig(), node_events=events)
    assert set(res.jobs.status) == {"done"}
    return dict(zip(res.jobs.job_id, res.jobs.jct))


def test_pal_style_learns_a_slow_node_and_avoids_it_while_gavel_style_does_not():
    c = hetero(slow=0, fast=3, gpus=1)
    events = [NodeEvent(0.0, 0, "speed", speed=0.5)]  # node 0 straggles from the start
    jobs = [job(0, iters=200.0), job(1, t=300.0, iters=200.0)]  # fast: 2 it/s, so 100 s; 200 s on node 0
    gavel, pal = _jct("gavel-style", c, jobs, events), _jct("pal-style", c, jobs, events)
    assert gavel["j0"] == pal["j0"] == pytest.approx(200.0)  # nobody knew before the first job ran
    assert gavel["j1"] == pytest.approx(200.0)  # gavel-style sees only the type: node 0 again
    assert pal["j1"] == pytest.approx(100.0)  # pal-style measured node 0 and went elsewhere


def test_random_placement_is_seeded():
    c = hetero(slow=4, fast=4)
    free = c.capacity.copy()
    free[3] = 0.0  # a full node is never chosen
    p = RandomPlacement()

    def draws(seed: int) -> list[int]:
        p.reset(seed=seed)
        return [p.place(c, free, job(i), 1, 0).nodes[0] for i in range(30)]

    first = draws(1)
    assert draws(1) == first and draws(2) != first
    assert 3 not in first and len(set(first)) > 3


def test_random_policy_same_seed_same_run():
    c = hetero(slow=3, fast=3)
    jobs = [job(i, workers=1 + i % 3, t=10.0 * i, iters=300.0) for i in range(12)]

    def run(seed: int) -> list[float]:
        res = simulate(jobs, c, make_policy("tiresias-random"), TypeRate(), SimConfig(seed=seed))
        return res.jobs.sort_values("job_id").jct.tolist()

    assert run(3) == run(3)
    assert any(run(s) != run(3) for s in (4, 5, 6))


@pytest.mark.parametrize("name", HETERO_BASELINES)
def test_every_hetero_baseline_runs_a_workload_to_completion(name):
    assert name in POLICIES
    c = hetero(slow=3, fast=3, gpus=4)
    jobs = [job(i, workers=1 + i % 5, t=15.0 * i, iters=500.0 + 50 * i,
                **({"arch": "ps", "num_ps": 1} if i % 4 == 3 else {})) for i in range(20)]
    events = [NodeEvent(100.0, 4, "speed", speed=0.6), NodeEvent(400.0, 4, "speed", speed=1.0)]
    jct = _jct(name, c, jobs, events)
    assert len(jct) == 20 and all(v > 0 for v in jct.values())
    homo = Cluster.homogeneous("homo", nodes=4, gpus=4, cpus=16, mem=64)
    res = simulate(jobs, homo, make_policy(name), TypeRate(), SimConfig())
    assert set(res.jobs.status) == {"done"}


class NoSlow(TypeRate):
    """No progress at all on the slow type (as Gavel's K80 column has for ResNet-50 batch 128)."""

    def rate(self, spec, alloc, cluster):
        return 0.0 if any(str(cluster.gpu_type[n]) == "slow" for n in alloc.nodes) else super().rate(spec, alloc, cluster)


def test_a_job_waits_rather_than_run_where_the_profile_says_it_makes_no_progress():
    c = hetero()
    free = c.capacity.copy()
    free[2:, 0] = 0.0  # only slow GPUs free
    assert placed(SpeedAwarePlacement(), c, free, job(0), profile=NoSlow()) is None
    assert placed(SpeedAwarePlacement(), c, c.capacity.copy(), job(0), profile=NoSlow()).nodes[0] in (2, 3)


def test_resolution_makes_near_equal_machines_tie_so_best_fit_decides():
    c = hetero(slow=0, fast=2)
    free = c.capacity.copy()
    free[1, 0] = 1.0  # node 1 is the best fit
    est = Fixed([1.0, 0.97], [0.0, 0.0])
    assert placed(SpeedAwarePlacement(estimate=est), c, free, job(0)).nodes == (0,)
    assert placed(SpeedAwarePlacement(estimate=est, resolution=0.1), c, free, job(0)).nodes == (1,)


@settings(max_examples=60, deadline=None)
@given(free_gpus=st.lists(st.integers(0, 8), min_size=6, max_size=6),
       racks=st.lists(st.integers(0, 2), min_size=6, max_size=6), workers=st.integers(1, 24))
def test_with_no_estimate_on_one_gpu_type_it_places_exactly_as_pack(free_gpus, racks, workers):
    # candidates all tie (no profile, every factor 1), so the tie rule must reproduce Pack's
    # choice: best-fit single node, else the roomiest rack's roomiest nodes
    c = Cluster(name="homog", capacity=np.tile([8.0, 48.0, 256.0], (6, 1)), gpu_type=np.array(["a"] * 6, dtype=object),
                rack=np.array(racks), speed=np.ones(6), node_names=tuple(f"n{i}" for i in range(6)))
    free = c.capacity.copy()
    free[:, 0] = free_gpus
    spec = job(0, workers=workers)
    assert placed(SpeedAwarePlacement(), c, free, spec, profile=None) == Pack().place(c, free, spec, workers, 0)


class CrossRackPenalty(ThroughputModel):
    """One iteration/s per worker, halved when the workers span two racks."""

    name = "cross-rack"

    def supports(self, spec: JobSpec) -> bool:
        return True

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        return alloc.num_workers * (0.5 if len(set(cluster.rack[list(alloc.nodes)].tolist())) > 1 else 1.0)


def test_the_rate_of_a_rack_local_spread_is_not_taken_for_a_cross_rack_one():
    # the same tasks per node on two nodes: rack-local and cross-rack must not share a cached rate
    c = hetero(slow=0, fast=4)
    c = Cluster(name="racks", capacity=c.capacity, gpu_type=c.gpu_type, rack=np.array([0, 0, 1, 1]),
                speed=c.speed, node_names=c.node_names)
    p = SpeedAwarePlacement()
    p.observe(snap(c, CrossRackPenalty()))
    spec = job(0, workers=2)
    assert p.objective(c, spec, Allocation((0, 1), (1, 1), (0, 0)), "fast") == pytest.approx(2.0)
    assert p.objective(c, spec, Allocation((1, 2), (1, 1), (0, 0)), "fast") == pytest.approx(1.0)
    free = c.capacity.copy()
    free[:, 0] = [1.0, 0.0, 1.0, 1.0]  # the first-fit pair (0, 2) crosses racks; (2, 3) does not
    assert placed(p, c, free, spec, profile=CrossRackPenalty()).nodes == (2, 3)


def test_a_waiting_job_declines_a_slow_spread_while_others_run_then_takes_it_when_patience_runs_out():
    # two 8-GPU nodes on two racks with 4 GPUs free each: an 8-worker job can only start across
    # racks, at half its packed rate (CrossRackPenalty); it waits for a node to free up instead
    c = Cluster(name="two-racks", capacity=np.tile([8.0, 48.0, 256.0], (2, 1)), gpu_type=np.array(["a", "a"], dtype=object),
                rack=np.array([0, 1]), speed=np.ones(2), node_names=("n0", "n1"))
    free = c.capacity.copy()
    free[:, 0] = 4.0
    clock = Clock(0.0)
    spec = job(0, workers=8)
    waiting = JobState(spec=spec, index=0, clock=clock, status=JobStatus.PENDING)
    other = JobState(spec=job(1, workers=8), index=1, clock=clock, status=JobStatus.RUNNING)

    def place(p: SpeedAwarePlacement, waited: float, running=(other,)) -> Allocation | None:
        waiting._waited = waited
        p.observe(Snapshot(0.0, c, free, [waiting], list(running), 0.0, profile=CrossRackPenalty()))
        return p.place(c, free, spec, 8, 0)

    assert place(SpeedAwarePlacement(), 0.0) is None
    assert place(SpeedAwarePlacement(), PATIENCE_S).nodes == (0, 1)  # waited long enough: it starts
    assert place(SpeedAwarePlacement(), 0.0, running=()).nodes == (0, 1)  # an idle cluster frees nothing
    assert place(SpeedAwarePlacement(min_efficiency=0.0), 0.0).nodes == (0, 1)  # patience off
    assert place(SpeedAwarePlacement(min_efficiency=0.4), 0.0).nodes == (0, 1)  # half speed is enough here
    with pytest.raises(ValueError, match="min_efficiency"):
        SpeedAwarePlacement(min_efficiency=1.5)
