"""When will a running job finish? The QoS framework's training-time prediction, from what a live
system observes.

The QoS framework (Xing et al., IJCNN'19) predicts a job's completion once it has run
`min_predict_step` steps since its last (re)submission: per-step time × remaining steps. We do the
same, with two choices of ours:

- Per-step time is the job's measured rate (`JobState.rate`, iterations/s of the current
  allocation: a live system reads it from the trainer's step log). The prototype divides elapsed
  time by steps, which folds the start-up pause into the step time and is why it needed a
  calibration divisor θ (1.2-2); we count the pause separately (`resume_at`), so θ defaults to 1
  and stays available for a live system whose step times drift.
- Remaining steps come from `progress_predictor` (shared with Optimus): exact when the user gave
  the total (`work_known`, the prototype's case), otherwise the job's loss curve fitted with
  Optimus' convergence model, then same-type history, then "halfway". The uncertainty reported
  is that estimate's range turned into time; a job that is not yet predictable (fewer than its
  minimum steps since the last start, or no measured rate) gets no prediction, never a guess.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlsched.core.snapshot import JobState, JobStatus
from dlsched.estimators.progress_predictor import Estimate, RemainingWork

#: Steps a job must have run since its last (re)start before it is predicted (the prototype's
#: value for its LSTM job; a job may set its own in `spec.extra["min_predict_steps"]`).
DEFAULT_MIN_STEPS = 200


@dataclass(frozen=True)
class Prediction:
    """Predicted completion time (absolute) with a range, and what it was computed from."""

    time: float  # predicted completion, absolute seconds
    low: float
    high: float
    remaining_time: float  # seconds of stepping left at the current rate (pause excluded)
    rate: float  # iterations/s the prediction assumes
    source: str  # the remaining-work estimate's source: known | fit | history | halfway | unknown

    @property
    def certain(self) -> bool:
        return self.source == "known"


def min_steps(job: JobState, default: int = DEFAULT_MIN_STEPS) -> float:
    """The job's warm-up before it may be predicted: its own setting or the default."""
    return float(job.spec.extra.get("min_predict_steps", default))


def steps_since_start(job: JobState, now: float) -> float:
    """Steps the job made in its current run (since it last (re)started), from observables only."""
    if job.status is not JobStatus.RUNNING or job.rate <= 0:
        return 0.0
    return job.rate * max(0.0, now - job.resume_at)


class CompletionPredictor:
    """Stateful: keeps the loss-curve fits and finished-job history across calls (`RemainingWork`).

    Call `observe(jobs)` with the jobs that left since the last call (at least: finished jobs'
    totals become their type's history), then `predict`.
    """

    def __init__(self, default_min_steps: int = DEFAULT_MIN_STEPS, theta: float = 1.0, refit_growth: float = 0.5):
        if default_min_steps < 1:
            raise ValueError("default_min_steps must be >= 1")
        if not theta > 0:
            raise ValueError("theta must be > 0")
        self.default_min_steps = default_min_steps
        self.theta = theta
        # refit a job's loss curve when its progress grew 50% (Optimus' users refit at 25%): a fit
        # costs 4-40 ms, and a deadline policy is asked far more often than Optimus' 10-min slots
        # history by requested size where iterations are seconds at it (`profile_key`'s `sized`)
        self.work = RemainingWork(refit_growth=refit_growth, sized=True)

    def observe(self, jobs: list[JobState]) -> None:
        self.work.observe(jobs)

    def remaining(self, job: JobState) -> Estimate:
        """Remaining iterations (shared estimator with Optimus)."""
        return self.work.estimate(job)

    def ready(self, job: JobState, now: float) -> bool:
        """Has the job run long enough in its current configuration to be predicted?"""
        return steps_since_start(job, now) >= min_steps(job, self.default_min_steps)

    def predict(self, job: JobState, now: float) -> Prediction | None:
        """Completion if the job keeps its current allocation; None before its prediction point."""
        if not self.ready(job, now):
            return None
        return self.at_rate(job, now, job.rate * self.theta)  # per-step time / θ

    def at_rate(self, job: JobState, now: float, rate: float, pause: float | None = None) -> Prediction | None:
        """Completion at `rate` iterations/s after `pause` seconds (default: what is left of the
        current restart pause). Used for the current size and for sizes the autoscaler considers."""
        if not rate > 0:
            return None
        est = self.remaining(job)
        if pause is None:
            pause = max(0.0, job.resume_at - now) if job.status is JobStatus.RUNNING else 0.0
        return prediction_at(est, now + pause, rate)


def prediction_at(est: Estimate, start: float, rate: float) -> Prediction:
    """The completion of `est` remaining iterations stepped at `rate` (> 0) from `start`."""
    rem = est.remaining / rate
    return Prediction(
        time=start + rem, low=start + est.low / rate,
        high=start + est.high / rate if math.isfinite(est.high) else math.inf,
        remaining_time=rem, rate=rate, source=est.source,
    )
