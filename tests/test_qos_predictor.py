"""The completion predictor: silent before its prediction point, exact with known work and a known
speed, and converging on the truth when the work must be fitted from the loss curve."""

from __future__ import annotations

import math

import pytest

from dlsched.core import JobSpec
from dlsched.core.snapshot import Clock, JobState, JobStatus
from dlsched.estimators.completion_predictor import CompletionPredictor, steps_since_start
from dlsched.sim.convergence import loss_curve

RATE = 4.0  # iterations/s: the synthetic job's known speed
TOTAL = 20_000.0


def running_job(done: float, *, work_known: bool, start: float = 100.0, pause: float = 10.0) -> JobState:
    """A job that started at `start`, paused `pause` s, then ran at RATE until it had done `done`."""
    spec = JobSpec(job_id="j", submit_time=0.0, iterations=TOTAL, work_known=work_known, deadline=9_000.0,
                   extra={"min_predict_steps": 300})
    resume = start + pause
    clock = Clock(resume + done / RATE)
    js = JobState(spec=spec, index=0, clock=clock, status=JobStatus.RUNNING, rate=RATE,
                  last_update=resume, resume_at=resume, first_start=start, last_start=start)
    js.loss_fn = loss_curve("j", TOTAL, seed=0, noise=0.01)
    return js


def test_no_prediction_before_min_steps():
    js = running_job(299 * 1.0, work_known=True)
    p = CompletionPredictor()
    assert steps_since_start(js, js.clock.now) == pytest.approx(299)
    assert p.predict(js, js.clock.now) is None
    js.clock.now += 1.0 / RATE * 2
    assert p.predict(js, js.clock.now) is not None


def test_known_work_and_speed_give_the_true_completion():
    js = running_job(400.0, work_known=True)
    pred = CompletionPredictor().predict(js, js.clock.now)
    truth = 110.0 + TOTAL / RATE
    assert pred.source == "known"
    assert pred.time == pytest.approx(truth)
    assert pred.low == pytest.approx(truth) and pred.high == pytest.approx(truth)


def test_pause_still_owed_is_counted():
    js = running_job(0.0, work_known=True)
    js.clock.now = 105.0  # inside the restart pause
    pred = CompletionPredictor().at_rate(js, js.clock.now, RATE)
    assert pred.time == pytest.approx(110.0 + TOTAL / RATE)


def test_fitted_prediction_converges_and_reports_its_uncertainty():
    truth = 110.0 + TOTAL / RATE
    errors, widths = [], []
    for frac in (0.1, 0.3, 0.6, 0.9):
        js = running_job(frac * TOTAL, work_known=False)
        pred = CompletionPredictor().predict(js, js.clock.now)
        assert pred is not None and pred.source == "fit"
        errors.append(abs(pred.time - truth) / truth)
        widths.append((pred.high - pred.low) / truth)
        assert pred.low <= pred.time <= pred.high
    assert errors[-1] < 0.02, errors
    assert errors[-1] <= errors[0] + 1e-9, errors
    assert widths[-1] < widths[0], widths  # more of the curve seen, narrower range
    assert math.isfinite(widths[-1])


def test_theta_divides_the_step_time():
    js = running_job(400.0, work_known=True)
    fast = CompletionPredictor(theta=2.0).predict(js, js.clock.now)
    assert fast.rate == pytest.approx(2 * RATE)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        CompletionPredictor(default_min_steps=0)
    with pytest.raises(ValueError):
        CompletionPredictor(theta=0)
