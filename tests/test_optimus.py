"""Optimus end to end: it grows PS jobs past one worker, stays within limits (the engine validates
every plan), finishes everything, learns the speed model it is run on, and handles rigid jobs."""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.core import Cluster, JobSpec, Policy
from dlsched.core.errors import ConfigError
from dlsched.policies.fifo import fifo
from dlsched.policies.optimus import optimus
from dlsched.policies.phases.placement import even_spread
from dlsched.policies.registry import make_policy
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.base import ThroughputModel
from dlsched.throughput.duration_only import DurationOnly
from tests.conftest import rigid_job

THETA = (0.05, 0.05, 0.1, 0.02, 0.02)  # compute dominates at 1 worker; best near 6-8 workers
BATCH = 32


class ToySyncPS(ThroughputModel):
    """Optimus' own sync formula with known θ, so the policy's fitted model can be checked."""

    name = "toy-sync"

    def supports(self, spec: JobSpec) -> bool:
        return spec.model == "toy-sync"

    def rate(self, spec, alloc, cluster) -> float:
        p, w = alloc.num_ps, alloc.num_workers
        a, b, c, d, e = THETA
        return 1.0 / (a * BATCH / w + b + c * w / p + d * w + e * p)


class Recorder(Policy):
    """Passes plans through, remembering each job's largest size."""

    def __init__(self, inner: Policy):
        self.inner = inner
        self.name, self.interval = inner.name, inner.interval
        self.on_events, self.oracle = inner.on_events, inner.oracle
        self.max_size: dict[str, tuple[int, int]] = {}

    def reset(self, cluster, seed) -> None:
        self.inner.reset(cluster, seed)

    def schedule(self, snap):
        plan = self.inner.schedule(snap)
        for jid, a in plan.allocations.items():
            w, p = self.max_size.get(jid, (0, 0))
            self.max_size[jid] = (max(w, a.num_workers), max(p, a.num_ps))
        return plan


def ps_jobs(n: int = 6) -> list[JobSpec]:
    return [
        JobSpec(f"j{i}", submit_time=300.0 * i, iterations=20000.0 * (1 + i % 3), arch="ps",
                model="toy-sync", max_workers=8, max_ps=8, worker_demand=(1, 2, 4),
                ps_demand=(0, 2, 4), batch_size=BATCH)
        for i in range(n)
    ]


@pytest.fixture
def ps_cluster() -> Cluster:
    return Cluster.homogeneous("ps", nodes=4, gpus=4, cpus=16, mem=64)


@pytest.mark.parametrize("oracle", [False, True])
def test_optimus_grows_ps_jobs_within_limits_and_finishes_all(ps_cluster, oracle):
    jobs = ps_jobs()
    rec = Recorder(optimus(oracle=oracle))
    r = simulate(jobs, ps_cluster, rec, ToySyncPS(), SimConfig())
    assert r.summary["finished"] == len(jobs)
    assert max(w for w, _ in rec.max_size.values()) > 1
    assert all(w <= 8 and p <= 8 for w, p in rec.max_size.values())
    # every job ran at one size at least as fast as the requested 1 PS + 1 worker, so Optimus
    # must beat FIFO at the requested size on mean JCT
    base = simulate(jobs, ps_cluster, fifo(backfill=True), ToySyncPS(), SimConfig())
    assert r.summary["mean_jct"] < 0.7 * base.summary["mean_jct"]


def test_optimus_learns_the_true_speed_model_from_observed_rates(ps_cluster):
    pol = optimus()
    simulate(ps_jobs(), ps_cluster, pol, ToySyncPS(), SimConfig())
    model = pol.speeds.model(ps_jobs()[0])
    assert model.fitted
    np.testing.assert_allclose(model.theta, THETA, rtol=1e-4)


def test_restart_cost_that_never_pays_back_stops_resizing(ps_cluster):
    jobs = ps_jobs(3)
    cheap = simulate(jobs, ps_cluster, optimus(), ToySyncPS(), SimConfig(restart_overhead=10.0))
    dear = simulate(jobs, ps_cluster, optimus(), ToySyncPS(), SimConfig(restart_overhead=1e6))
    assert cheap.summary["restarts"] > 0  # with cheap restarts it does resize running jobs
    assert dear.summary["restarts"] == 0
    assert dear.summary["finished"] == len(jobs)


@pytest.mark.parametrize("oracle", [False, True])
def test_rigid_duration_only_jobs_run_without_error(small_cluster, oracle):
    rng = np.random.default_rng(3)
    jobs = [rigid_job(i, 60.0 * i, float(rng.uniform(100, 3000)), gpus=int(rng.choice([1, 2, 4, 8])))
            for i in range(40)]
    r = simulate(jobs, small_cluster, optimus(oracle=oracle), DurationOnly(), SimConfig())
    assert r.summary["finished"] == len(jobs)
    # rigid jobs run at exactly their size: GPU-seconds = GPUs × duration (+ restart pauses)
    by = r.jobs.set_index("job_id")
    for spec in jobs:
        assert by.loc[spec.job_id, "gpu_seconds"] >= spec.num_workers * spec.duration - 1e-6


def test_rigid_admission_is_shortest_estimated_remaining_first(small_cluster):
    jobs = [rigid_job(0, 0.0, 1000.0, gpus=16), rigid_job(1, 10.0, 5000.0, gpus=16),
            rigid_job(2, 20.0, 100.0, gpus=16)]
    cfg = SimConfig(restart_overhead=10.0)
    srt = simulate(jobs, small_cluster, optimus(oracle=True), DurationOnly(), cfg).jobs.set_index("job_id")
    # at the 600 s slot j2 (100 s left) displaces j0 (400 s left); j0 resumes after a 10 s pause
    assert srt.loc["j2", "start"] == pytest.approx(600.0)
    assert srt.loc["j0", "end"] == pytest.approx(1110.0)
    assert srt.loc["j1", "start"] == pytest.approx(1110.0)
    fcfs = simulate(jobs, small_cluster, optimus(oracle=True, order="arrival"), DurationOnly(), cfg)
    by = fcfs.jobs.set_index("job_id")
    assert by.loc["j1", "start"] == pytest.approx(1000.0)
    assert by.loc["j2", "start"] == pytest.approx(6000.0)


@pytest.mark.parametrize("oracle", [False, True])
def test_a_slot_that_keeps_running_jobs_at_their_sizes_places_only_newcomers_with_the_same_result(small_cluster, oracle, monkeypatch):
    # when a slot's targets keep running jobs only at their sizes, the shortcut places only the
    # newcomers, around the kept jobs (in what is free, with "keep running", if none stops); the
    # re-plan it skips would have put every kept job back on its own nodes and given the
    # newcomers the same allocations
    import dlsched.policies.optimus as opt

    checked = []
    real = opt._keeps_sizes

    def keeps_sizes(snap, sized):
        kept = real(snap, sized)
        if kept:
            replan = opt.realise(snap, ((c.js, c.w, c.p) for c in sized), opt._EVEN_THEN_PACK,
                                 preempt="replan", shrink=opt._optimus_shrink)
            targets = {c.js.job_id for c in sized}
            assert all(replan[js.job_id] is js.allocation for js in snap.running if js.job_id in targets)
            newcomers = [c for c in sized if c.cur is None]
            around = opt._replan_around_kept(snap, sized, newcomers)
            assert around == replan and list(around) == list(replan)
            stops = len(sized) - len(newcomers) < len(snap.running)
            if not stops:
                new = opt.realise(snap, ((c.js, c.w, c.p) for c in newcomers), opt._EVEN_THEN_PACK,
                                  preempt="none", shrink=opt._optimus_shrink)
                assert {k: a for k, a in replan.items() if k not in {js.job_id for js in snap.running}} == new
            checked.append((len(snap.pending), len(newcomers), stops))
        return kept

    monkeypatch.setattr(opt, "_keeps_sizes", keeps_sizes)
    rng = np.random.default_rng(5)
    jobs = [rigid_job(i, 30.0 * i, float(rng.uniform(500, 20000)), gpus=int(rng.choice([1, 2, 4, 8])))
            for i in range(40)]
    r = simulate(jobs, small_cluster, optimus(oracle=oracle), DurationOnly(), SimConfig())
    assert r.summary["finished"] == len(jobs)
    assert max(p for p, _, _ in checked) > 0  # it happened with jobs waiting
    assert any(n > 0 for _, n, _ in checked) and any(n == 0 for _, n, _ in checked)  # with and without starts
    assert any(stops for _, _, stops in checked)  # and with running jobs stopped


def test_elastic_allreduce_jobs_are_sized_between_min_and_max(small_cluster):
    jobs = [rigid_job(i, 100.0 * i, 2000.0, gpus=4, min_workers=2, max_workers=8) for i in range(6)]
    rec = Recorder(optimus())
    r = simulate(jobs, small_cluster, rec, DurationOnly(), SimConfig())
    assert r.summary["finished"] == len(jobs)
    assert all(2 <= w <= 8 for w, _ in rec.max_size.values())


class CrossServerPenalty(ThroughputModel):
    """Linear in workers, but 40% slower as soon as a job spans two servers: a single extra
    worker past one server never pays, doubling does (a non-concave speed, like DL2's analytic
    PS model)."""

    name = "toy-step"

    def supports(self, spec: JobSpec) -> bool:
        return spec.model == "toy-step"

    def rate(self, spec, alloc, cluster) -> float:
        return alloc.num_workers * (1.0 if alloc.num_nodes == 1 else 0.6)


@pytest.mark.parametrize("jumps, expected", [(False, 2), (True, 16)])
def test_jumps_escape_a_single_step_local_optimum(jumps, expected):
    cluster = Cluster.homogeneous("two-gpu", nodes=8, gpus=2, cpus=16, mem=64)
    job = JobSpec("big", 0.0, 1e5, arch="allreduce", model="toy-step", max_workers=16,
                  worker_demand=(1, 1, 1))
    rec = Recorder(optimus(oracle=True, jumps=jumps))
    r = simulate([job], cluster, rec, CrossServerPenalty(), SimConfig())
    assert r.summary["finished"] == 1
    assert rec.max_size["big"][0] == expected


def test_even_spread_uses_fewest_servers_evenly(ps_cluster):
    spec = ps_jobs(1)[0]
    free = ps_cluster.capacity.copy()
    a = even_spread(ps_cluster, free, spec, workers=8, ps=4)  # 8 GPUs: needs 2 of the 4-GPU nodes
    assert a.num_nodes == 2 and a.workers == (4, 4) and a.ps == (2, 2)
    free[0] = 0.0  # a full node is skipped
    b = even_spread(ps_cluster, free, spec, workers=4, ps=1)
    assert 0 not in b.nodes and b.num_nodes == 1
    assert even_spread(ps_cluster, free, spec, workers=13, ps=1) is None  # only 12 GPUs free


def test_registry_builds_optimus_and_rejects_bad_options():
    assert make_policy("optimus", oracle=True).name == "optimus"
    with pytest.raises(ConfigError):
        make_policy("optimus", order="random")
    with pytest.raises(ConfigError):
        make_policy("optimus", interval=0)
    with pytest.raises(ConfigError):
        make_policy("optimus", interval=None, on_events=False)


def test_slot_ticks_advance_when_float_rounding_lands_on_the_tick():
    """Regression: with this first submit time, (t - t0)/600 at the 27th slot is 26.999…, and the
    engine used to schedule the next tick at t itself, asking the policy forever."""
    t0 = 294.12609930738574
    jobs = [JobSpec("a", t0, 10.0, duration=10.0), JobSpec("b", t0 + 26 * 600 + 1.0, 2000.0, duration=2000.0)]
    pol = optimus(oracle=True)
    inner = pol.schedule
    calls = []

    def guarded(snap):
        calls.append(snap.now)
        assert len(calls) < 100, f"policy asked {len(calls)} times, last at t={snap.now!r}"
        return inner(snap)

    pol.schedule = guarded
    r = simulate(jobs, Cluster.homogeneous("c", 1, 4, 16, 64), pol, DurationOnly())
    assert r.summary["finished"] == 2
    assert len(calls) == len(set(calls))  # never asked twice at one instant


def test_the_minimum_sizes_kept_from_arrivals_answer_as_a_scan_of_the_queue(small_cluster, monkeypatch):
    # every arrival and completion asks whether a waiting job's minimum fits in what is free; the
    # answer comes from the few minimum sizes of the jobs in the system (kept from the snapshots'
    # arrivals and completions) and must be the scan of the queue's own jobs, yes and no
    import dlsched.policies.optimus as opt

    answers = []
    real = opt._MinimumNeeds.any_fits

    def any_fits(self, jobs, budget):
        got = real(self, jobs, budget)
        scan = any(opt._fits([js.spec.min_workers * a + js.spec.min_ps * b
                              for a, b in zip(js.spec.worker_demand, js.spec.ps_demand)], budget) for js in jobs)
        assert got == scan
        assert len(self.of) == sum(self.kinds.values())
        answers.append(got)
        return got

    monkeypatch.setattr(opt._MinimumNeeds, "any_fits", any_fits)
    rng = np.random.default_rng(3)
    jobs = [rigid_job(i, 20.0 * i, float(rng.uniform(300, 9000)), gpus=int(rng.choice([1, 2, 4, 8, 16])))
            for i in range(60)]
    r = simulate(jobs, small_cluster, optimus(), DurationOnly(), SimConfig())
    assert r.summary["finished"] == len(jobs)
    assert True in answers and False in answers


def test_the_minimum_sizes_are_rebuilt_for_a_policy_first_asked_mid_run(small_cluster):
    # a policy asked for the first time with jobs already waiting (none of them among `arrived`)
    # must still see their minimum sizes
    from types import SimpleNamespace

    from dlsched.core.snapshot import Clock, JobState
    import dlsched.policies.optimus as opt

    waiting = [JobState(rigid_job(i, 0.0, 100.0, gpus=g), i, Clock()) for i, g in enumerate((16, 2))]
    snap = SimpleNamespace(finished=(), arrived=(), pending=waiting, running=[], num_pending=2, num_running=0)
    needs = opt._MinimumNeeds()
    needs.update(snap)
    free = np.array(small_cluster.capacity, dtype=float)
    free[:, 0] = [1.0, 1.0, 0.0, 0.0]  # 2 GPUs free: the 2-GPU job's minimum fits, the 16-GPU one's not
    budget = free.sum(axis=0).tolist()
    assert needs.any_fits(waiting, budget) and not needs.any_fits(waiting[:1], budget)
    free[:, 0] = 0.0
    assert not needs.any_fits(waiting, free.sum(axis=0).tolist())
