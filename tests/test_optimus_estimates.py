"""Optimus' per-job estimates kept across calls (`policies.optimus_estimates`) and the simulator's
loss log sampled in one NumPy pass: both must give exactly what recomputing from scratch gives."""

from __future__ import annotations

import zlib

import numpy as np

from dlsched.core import JobSpec
from dlsched.core.snapshot import Clock, JobState, JobStatus, Snapshot, observed_losses
from dlsched.policies.optimus_estimates import Estimates
from dlsched.sim.convergence import LossCurve, loss_curve


def _waiting(jid: str, progress: float = 0.0, gpus: int = 1) -> JobState:
    spec = JobSpec(jid, 0.0, 1e4, model="duration-only", num_workers=gpus)
    js = JobState(spec=spec, index=int(jid[1:]), clock=Clock(0.0), status=JobStatus.PENDING)
    js._progress = progress
    js.loss_fn = loss_curve(jid, spec.iterations, 0, 0.01)
    return js


def _snap(jobs: list[JobState], small_cluster) -> Snapshot:
    return Snapshot(0.0, small_cluster, small_cluster.capacity.copy(), jobs, [], 0.0)


def _finish(est: Estimates, js: JobState, total: float) -> None:
    """A job of the same type finished after `total` iterations: it joins the type's history."""
    js.status, js._progress = JobStatus.DONE, total
    est.work.observe([js])


def test_a_waiting_job_reuses_its_candidate_and_redoes_only_what_changed(small_cluster):
    est = Estimates()
    waiting = [_waiting("j0"), _waiting("j1", progress=2000.0)]
    waiting[1].loss_fn = lambda k: 1.0  # flat: no usable fit
    snap = _snap(waiting, small_cluster)
    first = est.candidates(snap, waiting, placer=None)
    assert [c.est for c in first] == [np.inf, 2000.0]  # no history: unknown; "halfway"
    # a finished job of the type grows its history: the kept candidates re-estimate from it
    done = _waiting("j2")
    est.work.observe([done])
    _finish(est, done, 5000.0)
    again = est.candidates(snap, waiting, placer=None)
    assert [a is b for a, b in zip(first, again)] == [True, True]
    assert [c.est for c in again] == [5000.0, 3000.0]
    fresh = Estimates()
    fresh.work = est.work
    assert [c.est for c in fresh.candidates(snap, waiting, placer=None)] == [5000.0, 3000.0]
    # the type's speeds are measured: the kept candidates predict from the new model
    assert again[0].f(0, 1) is None
    runner = _waiting("j3")
    runner.status, runner.observed_rates = JobStatus.RUNNING, {(1, 1, 0): 2.5}
    est.speeds.observe(runner)
    third = est.candidates(snap, waiting, placer=None)
    assert third[0] is first[0] and third[0].f(0, 1) == 2.5
    # a job that ran since (its progress moved) is estimated afresh
    waiting[0]._progress, waiting[0].loss_fn = 100.0, (lambda k: 1.0)
    by_id = {c.js.job_id: c for c in est.candidates(snap, waiting, placer=None)}
    assert by_id["j0"].est == 4900.0 and by_id["j1"] is first[1]


def test_loss_curves_sampled_together_are_the_curves_one_call_at_a_time():
    rng = np.random.default_rng(3)
    curves = [loss_curve(f"j{i}", float(10 ** rng.uniform(1, 7)), i % 3, (0.0, 0.01, 0.03)[i % 3]) for i in range(40)]
    done = 10 ** rng.uniform(-1, 9, len(curves))
    ks = np.linspace(done / 50, done, 50, axis=1)
    ks[0, :8] = [0.0, 0.5, 9.0, 9.99, 10.0, 99.0, 100.0, 123456789.0]  # digit-count boundaries
    many = LossCurve.sample_many(curves, ks)
    assert all(many[i, j] == curves[i](ks[i, j]) for i in range(len(curves)) for j in range(ks.shape[1]))
    # and the CRC is zlib's over int(k)'s decimal digits
    h = zlib.crc32(b"0:j0")
    jitter = ((zlib.crc32(f"{h}:{int(ks[0, 7])}".encode()) % 2001) / 1000.0 - 1.0) * curves[0].noise
    assert many[0, 7] == (1.0 / (curves[0].b0 * ks[0, 7] + 1.0) + curves[0].floor) * (1.0 + jitter)


def test_observed_losses_is_each_jobs_observed_loss_whatever_its_curve():
    jobs = [_waiting("j0", 300.0), _waiting("j1", 0.0), _waiting("j2", 4321.5), _waiting("j3", 77.0)]
    jobs[3].loss_fn = lambda k: 1.0 / (1.0 + k)  # a plain callable: sampled one call at a time
    expected = [[(k, js.loss_fn(k)) for k in np.linspace(js.progress / 50, js.progress, 50)] if js.progress > 0 else []
                for js in jobs]
    assert observed_losses(jobs, 50) == expected
    assert [js.observed_loss(50) for js in jobs] == expected


def test_a_live_job_is_fitted_from_the_samples_its_trainer_reported():
    """The batched prefit reads each job's own `observed_loss`: a live job has no simulated loss
    curve, only the (step, loss) samples its trainer reported (before, the prefit read only the
    simulator's curves, so a live Optimus never got a loss fit)."""
    from dlsched.estimators.convergence_fit import fit_convergence
    from dlsched.estimators.progress_predictor import LOSS_SAMPLES, RemainingWork
    from dlsched.live.controller.job_record import LiveJobState

    spec = JobSpec("j7", 0.0, 1e4, model="duration-only", num_workers=1)
    live = LiveJobState(spec=spec, index=7, clock=Clock(0.0), status=JobStatus.RUNNING)
    live.samples = [(k, 1.0 / (0.002 * k + 1.0) + 0.05) for k in range(10, 3010, 10)]
    live._progress = 3000.0
    assert live.loss_fn is None and live.observed_loss(LOSS_SAMPLES)
    work = RemainingWork()
    work.prefit([live])
    batched = work.fit(live)  # the prefit's fit, not due again
    alone = fit_convergence(live.observed_loss(LOSS_SAMPLES))
    assert batched is not None and alone is not None
    assert (batched.b0, batched.b1, batched.b2) == (alone.b0, alone.b1, alone.b2)
