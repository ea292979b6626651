"""What the live controller writes down: the store rows and events of each job, its job folder,
and the gauges. Kept apart from the controller so that the driver reads as the core's loop and
this file holds the bookkeeping a restart depends on (allocations by node name, the epoch)."""

from __future__ import annotations

import json
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import GPU, Cluster
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import Clock, JobState
from dlsched.framework.state import ClusterState
from dlsched.live.spec import TrainJob
from dlsched.trainer.protocol import is_done, read_done


@dataclass(eq=False)
class LiveJobState(JobState):
    """A JobState whose loss samples come from the trainer instead of a simulated curve."""

    reports_loss: ClassVar[bool] = True  # `observed_loss_arrays` asks `observed_loss`, not a curve

    train_job: TrainJob | None = None
    samples: list[tuple[int, float]] = field(default_factory=list)
    failures: int = 0  # failed runs without progress past the previous failure
    failed_at_step: float = -1.0
    attempt: int = 0  # runs started so far
    retry_at: float | None = None  # controller time its retry backoff ends (None: not backing off)
    resume_expected: int | None = None  # steps known when its current run was launched (None: adopted)
    resume_noted: str | None = None  # run whose "resume" record was looked at
    ran_before: float = 0.0  # run seconds the store had when this service took the job in (earlier services, retries)

    @classmethod
    def from_view(cls, view, epoch: float, clock: Clock, index: int,
                  spec_of: "Callable[[Any, float], JobSpec] | None" = None) -> "LiveJobState":
        """The state of a stored job, as a restarted service finds it. `spec_of(view, submit_time)`
        gives the scheduler's view of the job instead of `TrainJob.job_spec` (a trace replay: the
        trace's own job, its model and curve, stands behind the stored job)."""
        submit = max(0.0, view.submitted_at - epoch)
        spec = view.spec.job_spec(view.id, submit) if spec_of is None else spec_of(view, submit)
        js = cls(spec=spec, index=index, clock=clock, rank=index, train_job=view.spec,
                 attempt=view.attempt, restarts=view.restarts, ran_before=view.run_time_s or 0.0)
        js.report_progress(float(view.steps_done))
        return js

    def observed_loss(self, points: int = 20) -> list[tuple[float, float]]:
        if not self.samples:
            return []
        idx = np.unique(np.linspace(0, len(self.samples) - 1, min(points, len(self.samples))).astype(int))
        return [(float(self.samples[i][0]), self.samples[i][1]) for i in idx]


class JobRecord:
    """The store and the work dir, as the controller uses them."""

    def __init__(self, store, work_dir: Path, cluster: Cluster, clock: Callable[[], float]):
        self.store, self.work_dir, self.cluster, self.clock = store, work_dir, cluster, clock
        self._published: dict[str, dict] = {}  # what `publish` last wrote per running job

    def epoch(self) -> float:
        """The service's time origin, kept in the store so a restarted service sees the same clock."""
        epoch = self.store.get_meta("epoch")
        if epoch is None:
            epoch = repr(self.clock())
            self.store.set_meta("epoch", epoch)
        return float(epoch)

    def job_dir(self, job_id: str) -> Path:
        return self.work_dir / "jobs" / job_id

    def done_marker(self, job_id: str) -> dict | None:
        """The trainer's completion record when the job finished (even while no service ran)."""
        job_dir = self.job_dir(job_id)
        return (read_done(job_dir) or {}) if is_done(job_dir) else None

    def node_names(self, alloc: Allocation) -> list[str]:
        return [self.cluster.node_names[n] for n in alloc.nodes]

    def stored_allocation(self, job_id: str) -> Allocation | None:
        raw = self.store.get_meta(f"alloc:{job_id}")
        if not raw:
            return None
        index = {name: i for i, name in enumerate(self.cluster.node_names)}
        try:
            placement = {index[name]: (int(w), int(p)) for name, (w, p) in json.loads(raw).items()}
        except (KeyError, ValueError, TypeError):
            return None  # the cluster changed since: restart from the checkpoint instead
        return Allocation.of(placement)

    def retry_state(self, job_id: str) -> dict | None:
        """The retry bookkeeping `save_retry` kept (failures in a row, backoff end), if any."""
        raw = self.store.get_meta(f"retry:{job_id}")
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    def save_retry(self, js: LiveJobState) -> None:
        """Keep a job's failures in a row and backoff end across a restart of the service, so a
        restart neither forgets a crash loop nor places a job before its backoff ends."""
        self.store.set_meta(f"retry:{js.job_id}", json.dumps(
            {"failures": js.failures, "failed_at_step": js.failed_at_step, "retry_at": js.retry_at}))

    def clear_retry(self, job_id: str) -> None:
        """A job ended: a later manual retry starts with a clean count."""
        if self.store.get_meta(f"retry:{job_id}"):
            self.store.set_meta(f"retry:{job_id}", "")

    def noted(self, job_id: str, kind: str, run: str) -> bool:
        """Whether an event of `kind` about trainer run `run` is already recorded (a restarted
        service re-reads the progress log of a run it adopts)."""
        return any(e.kind == kind and (e.data or {}).get("run") == run for e in self.store.events(job_id))

    # ------------------------------------------------------------------ transitions
    def event(self, js: JobState, kind: str, message: str, data: dict | None = None) -> None:
        self.store.add_event(js.job_id, kind, message, data)

    def running(self, js: JobState, alloc: Allocation) -> None:
        """A run started (or was adopted). Its job folder goes into the store here, absolute (a
        client's working directory is not the service's), and stays there after the job ends:
        `dlsched status` and the API show where its checkpoints and logs are."""
        view = self.store.get(js.job_id)
        started_at = view.started_at if view is not None and view.started_at else self.clock()
        self.store.set_meta(f"alloc:{js.job_id}", json.dumps(
            {self.cluster.node_names[n]: [w, p] for n, w, p in zip(alloc.nodes, alloc.workers, alloc.ps)}))
        self.store.update(js.job_id, status="running", workers=alloc.num_workers, ps=alloc.num_ps,
                          nodes=self.node_names(alloc), attempt=getattr(js, "attempt", 0), restarts=js.restarts,
                          started_at=started_at, reason="", job_dir=str(self.job_dir(js.job_id).absolute()))

    @staticmethod
    def run_time_s(js: JobState) -> float | None:
        """Seconds the job held a running allocation over all its runs, earlier services' and
        retries' included (`LiveJobState.ran_before`); None when it never ran. Written each time a
        run ends, so what `dlsched status` shows survives the service; only a run still going when
        a service left running (stopped with `stop_jobs_on_exit: false`, or killed) counts only
        the time a service watched it."""
        total = getattr(js, "ran_before", 0.0) + js.run_time
        return total if total > 0.0 or js.first_start is not None else None

    def save_run_times(self, jobs: list[JobState]) -> None:
        """Write the run time of jobs left running (a service that stops without stopping them:
        the next one adopts them and adds on from there)."""
        self.store.update_many({js.job_id: {"run_time_s": self.run_time_s(js)} for js in jobs})

    def queued(self, js: JobState, kind: str, message: str, step: int | None = None, reason: str = "") -> None:
        """The job waits again (preempted, suspended, its run failed, the service restarted)."""
        fields: dict[str, Any] = {"status": "queued", "workers": 0, "ps": 0, "nodes": [],
                                  "run_time_s": self.run_time_s(js)}
        if step is not None:
            fields["steps_done"] = step
        if reason:
            fields["reason"] = reason
        self.store.update(js.job_id, **fields)
        self.event(js, kind, message, {"step": step if step is not None else int(js.reported_progress)})

    def ended(self, js: JobState, label: str, reason: str, finished_at: float | None = None, **fields: Any) -> None:
        """A terminal state, with its run time. The job folder is recorded again when it exists: a
        job whose runs started under a version that did not record it shows it once it ends."""
        folder = self.job_dir(js.job_id).absolute()
        if folder.is_dir():
            fields.setdefault("job_dir", str(folder))
        self.store.update(js.job_id, status=label, reason=reason,
                          finished_at=self.clock() if finished_at is None else finished_at,
                          workers=0, ps=0, nodes=[], run_time_s=self.run_time_s(js), **fields)
        self.event(js, label, reason)

    # ------------------------------------------------------------------ each round
    def publish(self, state: ClusterState, metrics) -> None:
        """Write running jobs' progress to the store (one transaction, changed rows only), and the gauges."""
        changed = {}
        for jid, js in state.running.items():
            row = {"steps_done": int(js.reported_progress), "steps_per_s": js.rate or None,
                   "loss": js.samples[-1][1] if getattr(js, "samples", None) else None}
            if self._published.get(jid) != row:
                changed[jid] = self._published[jid] = row
        self.store.update_many(changed)
        if metrics is not None:
            metrics.gpu_slots_total.set(float(state.capacity[:, GPU].sum()))
            metrics.gpu_slots_used.set(float(state.used[:, GPU].sum()))
            for jid, js in state.running.items():
                metrics.job_steps_per_second.labels(job=jid).set(js.rate)

    def forget(self, job_id: str, metrics) -> None:
        self._published.pop(job_id, None)
        if metrics is not None:
            with suppress(KeyError):
                metrics.job_steps_per_second.remove(job_id)

