"""Optimus' resource-speed model: iterations/s of a job as a function of its PSs p and workers w.

Optimus (EuroSys'18) models one iteration's time from its parts and fits the coefficients online
from speeds measured at a few sizes (`pengyanghua/optimus` `scheduler/estimator.py`):

- sync PS:  f(p, w) = 1 / (θ0·M/w + θ1 + θ2·w/p + θ3·w + θ4·p)   (M = global batch)
- async PS: f(p, w) = w / (θ0 + θ1·w/p + θ2·w + θ3·p)

Both are linear in θ after inverting the speed (1/f, resp. w/f), so we fit θ ≥ 0 with
`scipy.optimize.nnls` instead of Optimus' non-linear `curve_fit`: same model, no starting point,
no local minima. Rows are scaled by the measured speed, so the fit minimises the *relative* error
of the iteration time, which keeps a fast small-size point from being drowned by slow big ones.

Forms Optimus does not have (ours, stated):
- all-reduce (p = 0): 1/f = θ0/w + θ1 + θ2·w — compute split over w workers, a fixed
  synchronisation cost, and a ring cost growing with w.
- single worker: 1/f = θ0 — nothing to scale.

A full fit needs as many distinct (p, w) sizes as the form has coefficients (5 sync, 4 async,
3 all-reduce; Optimus' thresholds). With fewer points we use a stated prior: from each measured
point a, f = f_a·(w/w_a)^α·(min(1,p/w)/min(1,p_a/w_a))^β — sub-linear worker scaling, and PSs help
until there is one per worker — and an unmeasured size gets the *largest* of these (optimism in
the face of uncertainty). That is what makes the greedy explore: with the nearest point as the
only anchor, DL2's measured vgg-16 speeds ((1,3) slower than (1,1)) kept a job at (1,1) for its
whole life, never measuring the fifth size the fit needs. Each new size a job runs at adds a point.

A size that was measured is predicted by its measurement (Optimus' `est_speed` does the same).
Points are pooled per job type (`SpeedPool`): Optimus profiles each job type once and shares the
points between jobs of that type.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
from scipy.optimize import nnls

from dlsched.core.job import Architecture, JobSpec, iterations_are_seconds
from dlsched.core.snapshot import JobState

#: Coefficients of each form, i.e. distinct measured sizes a full fit needs.
MIN_POINTS: dict[str, int] = {"sync": 5, "async": 4, "allreduce": 3, "single": 1}

Size = tuple[int, int]  # (ps, workers)


def form_for(spec: JobSpec) -> str:
    """Which speed formula applies. PS jobs are synchronous unless `spec.extra` says otherwise
    (`sync=False`, or an MXNet-style `kv_store` naming `async`)."""
    if spec.arch is Architecture.PS:
        kv = str(spec.extra.get("kv_store", ""))
        if spec.extra.get("sync") is False or "async" in kv:
            return "async"
        return "sync"
    if spec.arch is Architecture.SINGLE or spec.max_workers == 1:
        return "single"
    return "allreduce"


def _design(form: str, p: np.ndarray, w: np.ndarray, batch: float) -> tuple[np.ndarray, np.ndarray]:
    """(features X, multiplier m) such that the model reads f = m / (X @ θ)."""
    p = np.asarray(p, dtype=float)
    w = np.asarray(w, dtype=float)
    one = np.ones_like(w)
    if form == "sync":
        return np.stack([batch / w, one, w / p, w, p], axis=1), one
    if form == "async":
        return np.stack([one, w / p, w, p], axis=1), w
    if form == "allreduce":
        return np.stack([1.0 / w, one, w], axis=1), one
    if form == "single":
        return one[:, None], one
    raise ValueError(f"unknown speed-model form {form!r}")


@dataclass
class SpeedModel:
    """A fitted (or prior-only) speed model for one job type.

    Build with `SpeedModel.fit(form, points)`; `points` maps (ps, workers) to the mean measured
    iterations/s. `theta` is None while there are too few distinct sizes for the full form.

    The coefficients are fitted on first use (`theta`, `rel_rmse`, or a prediction at a size that
    was not measured): a pool rebuilds a type's model whenever a job of the type reports a speed,
    and a rigid job is only ever asked about its own, measured size — on Philly, Optimus refitted
    about 10,000 models on 20,000 jobs that no prediction read. The model is fixed once built
    (new points make a new model), so a later fit gives the numbers an immediate one gave.
    """

    form: str
    points: dict[Size, float] = field(default_factory=dict)
    batch: float = 1.0
    alpha: float = 0.8  # prior: worker-scaling exponent (8 workers ≈ 5.3x)
    beta: float = 0.5  # prior: exponent on the PS-per-worker ratio, capped at 1
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # predict's answers
    _theta: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _rel_rmse: float = field(default=math.nan, init=False, repr=False, compare=False)
    _tried: bool = field(default=False, init=False, repr=False, compare=False)  # `_fit` has run

    @classmethod
    def fit(
        cls, form: str, points: Mapping[Size, float], batch: float | None = None, **prior: float
    ) -> "SpeedModel":
        pts = {(int(p), int(w)): float(f) for (p, w), f in points.items() if f > 0 and w > 0}
        return cls(form=form, points=pts, batch=float(batch or 1.0), **prior)

    @property
    def theta(self) -> np.ndarray | None:
        """The fitted coefficients, None while too few sizes are measured (or the fit failed)."""
        if not self._tried:
            self._tried = True
            self._fit()
        return self._theta

    @property
    def rel_rmse(self) -> float:
        """Fit quality on the measured points (relative iteration time); NaN without a fit."""
        _ = self.theta
        return self._rel_rmse

    @property
    def fitted(self) -> bool:
        return self.theta is not None

    @property
    def source(self) -> str:
        if self.fitted:
            return "fit"
        return "prior" if self.points else "none"

    def _fit(self) -> None:
        if len(self.points) < MIN_POINTS[self.form]:
            return
        if self.form in ("sync", "async") and any(p <= 0 for p, _ in self.points):
            return
        sizes = np.array(list(self.points), dtype=float)
        f = np.array(list(self.points.values()))
        X, m = _design(self.form, sizes[:, 0], sizes[:, 1], self.batch)
        y = m / f  # inverted speed, linear in θ
        A = X / y[:, None]  # relative error: (X θ − y)/y
        scale = np.linalg.norm(A, axis=0)
        scale[scale == 0] = 1.0
        try:
            sol, _ = nnls(A / scale, np.ones(len(y)))
        except (RuntimeError, ValueError):
            return
        theta = sol / scale
        denom = X @ theta
        if not np.all(denom > 0):
            return
        self._theta = theta
        self._rel_rmse = float(np.sqrt(np.mean((denom / y - 1.0) ** 2)))

    def predict(self, p: int, w: int, nearest: bool = False) -> float | None:
        """Iterations/s at (p PSs, w workers); None when nothing at all is known about the type.

        Before a full fit, the prior extrapolates from the measured point that gives the most
        (`nearest=False`, Optimus' optimism, which makes its greedy explore), or from the measured
        point nearest in size (`nearest=True`: what a deadline policy needs before it commits GPUs
        to a job: with bert measured at 1 and 5 GPUs, the 1-GPU point alone says 5.3x at 8 GPUs,
        the 5-GPU point 2.6x (measured: 1.8x))."""
        key = (p, w, nearest)
        memo = self._memo
        if key not in memo:  # a model is fixed once fitted (new points make a new model)
            memo[key] = self._predict(p, w, nearest)
        return memo[key]

    def table(self, hi: int, nearest: bool = False) -> np.ndarray:
        """`predict(0, w, nearest)` for w = 0..hi as an array (NaN where unknown), for a job
        without PSs: what a policy scanning every size of every waiting job reads in one go."""
        key = ("table", hi, nearest)
        memo = self._memo
        if key not in memo:
            memo[key] = np.array([np.nan if (f := self.predict(0, w, nearest)) is None else f
                                  for w in range(hi + 1)], dtype=float)
        return memo[key]

    def _predict(self, p: int, w: int, nearest: bool) -> float | None:
        if w <= 0:
            return 0.0
        hit = self.points.get((int(p), int(w)))
        if hit is not None:
            return hit
        if self.theta is not None:
            X, m = _design(self.form, np.array([p]), np.array([w]), self.batch)
            denom = float(X[0] @ self.theta)
            if denom > 0:
                return float(m[0] / denom)
        return self._prior(p, w, nearest)

    def _prior(self, p: int, w: int, nearest: bool = False) -> float | None:
        """The scaling rule from the measured points: the best it gives, or from the nearest."""
        if not self.points:
            return None
        ps_form = self.form in ("sync", "async")
        if ps_form and p <= 0:
            return 0.0

        def ratio(pp: float, ww: float) -> float:
            return min(1.0, pp / ww) if ps_form else 1.0

        def scaled(point: tuple[Size, float]) -> float:
            (pa, wa), fa = point
            return fa * (w / wa) ** self.alpha * (ratio(p, w) / ratio(pa, wa)) ** self.beta

        if nearest:  # nearest in log size (then the larger), PSs as a tie-break
            return scaled(min(self.points.items(),
                              key=lambda pt: (abs(math.log(w / pt[0][1])), -pt[0][1], abs(pt[0][0] - p))))
        return max(map(scaled, self.points.items()))


@functools.lru_cache(maxsize=1 << 16)
def profile_key(spec: JobSpec, sized: bool = False) -> tuple:
    """Jobs whose measured speeds may be pooled (Optimus: same job type).

    A duration-only job's iterations are seconds at *its* requested size (see
    `throughput.duration_only`), so its speeds are only comparable with jobs of the same size.
    So are those of a job on a measured ElasticFlow curve (`iterations_are_seconds`): `sized`
    tells those apart by requested size too (the QoS framework's estimators do; Optimus pools
    them, as it did when the curves arrived: docs/DECISIONS.md, issue 14).
    Cached (specs are immutable and hash by identity): Optimus asks it for every job in the system
    on every call, twice; the bound keeps a long run's finished specs from piling up.
    """
    key: tuple = (spec.model, form_for(spec), spec.batch_size, spec.worker_demand, spec.ps_demand)
    if spec.model == "duration-only" or (sized and iterations_are_seconds(spec)):
        key += (spec.num_workers,)
    return key


class SpeedPool:
    """Measured speeds pooled per job type, with a fitted model cached until new points arrive.

    `observe(job)` merges the job's `observed_rates` ((nodes, workers, ps) → rate); the same
    size measured on different node counts or by different jobs is averaged, as Optimus does.
    Sums are kept incrementally, so a type measured by thousands of jobs (a trace's rigid
    1-GPU jobs) costs O(sizes), not O(jobs), per refit. A measurement that leaves every mean as
    it was (a duration-only job runs at 1 iteration/s at its size: every one of them) keeps the
    fitted model, so the policies' estimates made from it stay valid too.
    """

    def __init__(self, alpha: float = 0.8, beta: float = 0.5, sized: bool = False):
        self.alpha = alpha
        self.beta = beta
        self.sized = sized  # `profile_key`'s
        self._raw: dict[tuple, dict[tuple, float]] = {}  # type -> (job, nodes, w, p) -> rate
        self._sums: dict[tuple, dict[Size, list[float]]] = {}  # type -> (p, w) -> [sum, count]
        self._models: dict[tuple, SpeedModel] = {}
        self._versions: dict[str, int] = {}  # job -> JobState.version last merged (skip unchanged)

    def observe(self, job: JobState) -> None:
        if not job.observed_rates or self._versions.get(job.job_id) == job.version:
            return
        self._versions[job.job_id] = job.version
        key = profile_key(job.spec, self.sized)
        raw = self._raw.setdefault(key, {})
        sums = self._sums.setdefault(key, {})
        for (nodes, w, p), rate in job.observed_rates.items():
            k = (job.job_id, nodes, w, p)
            old = raw.get(k)
            if old == rate:
                continue
            acc = sums.setdefault((p, w), [0.0, 0])
            mean = acc[0] / acc[1] if acc[1] > 0 else None
            if old is not None and old > 0:
                acc[0] -= old
                acc[1] -= 1
            if rate > 0:
                acc[0] += rate
                acc[1] += 1
            raw[k] = rate
            if (acc[0] / acc[1] if acc[1] > 0 else None) != mean:  # else `points` and the fit are unchanged
                self._models.pop(key, None)

    def points(self, spec: JobSpec) -> dict[Size, float]:
        """Mean measured iterations/s per (ps, workers) for the job's type (zero rates dropped)."""
        sums = self._sums.get(profile_key(spec, self.sized), {})
        return {s: total / n for s, (total, n) in sums.items() if n > 0}

    def current(self, key: tuple) -> SpeedModel | None:
        """The type's model as last built by `model`, or None if its points changed since: a
        caller that kept a model may tell whether it still holds without building anything."""
        return self._models.get(key)

    def model(self, spec: JobSpec, key: tuple | None = None) -> SpeedModel:
        """The fitted (or prior-only) model of the job's type; `key`: its `profile_key`, if known."""
        if key is None:
            key = profile_key(spec, self.sized)
        m = self._models.get(key)
        if m is None:
            m = SpeedModel.fit(
                form_for(spec), self.points(spec), spec.batch_size, alpha=self.alpha, beta=self.beta
            )
            self._models[key] = m
        return m
