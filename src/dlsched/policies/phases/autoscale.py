"""The QoS framework's autoscaler as a sizing phase: grow a job that would miss its deadline.

What the prototype does (Xing et al., IJCNN'19, `ksdl`; seed-systems.md section 4): once a job
has run `min_predict_step` steps since its last (re)submission, predict its completion; if that is
after the deadline and the job is below its worker cap, resize it (restart-based) to

    n_new = ceil(c · n · T_pred / (deadline − now − start-up/load delay))

capped at the maximum, then predict again after the warm-up, until the prediction meets the
deadline or the cap is reached. PS CPU follows the worker count (vertical scaling).

Our choices where the prototype is silent or specific to its testbed:
- T_pred is the predicted *remaining* stepping time at the current size (our engine checkpoints,
  so a restart keeps progress); the start-up/load delay is the engine's `restart_overhead`, which
  a live controller would set to its measured pod restart time.
- The rule assumes linear scaling (c corrects it). When the job type's fitted speed model
  (Optimus' estimator, shared) says n_new still misses, n_new grows until it does not (or the cap);
  and a resize is made only if it is predicted to finish earlier than staying put, restart
  included — near the deadline a restart can cost more than it gains.
- A job never shrinks (the prototype never scales down), so it grows only to a size predicted to
  meet its deadline: a job that misses at every size keeps its size. A job that started smaller
  than it asked (it did not fit then) is not given its requested size back unless it is predicted
  to miss (tried: on the embedded ITP slice qos met 80.0% instead of 83.3% with it).
- Sizing a job submitted with only a deadline (`extra["size_by"] == "deadline"`): it starts at
  the smallest size the speed model predicts meets the deadline with one restart to spare; with
  no speed measured for its type yet, at its default (the prototype's 1 PS + 1 worker). A job
  with a requested size starts at that size and may only grow.
- Vertical PS scaling: `ps_for` (the job's `extra["ps_steps"]` table).

The phase never returns more than `max_workers`; what fits the cluster is the realiser's job
(with `ps_steps_shrink` it shrinks a resize to the largest size that fits). The phase owns the
estimators it shares with admission and ordering: it feeds them (`observe`), clears them
(`reset`) and asks to be woken when the next running job reaches its prediction point (`wake_at`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Iterator

from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import JobState, JobStatus, Snapshot
from dlsched.estimators.completion_predictor import CompletionPredictor, Prediction
from dlsched.policies.phases.deadline import EarliestFinish
from dlsched.policies.phases.records import PredictionRecord, Records
from dlsched.policies.phases.sizing import ps_for

INITIAL = ("predict", "default")
#: `wake_at` asks for a call this long after a job's prediction point, so the job is ready then.
WAKE_AFTER = 1e-6
_RANK = attrgetter("rank")
_RUN = attrgetter("last_start", "rate", "resume_at")  # a run's readiness changes only with these


def ps_steps_shrink(spec: JobSpec, workers: int, ps: int) -> Iterator[tuple[int, int]]:
    """The realiser's shrink rule here: one worker fewer at a time, PSs by the job's vertical
    scaling table (`ps_for`)."""
    for w in range(workers - 1, spec.min_workers - 1, -1):
        yield w, ps_for(spec, w)


@dataclass(eq=False)
class Autoscaler:
    """Sizing phase (see the module docstring). `c` is the default calibration constant; a job's
    `extra["scale_c"]` overrides it (the prototype: 1.09 LSTM, 1 GAN and autoencoder)."""

    finish: EarliestFinish
    c: float = 1.0
    initial: str = "predict"
    scale: bool = True
    records: Records = field(default_factory=Records)  # read them through `predictions`
    last_reason: dict[str, str] = field(default_factory=dict)
    _ready: dict[JobState, tuple] = field(default_factory=dict)  # job -> (last_start, rate, resume_at) seen ready
    _default: dict[str, tuple[int, int]] = field(default_factory=dict)  # waiting job -> its fixed start size
    _scanned: tuple = field(default=(None, None), repr=False)  # (snapshot, `_scan`'s answer for it)

    def __post_init__(self) -> None:
        if not self.c > 0:
            raise ConfigError(f"autoscaler: c must be > 0, got {self.c}")
        if self.initial not in INITIAL:
            raise ConfigError(f"autoscaler: initial must be one of {', '.join(INITIAL)}, got {self.initial!r}")

    @property
    def predictions(self) -> dict[tuple[str, float], PredictionRecord]:
        """Each run's prediction record by (job id, run start), in the order they were made."""
        return self.records.all()

    def observe(self, snap: Snapshot) -> None:
        self.finish.observe(snap)
        for j in snap.finished:
            self._ready.pop(j, None)
            self._default.pop(j.job_id, None)

    def reset(self) -> None:
        pred = self.finish.predictor
        self.finish.predictor = CompletionPredictor(pred.default_min_steps, pred.theta)
        old = self.finish.speeds
        self.finish.speeds = type(old)(old.alpha, old.beta, old.sized)
        self.finish.forget_seen()
        self.finish.deadlines.reset()  # in place: the ordering shares it
        self.records.clear()
        self.last_reason.clear()
        self._ready.clear()
        self._default.clear()
        self._scanned = (None, None)

    def wake_at(self, snap: Snapshot) -> float | None:
        """When the next running job reaches its prediction point, so the autoscaler acts then
        and not up to a whole interval later (a live controller would watch the step counter)."""
        return self._scan(snap)[0]

    def record_ready(self, snap: Snapshot) -> None:
        """Make the prediction record `size` would make, for a caller that does not size running
        jobs (while none can grow, their size is their current one): the running jobs that
        reached their prediction point since the last scan, in rank order as `size` meets them.
        Why it suffices: every full call scans, and `size` records a job on the call its scan
        first finds it ready, so a job not found newly ready already has its record or is not ready."""
        for job in sorted(self._scan(snap)[1], key=_RANK):
            self.grow(snap, job)

    def _scan(self, snap: Snapshot) -> tuple[float | None, list[JobState]]:
        """(next prediction point + `WAKE_AFTER`, running jobs found ready for the first time),
        once per snapshot: one pass over the running jobs serves `record_ready` and `wake_at`."""
        if self._scanned[0] is snap:
            return self._scanned[1]
        pred = self.finish.predictor
        times, newly = [], []
        ready = self._ready
        running = snap.running
        # a run that was ready stays so while its start, rate and pause are unchanged (steps only
        # grow): only the others are looked at, found by one set difference (C speed, not one
        # Python step per running job; min and a rank sort make the iteration order irrelevant)
        for j, seen in dict(zip(running, map(_RUN, running))).items() - ready.items():
            if j.rate > 0:
                if pred.ready(j, snap.now):
                    ready[j] = seen
                    newly.append(j)
                    continue
                steps = float(j.spec.extra.get("min_predict_steps", pred.default_min_steps))
                times.append(j.resume_at + steps / j.rate + WAKE_AFTER)
        later = [t for t in times if t > snap.now]
        out = (min(later) if later else None, newly)
        self._scanned = (snap, out)
        return out

    def size(self, snap: Snapshot, jobs: list[JobState]) -> list[tuple[JobState, int, int]]:
        out = []
        default = self._default
        for job in jobs:
            running = job.status is JobStatus.RUNNING
            if not running and (size := default.get(job.job_id)) is not None:
                out.append((job, *size))
                continue
            w = self.grow(snap, job) if running else self.start_size(snap, job)
            w = max(job.spec.min_workers, min(w, job.spec.max_workers))
            ps = job.num_ps if running and w == job.num_workers else ps_for(job.spec, w)
            if not running and self._at_default(job.spec):  # fixed for the job's life: sized once
                default[job.job_id] = (w, ps)
            out.append((job, w, ps))
        return out

    # ------------------------------------------------------------------ pending jobs
    def _at_default(self, spec: JobSpec) -> bool:
        """A waiting job starts at its requested size whatever the clock (fixed for its life)."""
        return self.initial == "default" or spec.deadline is None or not spec.elastic

    def start_size(self, snap: Snapshot, job: JobState) -> int:
        spec = job.spec
        by_deadline = spec.extra.get("size_by") == "deadline"
        lo = spec.min_workers if by_deadline else spec.num_workers
        default = spec.num_workers
        if self._at_default(spec):
            return default
        target = spec.deadline - snap.restart_overhead  # room for one corrective resize
        w = self.finish.first_size(snap, job, lo, spec.max_workers, target)
        # None: speed or work unknown (start as asked and measure), or even the largest size
        # misses (the feasibility phase says so; do not hog)
        return default if w is None else w

    # ------------------------------------------------------------------ running jobs
    def grow(self, snap: Snapshot, job: JobState) -> int:
        n = job.num_workers
        spec = job.spec
        d = spec.deadline
        may_grow = self.scale and d is not None and n < spec.max_workers
        key = (job.job_id, float(job.last_start or 0.0))
        records, predictor = self.records, self.finish.predictor
        if not may_grow and key in records:
            # settled: it keeps its size and its run's prediction record is made, so a prediction
            # would feed nothing (on rigid jobs without deadlines, Philly: every running job, every call)
            return n
        if d is None:  # predicted only for its record: made when the records are read
            if predictor.ready(job, snap.now) and job.rate * predictor.theta > 0:
                records.defer(key, predictor, job, snap.now)
            return n
        pred = predictor.predict(job, snap.now)
        if pred is None:
            return n  # before the prediction point
        if key not in records:
            records.add(key, PredictionRecord(job.job_id, snap.now, n, job.num_ps, pred))
        target = self._to_meet(snap, job, pred) if may_grow and pred.time > d else n
        if target <= n:
            return n
        t_new = self.finish.at(snap, job, target)
        if t_new is not None and t_new >= pred.time:
            self.last_reason[job.job_id] = f"resizing to {target} workers would not finish earlier"
            return n
        return target

    def _to_meet(self, snap: Snapshot, job: JobState, pred: Prediction) -> int:
        """The prototype's n_new for a running job predicted to miss: the smallest size (from the
        linear rule up) that the speed model predicts meets the deadline; its current size when
        none does. (Judging "none does" more hopefully — linear scaling from the job's nearest
        measured size — met fewer deadlines on the embedded ITP slice, 75.3% vs 80.0%, and the
        same on the paper's quick rerun; the model's prior can be pessimistic for a PS job with
        few PSs, tests/test_qos_autoscale.py.) Why not grow anyway: on sublinear curves the largest size buys a job that
        misses anyway little time for many GPUs, which it keeps (the autoscaler never shrinks a
        job) while jobs that can still make their deadline wait or are preempted for them."""
        n, spec, d = job.num_workers, job.spec, job.spec.deadline
        left = d - snap.now - snap.restart_overhead
        if left <= 0:
            self.last_reason[job.job_id] = "too close to its deadline for a restart to pay"
            return n
        c = float(spec.extra.get("scale_c", self.c))
        n_new = math.ceil(c * n * pred.remaining_time / left)
        n_new = max(n + 1, min(n_new, spec.max_workers))
        at = self.finish.times(snap, job)
        while n_new < spec.max_workers:
            t = at(n_new)
            if t is None or t <= d:
                break
            n_new += 1
        t = at(n_new)
        if t is not None and t > d:
            self.last_reason[job.job_id] = (f"even {n_new} workers would miss its deadline "
                                            f"({t - d:.0f} s late): not grown")
            return n
        return n_new
