"""The autoscaler's prediction records: one per run, made at the run's prediction point.

Why deferred: a record is for error reports (`dlsched experiment qos`); only a job that may grow
(it has a deadline) needs its prediction at once. A job without a deadline is predicted only for
its record, and its prediction is the costly part of a run (a loss-curve fit with its 99% range,
a few ms: 58,005 of full Philly's 82,247 jobs run the 200 s to their prediction point). So such a record keeps what the
prediction reads at that moment and computes it when the records are first read — the same
numbers, in the same order:

- the remaining-work estimate reads the job's progress (kept), its loss samples up to it (a pure
  function of the job's loss curve and that progress: `observed_losses` of a view at it), the
  predictor's cached fit of that job (`RemainingWork.fit`: refit once progress grew 25%; replayed
  in creation order, and no other phase reads the fit of a job without a deadline: admission,
  EDF and growing read only jobs with one), and the history of finished totals of its type, read
  only when there is no fit: that estimate is taken at once (a bisection, cheap);
- the rate and the pause left are kept.
A job finishing removes its cached fit; replayed later, the fit stays cached (nothing reads it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from dlsched.core.job import JobSpec
from dlsched.core.snapshot import JobState, observed_losses
from dlsched.estimators.completion_predictor import CompletionPredictor, Prediction, prediction_at
from dlsched.estimators.progress_predictor import Estimate, combine

Key = tuple[str, float]  # (job id, start of its run)


@dataclass(frozen=True)
class PredictionRecord:
    """A prediction made at a job's prediction point in one configuration (for error reports)."""

    job_id: str
    made_at: float
    workers: int
    ps: int
    prediction: Prediction


@dataclass(frozen=True)
class _AtProgress:
    """A job as it was at `progress`: what the remaining-work estimate reads of it."""

    job_id: str
    spec: JobSpec
    progress: float
    declared_work: float | None
    loss_fn: Callable[[float], float] | None

    def observed_loss(self, points: int = 20) -> list[tuple[float, float]]:
        return observed_losses([self], points)[0]  # type: ignore[list-item]


@dataclass(frozen=True)
class _Deferred:
    """A record whose prediction is computed on first read (see the module docstring)."""

    job_id: str
    made_at: float
    workers: int
    ps: int
    predictor: CompletionPredictor
    view: _AtProgress
    without_fit: Estimate  # the estimate if the job has no fit (declared work, history, halfway)
    start: float  # when it steps again (now + the pause left)
    rate: float

    def resolve(self) -> PredictionRecord:
        fit = self.predictor.work.fit(self.view)  # type: ignore[arg-type]
        est = self.without_fit if fit is None else combine(self.view, fit)  # type: ignore[arg-type]
        return PredictionRecord(self.job_id, self.made_at, self.workers, self.ps,
                                prediction_at(est, self.start, self.rate))


@dataclass(eq=False)
class Records:
    """Prediction records by (job id, run start), in the order they were made; `all()` gives them
    with every deferred prediction computed."""

    _by_key: dict[Key, Any] = field(default_factory=dict)
    _deferred: list[Key] = field(default_factory=list)

    def __contains__(self, key: Key) -> bool:
        return key in self._by_key

    def add(self, key: Key, record: PredictionRecord) -> None:
        self._by_key[key] = record

    def defer(self, key: Key, predictor: CompletionPredictor, job: JobState, now: float) -> None:
        """Record the prediction `predictor.predict(job, now)` would give (the job is ready, at a
        rate > 0, has no deadline), computed when the records are read."""
        view = _AtProgress(job.job_id, job.spec, job.progress, job.declared_work, job.loss_fn)
        without_fit = combine(view, None, predictor.work.history(job))  # type: ignore[arg-type]
        self._by_key[key] = _Deferred(job.job_id, now, job.num_workers, job.num_ps, predictor, view, without_fit,
                                      now + max(0.0, job.resume_at - now), job.rate * predictor.theta)
        self._deferred.append(key)

    def all(self) -> dict[Key, PredictionRecord]:
        by_key = self._by_key
        for key in self._deferred:
            by_key[key] = by_key[key].resolve()
        self._deferred.clear()
        return by_key

    def clear(self) -> None:
        self._by_key.clear()
        self._deferred.clear()
