"""The one realiser (ranked list → allocations), the policy wrappers, and the incremental FIFO path."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from dlsched.core import Allocation, Clock, JobState, JobStatus
from dlsched.core.policy import Every, Named, OnEvents, Oracle
from dlsched.policies.phased import PhasedPolicy
from dlsched.core.snapshot import Snapshot
from dlsched.policies.drf import drf
from dlsched.policies.edf import edf
from dlsched.policies.fifo import fifo
from dlsched.policies.phases.deadline import EarliestDeadline
from dlsched.policies.phases.ordering import ByArrival, ShortestRemainingTime, Unordered
from dlsched.policies.phases.placement import PLACEMENTS, Pack
from dlsched.policies.phases.realise import realise
from dlsched.policies.phases.sizing import DominantShareFilling, Requested
from dlsched.policies.srtf import srtf
from tests.test_policies_baselines import job, node, random_rigid, run


def _state(spec, i, clock, alloc=None):
    if alloc is None:
        return JobState(spec=spec, index=i, rank=i, clock=clock, status=JobStatus.PENDING)
    return JobState(spec=spec, index=i, rank=i, clock=clock, status=JobStatus.RUNNING, allocation=alloc,
                    alloc_gpus=float(alloc.num_workers))


def _snap(cluster, running, pending):
    free = cluster.capacity.copy()
    for j in running:
        free[list(j.allocation.nodes)] -= j.allocation.usage(np.asarray(j.spec.worker_demand), np.asarray(j.spec.ps_demand))
    return Snapshot(now=0.0, cluster=cluster, free=free, pending=pending, running=running, restart_overhead=10.0)


def test_wrappers_set_only_their_attribute_and_never_change_the_inner_policy():
    inner = fifo()
    wrapped = Oracle(Named(Every(inner, 60.0, events=False), "fifo-60"))
    assert (wrapped.name, wrapped.interval, wrapped.on_events, wrapped.oracle) == ("fifo-60", 60.0, False, True)
    assert (inner.name, inner.interval, inner.on_events, inner.oracle) == ("fifo", None, True, False)
    assert OnEvents(wrapped).on_events is True
    assert wrapped.placement is inner.placement  # read-through to the policy inside
    with pytest.raises(ValueError):
        Every(inner, 0)


def test_minimal_preempts_from_the_bottom_only_what_the_newcomer_needs():
    cluster, clock = node(n=2, gpus=4), Clock()
    a = _state(job("a", 0, 100, 4), 0, clock, Allocation.single_node(0, 4))
    b = _state(job("b", 0, 100, 2), 1, clock, Allocation.single_node(1, 2))
    c = _state(job("c", 0, 100, 2), 2, clock, Allocation.single_node(1, 2))
    new = _state(job("new", 5, 10, 2), 3, clock)
    snap = _snap(cluster, [a, b, c], [new])
    sized = [(j, j.spec.num_workers, 0) for j in (new, a, b, c)]  # the newcomer ranks first
    plan = realise(snap, sized, Pack(), preempt="minimal")
    assert set(plan) == {"new", "a", "b"} and plan["a"] is a.allocation and plan["b"] is b.allocation
    # "none" stops nobody: it lists only what starts (the plan keeps the rest running), and the
    # newcomer does not fit in what is free
    assert realise(snap, sized, Pack(), preempt="none") == {}


def test_none_grows_a_running_job_in_place_or_keeps_it():
    cluster, clock = node(n=1, gpus=4), Clock()
    elastic = dict(min_workers=1, max_workers=4)
    a = _state(job("a", 0, 100, 2, **elastic), 0, clock, Allocation.single_node(0, 2))
    snap = _snap(cluster, [a], [])
    assert realise(snap, [(a, 4, 0)], Pack(), preempt="none")["a"].num_workers == 4
    b = _state(job("b", 0, 100, 1), 1, clock, Allocation.single_node(0, 1))
    snap = _snap(cluster, [a, b], [])
    assert realise(snap, [(a, 4, 0)], Pack(), preempt="none") == {}  # no room: unchanged, so not listed
    assert realise(snap, [(a, 4, 0)], Pack(), preempt="none", shrink=True)["a"].num_workers == 3


def test_replan_keeps_an_unchanged_job_on_its_nodes():
    cluster, clock = node(n=2, gpus=4), Clock()
    a = _state(job("a", 0, 100, 2), 0, clock, Allocation.single_node(1, 2))
    new = _state(job("new", 5, 10, 4), 1, clock)
    plan = realise(_snap(cluster, [a], [new]), [(new, 4, 0), (a, 2, 0)], Pack(), preempt="replan")
    assert plan["a"] is a.allocation and plan["new"].nodes == (0,)


class Listed(ByArrival):
    """Arrival order without the `key` of a Keyed ordering: forces the list path."""

    key = None  # type: ignore[assignment]


@dataclass(frozen=True)
class CountingSize:
    """Requested sizes, counting how many jobs were sized."""

    calls: list

    def size_one(self, snap, j):
        self.calls.append(j.job_id)
        return j.spec.num_workers, j.spec.num_ps

    def size(self, snap, jobs):
        return [(j, *self.size_one(snap, j)) for j in jobs]


def test_strict_fifo_sizes_only_up_to_its_blocked_head():
    cluster, clock = node(n=1, gpus=4), Clock()
    jobs = [_state(job(f"j{i}", i, 100, 4), i, clock) for i in range(50)]
    for ordering in (Listed(), ByArrival()):  # the list path, then the incremental one
        calls: list = []
        pol = PhasedPolicy(None, ordering, CountingSize(calls), Pack(), backfill=False)
        plan = pol.schedule(_snap(cluster, [], jobs))
        assert set(plan.allocations) == {"j0"} and calls == ["j0", "j1"]


@pytest.mark.parametrize("backfill", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_incremental_fifo_plans_exactly_as_the_list_path(seed, backfill):
    jobs = random_rigid(seed, 150, 30, 6, 1.2, [1, 2, 4, 8])
    cluster = node(n=3, gpus=8)
    fast = fifo(backfill=backfill)
    slow = PhasedPolicy(None, Listed(), Requested(), Pack(), name="fifo", backfill=backfill)
    assert fast._incremental and not slow._incremental
    a = run(jobs, cluster, fast).jobs.set_index("job_id")
    b = run(jobs, cluster, slow).jobs.set_index("job_id")
    np.testing.assert_allclose(a["start"].to_numpy(), b["start"].to_numpy())
    np.testing.assert_allclose(a["end"].to_numpy(), b["end"].to_numpy())


class ListedSRTF(ShortestRemainingTime):
    """SRTF's order without its key: forces the list path."""

    key = None  # type: ignore[assignment]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_incremental_srtf_plans_exactly_as_the_list_path(seed):
    jobs = random_rigid(seed, 200, 25, 6, 1.5, [1, 1, 2, 4, 8])
    cluster = node(n=3, gpus=8)
    fast = srtf()
    slow = Oracle(PhasedPolicy(None, ListedSRTF(), Requested(), Pack(), name="srtf", preempt="minimal"))
    assert fast._incremental and not slow._incremental
    a = run(jobs, cluster, fast).jobs.set_index("job_id")
    b = run(jobs, cluster, slow).jobs.set_index("job_id")
    assert a["preemptions"].sum() > 0  # the workload does exercise preemption
    np.testing.assert_array_equal(a["preemptions"].to_numpy(), b["preemptions"].to_numpy())
    np.testing.assert_allclose(a["end"].to_numpy(), b["end"].to_numpy())


class ListedDeadline(EarliestDeadline):
    """EDF's order without its key: forces the list path."""

    key = None  # type: ignore[assignment]

    def order(self, snap, jobs):
        return sorted(jobs, key=lambda j: EarliestDeadline.key(self, snap, j, {}))


def _contended(seed: int, n: int, deadlines: bool = False) -> list:
    rng = np.random.default_rng(seed)
    jobs, t = [], 0.0
    for i in range(n):
        t += float(rng.exponential(25))
        secs = float(np.exp(rng.normal(6, 1.5)))
        kw = {"deadline": round(t + secs * float(rng.uniform(1, 4)), 1)} if deadlines and rng.random() < 0.7 else {}
        jobs.append(job(f"r{i}", round(t, 1), secs, int(rng.choice([1, 1, 2, 4, 8])), **kw))
    return jobs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_incremental_drf_plans_exactly_as_the_phased_filling(seed):
    # DRF's rigid fast path (a kept list, one pass) against the progressive filling + realiser
    jobs, cluster = _contended(seed, 200), node(n=3, gpus=8)
    fast = drf()
    slow = PhasedPolicy(None, Unordered(), DominantShareFilling(), PLACEMENTS["least-loaded"], name="drf",
                        preempt="minimal", shrink=True)
    a = run(jobs, cluster, fast).jobs.set_index("job_id")
    assert fast._fast  # every job rigid: the fast path served the whole run
    b = run(jobs, cluster, slow).jobs.set_index("job_id")
    assert a["preemptions"].sum() > 0  # the workload does exercise preemption
    np.testing.assert_array_equal(a["preemptions"].to_numpy(), b["preemptions"].to_numpy())
    np.testing.assert_allclose(a["end"].to_numpy(), b["end"].to_numpy())


@pytest.mark.parametrize("seed", [0, 1])
def test_incremental_drf_grants_after_the_first_miss_as_the_phased_filling(seed):
    # CPU- and memory-heavy jobs (fractional memory too) mixed with GPU-heavy ones: the dominant
    # resource differs from job to job, so units after the first miss in share order still fit
    rng = np.random.default_rng(seed)
    jobs, t = [], 0.0
    for i in range(200):
        t += float(rng.exponential(20))
        cpu, mem = float(rng.choice([1, 2, 12, 24])), float(rng.choice([2.5, 8, 60, 150.25]))
        jobs.append(job(f"m{i}", round(t, 1), float(np.exp(rng.normal(6, 1.5))), int(rng.choice([1, 1, 2, 4])),
                        worker_demand=(1.0, cpu, mem)))
    cluster = node(n=3, gpus=8, cpus=48, mem=256)
    fast = drf()
    grants_after = []
    after = fast._after
    fast._after = lambda line, f: grants_after.extend(a := after(line, f)) or a  # type: ignore[method-assign]
    slow = PhasedPolicy(None, Unordered(), DominantShareFilling(), PLACEMENTS["least-loaded"], name="drf",
                        preempt="minimal", shrink=True)
    a = run(jobs, cluster, fast).jobs.set_index("job_id")
    assert fast._fast and len(grants_after) > 0  # the fast path served the run, granting after misses
    b = run(jobs, cluster, slow).jobs.set_index("job_id")
    np.testing.assert_array_equal(a["preemptions"].to_numpy(), b["preemptions"].to_numpy())
    np.testing.assert_allclose(a["end"].to_numpy(), b["end"].to_numpy())


def test_drf_leaves_its_fast_path_for_an_elastic_job():
    jobs = _contended(3, 40) + [job("elastic", 10.0, 500.0, 2, min_workers=1, max_workers=4)]
    pol = drf()
    run(jobs, node(n=3, gpus=8), pol)
    assert not pol._fast


@pytest.mark.parametrize("seed", [0, 1])
def test_incremental_edf_plans_exactly_as_the_list_path(seed):
    jobs, cluster = _contended(seed, 200, deadlines=True), node(n=3, gpus=8)
    fast = edf()
    slow = PhasedPolicy(None, ListedDeadline(), Requested(), PLACEMENTS["least-loaded"], name="edf")
    assert fast._incremental and not slow._incremental
    a = run(jobs, cluster, fast).jobs.set_index("job_id")
    b = run(jobs, cluster, slow).jobs.set_index("job_id")
    np.testing.assert_allclose(a["start"].to_numpy(), b["start"].to_numpy())
    np.testing.assert_allclose(a["end"].to_numpy(), b["end"].to_numpy())
