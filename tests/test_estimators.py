"""Optimus' estimators: the speed model recovers known coefficients, the convergence fit predicts
the total work of known curves, and the remaining-work estimate says where its number came from."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlsched.core import JobSpec
from dlsched.core.snapshot import Clock, JobState, JobStatus
from dlsched.estimators import convergence_fit
from dlsched.estimators.convergence_fit import fit_convergence
from dlsched.estimators.progress_predictor import RemainingWork, estimate_remaining
from dlsched.estimators.speed_model import SpeedModel, SpeedPool, form_for
from dlsched.sim import convergence
from dlsched.sim.convergence import loss_curve

THETA = np.array([0.05, 0.05, 0.1, 0.02, 0.02])
BATCH = 32


def sync_rate(p: int, w: int, th: np.ndarray = THETA) -> float:
    return 1.0 / (th[0] * BATCH / w + th[1] + th[2] * w / p + th[3] * w + th[4] * p)


GRID = [(p, w) for p in (1, 2, 4, 8) for w in (1, 2, 4, 8, 12)]


def test_sync_fit_recovers_theta_and_predicts_unseen_size():
    m = SpeedModel.fit("sync", {s: sync_rate(*s) for s in GRID}, batch=BATCH)
    assert m.fitted and m.source == "fit"
    np.testing.assert_allclose(m.theta, THETA, rtol=1e-6)
    assert (3, 6) not in m.points
    assert m.predict(3, 6) == pytest.approx(sync_rate(3, 6), rel=1e-6)


def test_sync_fit_with_measurement_noise_still_predicts_within_5_percent():
    rng = np.random.default_rng(0)
    for _ in range(5):
        pts = {s: sync_rate(*s) * (1 + rng.normal(0, 0.02)) for s in GRID}
        m = SpeedModel.fit("sync", pts, batch=BATCH)
        assert m.predict(3, 6) == pytest.approx(sync_rate(3, 6), rel=0.05)
        assert m.theta[0] == pytest.approx(THETA[0], rel=0.1)  # the compute term dominates


def test_five_points_fit_but_four_fall_back_to_the_prior():
    pts = [(1, 1), (1, 2), (2, 2), (2, 4), (4, 4)]
    full = SpeedModel.fit("sync", {s: sync_rate(*s) for s in pts}, batch=BATCH)
    assert full.fitted
    assert full.predict(3, 6) == pytest.approx(sync_rate(3, 6), rel=1e-6)
    few = SpeedModel.fit("sync", {s: sync_rate(*s) for s in pts[:4]}, batch=BATCH)
    assert not few.fitted and few.source == "prior"
    # measured sizes are predicted by their measurement; others optimistically, by the best
    # extrapolation from any measured point
    assert few.predict(2, 4) == sync_rate(2, 4)
    from_each = [
        sync_rate(pa, wa) * (6 / wa) ** few.alpha * (min(1, 3 / 6) / min(1, pa / wa)) ** few.beta
        for pa, wa in pts[:4]
    ]
    assert few.predict(3, 6) == pytest.approx(max(from_each))
    assert max(from_each) > min(from_each)  # the choice of anchor matters here


def test_prior_from_one_point_scales_sublinearly_and_values_ps():
    m = SpeedModel.fit("sync", {(1, 1): 2.0})
    assert m.predict(1, 1) == 2.0
    assert 2.0 < m.predict(2, 2) < 4.0  # diminishing returns, but growth still helps
    assert m.predict(2, 2) > m.predict(1, 2)  # a PS per worker beats a shared one
    assert m.predict(3, 2) == pytest.approx(m.predict(2, 2))  # more PSs than workers: no gain
    slower = SpeedModel.fit("sync", {(1, 1): 2.0, (1, 3): 1.5})  # measured: more workers hurt
    assert slower.predict(2, 2) > 2.0  # still worth trying a size not measured yet
    assert SpeedModel.fit("sync", {}).predict(1, 1) is None  # nothing known at all


def test_async_and_allreduce_forms_recover_their_coefficients():
    th = np.array([0.8, 0.3, 0.05, 0.02])

    def async_rate(p: int, w: int) -> float:
        return w / (th[0] + th[1] * w / p + th[2] * w + th[3] * p)

    m = SpeedModel.fit("async", {s: async_rate(*s) for s in GRID})
    np.testing.assert_allclose(m.theta, th, rtol=1e-6)
    assert m.predict(3, 6) == pytest.approx(async_rate(3, 6), rel=1e-6)

    ar = np.array([2.0, 0.1, 0.03])
    pts = {(0, w): 1.0 / (ar[0] / w + ar[1] + ar[2] * w) for w in (1, 2, 4)}
    m = SpeedModel.fit("allreduce", pts)
    np.testing.assert_allclose(m.theta, ar, rtol=1e-6)
    assert m.predict(0, 8) == pytest.approx(1.0 / (ar[0] / 8 + ar[1] + ar[2] * 8), rel=1e-6)


def _state(spec: JobSpec, progress: float = 0.0, rates: dict | None = None, seed: int = 0) -> JobState:
    js = JobState(spec=spec, index=0, clock=Clock(0.0), status=JobStatus.PENDING)
    js._progress = progress
    js.observed_rates = dict(rates or {})
    js.loss_fn = loss_curve(spec.job_id, spec.iterations, seed, 0.01)
    return js


def _ps_job(jid: str, model: str = "toy", iterations: float = 1e4, **kw) -> JobSpec:
    return JobSpec(jid, 0.0, iterations, arch="ps", model=model, max_workers=12, batch_size=BATCH, **kw)


def test_speed_pool_shares_points_within_a_type_only():
    pool = SpeedPool()
    a = _state(_ps_job("a"), rates={(1, w, p): sync_rate(p, w) for p, w in GRID[:3]})
    b = _state(_ps_job("b"), rates={(2, w, p): sync_rate(p, w) for p, w in GRID[3:]})
    other = _state(_ps_job("c", model="other"), rates={(1, 1, 1): 99.0})
    for js in (a, b, other):
        pool.observe(js)
    m = pool.model(a.spec)
    assert m.fitted and len(m.points) == len(GRID)  # a and b pooled; c not
    assert m.predict(3, 6) == pytest.approx(sync_rate(3, 6), rel=1e-6)
    assert pool.model(other.spec).points == {(1, 1): 99.0}
    assert form_for(a.spec) == "sync" and form_for(_ps_job("d", extra={"sync": False})) == "async"


@pytest.mark.parametrize("frac", [0.3, 0.5, 0.8])
def test_convergence_fit_predicts_total_within_10_percent(frac):
    rng = np.random.default_rng(1)
    for j in range(12):
        total = float(10 ** rng.uniform(3, 6))
        loss = loss_curve(f"job{j}", total, seed=0, noise=0.01)
        done = frac * total
        samples = [(k, loss(k)) for k in np.linspace(done / 50, done, 50)]
        fit = fit_convergence(samples)
        assert fit is not None
        assert fit.total == pytest.approx(total, rel=0.10)
        assert fit.low <= total <= fit.high
        assert fit.low <= fit.total <= fit.high


def test_convergence_fit_epsilon_is_a_parameter_with_the_simulators_default():
    # the estimator's assumed threshold must stay equal to the simulator's ground truth, or
    # simulated Optimus results change; the estimator itself imports nothing of the simulator
    assert convergence_fit.EPSILON == convergence.EPSILON
    loss = loss_curve("job", 1e4, seed=0, noise=0.0)
    samples = [(k, loss(k)) for k in np.linspace(100, 5000, 50)]
    default, looser = fit_convergence(samples), fit_convergence(samples, epsilon=0.1)
    assert default is not None and looser is not None
    assert looser.total < default.total  # a looser threshold means done sooner
    with pytest.raises(ValueError):
        fit_convergence(samples, epsilon=0.0)


def test_convergence_fit_refuses_flat_or_tiny_samples():
    assert fit_convergence([(k, 1.0) for k in range(1, 30)]) is None  # never converges
    assert fit_convergence([(1.0, 2.0), (2.0, 1.5)]) is None


def test_estimate_sources_in_order():
    known = _state(JobSpec("k", 0.0, 1000.0, work_known=True), progress=400.0)
    assert estimate_remaining(known).remaining == 600.0
    assert estimate_remaining(known).source == "known"

    fresh = _state(JobSpec("n", 0.0, 1000.0))
    est = estimate_remaining(fresh)
    assert est.source == "unknown" and math.isinf(est.remaining)

    total = 5e4
    running = _state(JobSpec("r", 0.0, total), progress=0.4 * total)
    est = estimate_remaining(running)
    assert est.source == "fit"
    assert est.remaining == pytest.approx(0.6 * total, rel=0.15)
    assert est.low <= 0.6 * total <= est.high

    flat = _state(JobSpec("f", 0.0, 1000.0), progress=300.0)
    flat.loss_fn = lambda k: 1.0
    est = estimate_remaining(flat)
    assert est.source == "halfway" and est.remaining == 300.0
    assert estimate_remaining(flat, history=[900.0, 1100.0, 100.0]).source == "history"
    assert estimate_remaining(flat, history=[900.0, 1100.0, 100.0]).remaining == pytest.approx(700.0)


def test_remaining_work_learns_totals_from_finished_jobs():
    work = RemainingWork()
    done = _state(JobSpec("d", 0.0, 800.0), progress=0.0)
    work.observe([done])
    done.status, done._progress = JobStatus.DONE, 800.0
    newcomer = _state(JobSpec("n", 0.0, 1234.0))
    work.observe([newcomer])
    est = work.estimate(newcomer)
    assert est.source == "history" and est.remaining == 800.0


def test_remaining_is_the_estimates_number_for_every_source():
    from dlsched.estimators.progress_predictor import combine, remaining

    flat = _state(JobSpec("f", 0.0, 1000.0), progress=300.0)
    flat.loss_fn = lambda k: 1.0
    jobs = [_state(JobSpec("k", 0.0, 1000.0, work_known=True), progress=400.0),
            _state(JobSpec("n", 0.0, 1000.0)), _state(JobSpec("r", 0.0, 5e4), progress=2e4),
            _state(JobSpec("b", 0.0, 5e4), progress=4.99e4), flat]
    for job in jobs:
        fit = RemainingWork().fit(job)
        for history in ([], [100.0, 900.0, 1100.0], [100.0, 200.0]):
            assert remaining(job, fit, history) == combine(job, fit, history).remaining


def test_reads_history_says_whether_the_history_can_change_the_estimate():
    flat = _state(JobSpec("f", 0.0, 1000.0), progress=300.0)
    flat.loss_fn = lambda k: 1.0  # no usable fit: "halfway", then history
    jobs = [_state(JobSpec("k", 0.0, 1000.0, work_known=True), progress=400.0),
            _state(JobSpec("n", 0.0, 1000.0)), _state(JobSpec("r", 0.0, 5e4), progress=2e4), flat]
    reads = []
    for job in jobs:
        work = RemainingWork()
        work.remaining(job)  # as a policy asks first (the fit, if due, is made here)
        a, b = work.remaining(job, history=[]), work.remaining(job, history=[1e6, 2e6])
        reads.append(work.reads_history(job, job.progress))
        assert reads[-1] == (a != b)
    assert reads == [False, True, False, True]


def test_prefit_makes_the_fits_fit_makes_and_only_when_due():
    jobs = [_state(JobSpec(f"j{i}", 0.0, 10 ** (3 + i % 3)), progress=0.3 * 10 ** (3 + i % 3)) for i in range(6)]
    jobs.append(_state(JobSpec("known", 0.0, 1e3, work_known=True), progress=10.0))
    one, batched = RemainingWork(), RemainingWork()
    batched.prefit(jobs)
    assert "known" not in batched._fits
    for job in jobs:
        a, b = one.fit(job), batched.fit(job)
        assert (a is None) == (b is None) and (a is None or a.total == b.total)
        assert one.remaining(job) == batched.remaining(job) == one.estimate(job).remaining
    fits = dict(batched._fits)
    jobs[0]._progress *= 1.1  # within refit_growth: kept
    jobs[1]._progress *= 1.3  # past it: refitted
    batched.prefit(jobs)
    assert batched._fits["j0"] is fits["j0"] and batched._fits["j1"] is not fits["j1"]


def test_loss_curve_is_its_definition_at_any_k():
    # the simulator's ground truth must not drift when its evaluation is optimised: noise at k is
    # crc32(f"{h}:{int(k)}") of the job's hash h, for Python and NumPy k alike
    import zlib

    for jid, total, seed, noise in (("a", 1e4, 0, 0.01), ("job-7", 3e6, 2, 0.03), ("z", 50.0, 1, 0.0)):
        loss = loss_curve(jid, total, seed, noise)
        h = zlib.crc32(f"{seed}:{jid}".encode())
        floor, b0 = 0.05 + (h % 1000) / 1000 * 0.45, (1.0 / convergence.EPSILON - 1.0) / total
        for k in [*np.linspace(0.5, 2 * total, 40), 0.0, 7.0, 123456789.0]:
            jitter = ((zlib.crc32(f"{h}:{int(k)}".encode()) % 2001) / 1000.0 - 1.0) * noise
            assert loss(k) == loss(float(k)) == (1.0 / (b0 * k + 1.0) + floor) * (1.0 + jitter)
