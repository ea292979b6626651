"""The live controller: a thin driver of the one scheduling core on wall-clock time.

observe the backend → fold into `ClusterState` → snapshot → policy → diff → Actions to the backend.
The job lifecycle, the accounting of used and held resources, plan validation and the trigger rule
are the simulator's own (`dlsched.framework`), so a policy cannot tell a live job from a simulated
one: progress is the trainer's reported step, `rate` its measured steps/s, `observed_rates` the
speed measured at each size (what Optimus' speed fit learns from), `observed_loss` the reported
loss samples. A hold reserves resources and launches nothing, as in the simulator. A policy that
needs ground truth (an oracle) cannot run here and is refused before anything starts.

A decision that fails — a plan the core refuses, or an exception in the policy — changes nothing;
it is kept in `last_error` until a decision succeeds, and /healthz, the status page and /metrics
show it. Actions are carried out in the core's order: preemptions first (they free resources),
hold changes, then starts and resizes (restart-based: checkpoint, stop, start at the new size; the
pause until the first step at the new size is measured and becomes the `restart_overhead` the
policies see), then rejections.

The store is the only channel to the API: new jobs and cancel requests are read from it, status
is written back. Times are seconds since the service's epoch, kept in the store, so a restarted
service sees the same clock.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.errors import ConfigError, PlanError
from dlsched.core.policy import Policy
from dlsched.core.snapshot import Clock, JobStatus
from dlsched.framework.actions import Action, Kind
from dlsched.framework.state import ClusterState
from dlsched.framework.triggers import Triggers
from dlsched.live.backend import Backend, Launch, Observation
from dlsched.live.admission import admission_problems
from dlsched.live.job_record import JobRecord, LiveJobState
from dlsched.live.spec import TrainJob
from dlsched.live.waiting import waiting_reasons
from dlsched.live.retry import RetryConfig, waiting_note
from dlsched.live.runs import one_line

log = logging.getLogger("dlsched.controller")

#: What a policy may assume a resize costs before any has been measured.
DEFAULT_RESTART_OVERHEAD = 5.0


def live_refusal(policy: Policy) -> str:
    """Why `policy` cannot run live ("" when it can): said when the service starts, never later."""
    if policy.oracle:
        return (f"policy {policy.name!r} is an oracle: it decides from ground truth (a job's true remaining "
                "work and speed) that only the simulator has; it cannot schedule real jobs")
    if policy.offline_only:
        return f"policy {policy.name!r} cannot schedule real jobs: {policy.offline_only}"
    return ""


class Controller:
    """Drives one backend with one policy, using the store as its queue and its record."""

    def __init__(self, store, backend: Backend, policy: Policy, *, work_dir: Path, tick: float = 1.0,
                 metrics=None, clock: Callable[[], float] = time.time, seed: int = 0, stop_timeout: float = 30.0,
                 restart_overhead: float = DEFAULT_RESTART_OVERHEAD, retry: RetryConfig | None = None):
        refusal = live_refusal(policy)
        if refusal:
            raise ConfigError(refusal)
        self.backend, self.policy, self.metrics, self.clock = backend, policy, metrics, clock
        self.tick, self.stop_timeout = tick, stop_timeout
        self.assumed_restart = restart_overhead  # until a pause is measured
        self.retry = retry or RetryConfig()
        self.backing_off: dict[str, LiveJobState] = {}  # failed runs waiting out their backoff (parked)
        self.cluster = backend.cluster()
        self.rng = np.random.default_rng(seed)
        self.record = JobRecord(store, Path(work_dir), self.cluster, clock)
        self.store = store
        self.epoch = self.record.epoch()
        self.time = Clock(self.now())
        self.state = ClusterState(self.cluster, self.time)
        self.triggers = Triggers(policy.on_events, policy.interval, self.time.now, policy.name)
        self.admitted = 0  # jobs taken in so far: their arrival rank, as in the simulator
        self.decisions = 0
        self.decision_times: list[float] = []
        self.pauses: list[float] = []  # measured resize/restart pauses: stop asked -> first step
        self.startups: list[float] = []  # first starts: launch asked -> first step
        self._pending_pause: dict[str, tuple[float, str]] = {}  # job -> (unix time asked, kind)
        self._happened: set[str] = set()
        self.last_error = ""  # why the last decision failed; "" once one succeeds
        # Why queued jobs wait: `waiting_notes` is for any part of the controller to set and wins
        # over the computed reason (a job backing off gets its retry note from `backing_off` the
        # same way, in `_publish_waiting`); `_policy_said` is the policy's own word at its last
        # decision; `_waiting` is what the store shows now.
        self.waiting_notes: dict[str, str] = {}
        self._policy_said: dict[str, str] = {}
        self._last_decision: float | None = None
        self._waiting: dict[str, str] = {}
        self._lock = threading.Lock()
        policy.reset(self.cluster, seed)
        self._recover()

    def now(self) -> float:
        """Seconds since the service's epoch: the policies' clock."""
        return self.clock() - self.epoch

    # ------------------------------------------------------------------ recovery
    def _recover(self) -> None:
        """Take back every job the store says is not finished (after a restart of the service).

        A job recorded as running is re-adopted when its processes are still alive; if it
        finished meanwhile it is marked done (never run again); otherwise it waits for the policy
        and resumes from its checkpoint."""
        for view in self.store.list(["queued", "running"]):
            if view.waiting_reason:  # the last service's word: replaced (or cleared) on the first round
                self._waiting[view.id] = view.waiting_reason
            js = self._admit(view)
            if view.status != "running" or js.status is not JobStatus.PENDING:
                continue
            alloc = self.record.stored_allocation(view.id)
            done = self.record.done_marker(view.id)
            if done is not None:  # its trainer finished while no service watched: say so
                self.record.event(js, "recovered", "finished while the service was down: marked done, not rerun")
                self._finish(js, done)
            elif alloc is not None and self.backend.adopt(self._launch(js, alloc, attempt=max(view.attempt - 1, 0))):
                self.state.start(js, alloc, self.time.now, count_restart=False)
                self.record.running(js, alloc)
                self.record.event(js, "adopted", "re-attached to its running processes")
            else:
                js.last_stop = self.time.now
                self.record.queued(js, "recovered", "service restarted: resumes from its checkpoint")

    def _admit(self, view) -> LiveJobState:
        js = LiveJobState.from_view(view, self.epoch, self.time, index=self.admitted)
        self.admitted += 1
        reason = self.state.arrive(js, self.time.now)
        demand = view.spec.demand_problems()
        if not reason and demand:  # stored before the rule, or by a client that skipped it
            reason = f"{demand[0][0]}: {demand[0][1]}"
            self.state.end(js, self.time.now, JobStatus.REJECTED, reason)
        if reason:
            self.record.ended(js, "rejected", reason)
            return js
        self._happened.add("arrival")
        kept = self.record.retry_state(view.id)
        if kept:  # a service restarted while the job backed off: the count and the wait carry over
            js.failures, js.failed_at_step = int(kept.get("failures", 0)), float(kept.get("failed_at_step", -1.0))
            until = kept.get("retry_at")
            if view.status == "queued" and isinstance(until, (int, float)) and until > self.time.now:
                self._park(js, float(until))
        return js

    # ------------------------------------------------------------------ one round
    def step(self) -> None:
        """One round: read the store, observe the backend, decide if due, act, write back."""
        with self._lock:
            self.time.now = self.now()
            self._ingest()
            self._end_backoffs()
            self._observe()
            reasons = self.triggers.due(self.time.now, self._happened)
            self._happened = set()
            if reasons and (self.state.pending or self.state.running):
                self._decide(reasons)
            self.record.publish(self.state, self.metrics)
            self._publish_waiting()
            self._forget_ended()

    def run(self, stop: threading.Event) -> None:
        """`step` every `tick` seconds until `stop` is set; an error in one round is logged, not fatal."""
        while not stop.is_set():
            try:
                self.step()
            except Exception:  # keep serving: the next round may succeed (e.g. a transient DB lock)
                log.exception("controller round failed")
            stop.wait(self.tick)

    def _ingest(self) -> None:
        for view in self.store.list(["queued", "running"]):
            js = self.state.jobs.get(view.id)
            if js is None:
                js = self._admit(view)
                if js.status is JobStatus.PENDING:
                    self.record.event(js, "queued", "waiting for the policy")
            if view.cancel_requested and js.status in (JobStatus.PENDING, JobStatus.RUNNING):
                if js.status is JobStatus.RUNNING:
                    self.backend.stop(view.id, self.stop_timeout)
                    self.backend.forget(view.id)
                    self._count("cancel")
                self._end(js, JobStatus.UNFINISHED, "cancelled", "cancelled by the user")

    def _observe(self) -> None:
        obs = self.backend.observe()
        for js in list(self.state.running.values()):
            o = obs.get(js.job_id)
            if o is None:
                continue
            self._fold(js, o)
            self._note_resume(js, o)
            done = self.record.done_marker(js.job_id)
            if o.state == "done" or done is not None:  # finished, even while its ranks still exit:
                self._finish(js, done or {})  # never resize or restart a complete job (`forget` stops the rest)
            elif o.state in ("failed", "stopped"):
                self._failed(js, o)

    def _fold(self, js: LiveJobState, o: Observation) -> None:
        js.settle(self.time.now)
        js.report_progress(o.step)
        if o.samples:
            js.samples = list(o.samples)
        pending = self._pending_pause.get(js.job_id)
        if o.first_step_at is not None and pending is not None and o.first_step_at >= pending[0]:
            del self._pending_pause[js.job_id]
            pause, kind = o.first_step_at - pending[0], pending[1]
            (self.startups if kind == "start" else self.pauses).append(pause)
            if kind != "start" and self.metrics is not None:
                self.metrics.resize_pause_seconds.observe(pause)
            self.record.event(js, "first-step", f"{kind}: first step {pause:.2f} s after it was asked",
                              {"pause_s": pause, "kind": kind})
        js.rate = float(o.steps_per_s) if o.steps_per_s and o.first_step_at is not None else 0.0
        a = js.allocation
        if js.rate and a is not None:
            js.observed_rates[(a.num_nodes, a.num_workers, a.num_ps)] = js.rate

    def _failed(self, js: LiveJobState, o: Observation) -> None:
        """A run died without finishing: retried from its checkpoint after a backoff (`live/retry.py`),
        or, after `retry.attempts` failures in a row without getting further, the job has failed.
        The event keeps the whole message (log tails); the job's reason is one line."""
        self.backend.forget(js.job_id)
        if o.step > js.failed_at_step:  # it got further than last time: not a crash loop
            js.failures = 0
        js.failures += 1
        js.failed_at_step = max(js.failed_at_step, float(o.step))
        self._happened.add("failure")  # its resources came free
        summary = one_line(o.message) or f"run {o.state}"
        attempts = self.retry.attempts
        data = {"step": int(o.step), "failures": js.failures, "attempts": attempts, "summary": summary}
        if js.failures >= attempts:
            self.record.event(js, "failed-run", o.message or summary, data)
            runs = "1 run failed" if attempts == 1 else f"{js.failures} runs failed in a row without getting further"
            self._end(js, JobStatus.UNFINISHED, "failed", f"{runs}; last: {summary}")
            return
        delay = self.retry.delay(js.failures)
        self.state.stop(js, self.time.now, preempted=False)
        note = waiting_note(self.time.now + delay, self.time.now, js.failures + 1, attempts)
        self.record.queued(js, "failed-run", o.message or summary, reason=f"run failed: {summary}; {note}")
        if delay > 0:
            self._park(js, self.time.now + delay)
            self.record.event(js, "backoff", note, {**data, "delay_s": delay, "retry_at": self.epoch + js.retry_at})
        else:  # no backoff: it waits for the policy at once, as after a node failure in the simulator
            self.record.save_retry(js)

    def _park(self, js: LiveJobState, until: float) -> None:
        """The job waits out its backoff where no policy sees it (`ClusterState.park`)."""
        js.retry_at = until
        self.state.park(js)
        self.backing_off[js.job_id] = js
        self.record.save_retry(js)

    def _end_backoffs(self) -> None:
        """Jobs whose backoff is over wait for the policy again."""
        for jid, js in list(self.backing_off.items()):
            if js.retry_at is not None and js.retry_at > self.time.now:
                continue
            del self.backing_off[jid]
            js.retry_at = None
            self.state.unpark(js)
            self.record.save_retry(js)
            self.record.event(js, "retry", f"backoff over: waiting for the policy (attempt {js.failures + 1}/"
                              f"{self.retry.attempts})")
            self._happened.add("arrival")  # it is back in the queue

    def waiting_note(self, job_id: str) -> str:
        """Why a queued job is not placed, as far as retries go: "retrying in 40 s (attempt 2/5)",
        or "" when it is not backing off (what the API and status page can show)."""
        js = self.backing_off.get(job_id)
        if js is None or js.retry_at is None:
            return ""
        return waiting_note(js.retry_at, self.now(), js.failures + 1, self.retry.attempts)

    def _note_resume(self, js: LiveJobState, o: Observation) -> None:
        """Turn the trainer's "resume" record into an event when the run did not start where the
        job was: a newer checkpoint was bad (fallback), none was usable, or none was there."""
        rec = o.resume
        run = rec.get("run") if rec is not None else None
        if rec is None or run == js.resume_noted:
            return
        js.resume_noted = run
        step = rec.get("step") if isinstance(rec.get("step"), int) else 0
        problems = [str(p) for p in rec.get("problems") or []]
        used = rec.get("checkpoint")
        known = js.resume_expected
        lost = max(0, known - step) if known is not None else None
        steps_lost = f", {lost} steps lost" if lost is not None else ""
        if problems and used:
            kind = "checkpoint-fallback"
            msg = f"newest checkpoint unusable ({problems[0]}): resumed from {used} at step {step}{steps_lost}"
        elif problems:
            kind = "checkpoint-unusable"
            msg = f"no usable checkpoint ({'; '.join(problems)}): restarting from step 0{steps_lost}"
        elif used is None and known:
            kind, msg = "checkpoint-missing", f"checkpoint missing: restarting from step 0, {lost} steps lost"
        else:
            return
        if known is None and self.record.noted(js.job_id, kind, run):
            return  # an adopted run: said before this service restarted
        self.record.event(js, kind, msg, {"run": run, "step": step, "lost_steps": lost, "checkpoint": used,
                                          "problems": problems})

    # ------------------------------------------------------------------ decisions
    def _decide(self, reasons: tuple[str, ...]) -> None:
        restart = statistics.median(self.pauses) if self.pauses else self.assumed_restart
        snap = self.state.snapshot(self.time.now, reasons, restart, rng=self.rng)
        t0 = time.perf_counter()
        try:
            plan = self.policy.schedule(snap)
            said = self._policy_reasons(snap, plan)
            actions = self.state.diff(plan, self.time.now, self.policy.name)
        except PlanError as exc:  # a policy bug: keep the cluster as it is and say why
            self._decision_failed(f"plan refused: {exc}")
            return
        except Exception as exc:  # the policy itself failed: the same, visibly
            log.exception("policy %r failed", self.policy.name)
            self._decision_failed(f"policy {self.policy.name!r} failed: {type(exc).__name__}: {exc}")
            return
        finally:
            spent = time.perf_counter() - t0
            self.decisions += 1
            self.decision_times.append(spent)
            if self.metrics is not None:
                self.metrics.decision_seconds.observe(spent)
        self.last_error = ""
        self._policy_said, self._last_decision = said, self.time.now
        if self.metrics is not None:
            self.metrics.decision_failing.set(0)
        self.triggers.wake_at(plan.wake_at, self.time.now)
        for a in actions:
            self._act(a)

    def _policy_reasons(self, snap, plan) -> dict[str, str]:
        """The policy's own words on its waiting jobs; a failure there only costs the words."""
        try:
            return {str(k): str(v) for k, v in (self.policy.waiting_reasons(snap, plan) or {}).items()}
        except Exception:
            log.exception("policy %r failed to give waiting reasons", self.policy.name)
            return {}

    def _decision_failed(self, message: str) -> None:
        log.error("%s", message)
        self.last_error = message
        self._happened.add("failure")  # ask again next round: the state may have changed
        if self.metrics is not None:
            self.metrics.decision_failures_total.inc()
            self.metrics.decision_failing.set(1)

    def _act(self, a: Action) -> None:
        js = self.state.jobs[a.job_id]
        if a.kind is Kind.STOP:
            self._stop(js)
            self._pending_pause.pop(js.job_id, None)  # a preemption's wait is queueing, not a pause
            self.state.apply(a, self.time.now)
            self.record.queued(js, "preempted", "preempted by the policy", step=int(js.reported_progress))
        elif a.kind is Kind.HOLD:
            self.state.apply(a, self.time.now)
            what = "reserved, nothing launched until the rest fits" if a.allocation else "reservation released"
            self.record.event(js, "held", what)
        elif a.kind is Kind.REJECT:
            self._end(js, JobStatus.REJECTED, "rejected", a.reason)
            return
        else:
            old = js.allocation
            if a.kind is Kind.RESIZE:
                self._stop(js)
            kind = "resized" if old else ("started" if js.first_start is None else "restarted")
            self._pending_pause.setdefault(js.job_id, (self.clock(), "start" if js.first_start is None else (
                "resize" if old else "restart")))
            self.state.apply(a, self.time.now)
            js.resume_expected = int(js.reported_progress)  # what its "resume" record is checked against
            self.backend.start(self._launch(js, a.allocation, attempt=js.attempt))
            js.attempt += 1
            self.record.running(js, a.allocation)
            size = f"{a.allocation.num_workers}w/{a.allocation.num_ps}ps"
            self.record.event(js, kind, f"{old.num_workers}w/{old.num_ps}ps → {size}" if old else size,
                              {"workers": a.allocation.num_workers, "ps": a.allocation.num_ps,
                               "nodes": self.record.node_names(a.allocation)})
            self._count({"started": "start", "restarted": "restart", "resized": "resize"}[kind])
            return
        self._count("stop" if a.kind is Kind.STOP else "hold")

    def _stop(self, js: LiveJobState) -> None:
        """Checkpoint and stop the job's processes, then fold its last reported progress."""
        self._pending_pause[js.job_id] = (self.clock(), "resize")
        self.backend.stop(js.job_id, self.stop_timeout)
        obs = self.backend.observe().get(js.job_id)
        self.time.now = self.now()
        if obs is not None:
            self._fold(js, obs)
        self.backend.forget(js.job_id)

    def _launch(self, js: LiveJobState, alloc: Allocation, attempt: int) -> Launch:
        launch = Launch(js.job_id, js.train_job, alloc, self.record.job_dir(js.job_id), attempt=attempt)
        launch.job_dir.mkdir(parents=True, exist_ok=True)
        return launch

    def _finish(self, js: LiveJobState, done: dict) -> None:
        self.backend.forget(js.job_id)
        self._end(js, JobStatus.DONE, "done", "", steps_done=int(done.get("steps", js.spec.iterations)),
                  loss=done.get("loss", js.samples[-1][1] if js.samples else None))

    def _end(self, js: LiveJobState, status: JobStatus, label: str, reason: str, **fields) -> None:
        """A terminal state: done, failed, cancelled or rejected."""
        self.state.end(js, self.time.now, status, reason)
        self._pending_pause.pop(js.job_id, None)
        if self.backing_off.pop(js.job_id, None) is not None or js.failures:
            self.record.clear_retry(js.job_id)
        self._happened.add("completion")
        self.record.ended(js, label, reason, **fields)

    def _forget_ended(self) -> None:
        """Terminal jobs leave memory (the store keeps them; the policy must not see them)."""
        for jid in [j for j, s in self.state.jobs.items() if s.status not in (JobStatus.PENDING, JobStatus.RUNNING)]:
            del self.state.jobs[jid]
            self.record.forget(jid, self.metrics)

    def _publish_waiting(self) -> None:
        """Write why each queued job waits (changed ones only) and clear it for jobs that left the queue."""
        queued = {jid: js for jid, js in self.state.jobs.items() if js.status is JobStatus.PENDING}
        notes = {**self.waiting_notes, **{jid: self.waiting_note(jid) for jid in self.backing_off}}
        now = waiting_reasons(queued, self.state.free, self.cluster, notes=notes,
                              policy_said=self._policy_said, policy=self.policy.name,
                              last_decision=self._last_decision)
        changed = {jid: {"waiting_reason": r} for jid, r in now.items() if self._waiting.get(jid) != r}
        changed.update({jid: {"waiting_reason": ""} for jid in self._waiting if jid not in now})
        self.store.update_many(changed)
        self._waiting = now
        for jid in [j for j in self.waiting_notes if j not in queued]:
            del self.waiting_notes[jid]  # a note is about one wait: it ends when the job leaves the queue

    def _count(self, kind: str) -> None:
        if self.metrics is not None:
            self.metrics.actions_total.labels(kind=kind).inc()

    # ------------------------------------------------------------------ API helpers
    def cluster_view(self) -> dict:
        with self._lock:
            used, nodes = self.state.used, []
            for i, name in enumerate(self.cluster.node_names):
                cap = self.cluster.capacity[i]
                jobs = [jid for jid, js in self.state.running.items() if i in js.allocation.nodes]
                jobs += [f"{jid} (held)" for jid, js in self.state.holding.items() if i in js.held.nodes]
                nodes.append({"name": name, "gpus": float(cap[0]), "cpus": float(cap[1]), "mem_gb": float(cap[2]),
                              "used_gpus": float(used[i, 0]), "used_cpus": float(used[i, 1]),
                              "used_mem_gb": float(used[i, 2]), "jobs": jobs})
            return {"nodes": nodes, "policy": self.policy.name, "backend": self.backend.name,
                    "decisions": self.decisions, "last_error": self.last_error}

    def admission_problems(self, job: TrainJob) -> list[tuple[str, str]]:
        """Why `job` may not be admitted to this cluster ([] when it may): asked by the API at submit."""
        return admission_problems(job, self.cluster)

    def job_dir(self, job_id: str) -> Path:
        """Where the job's checkpoints and progress live (what `DELETE /jobs/{id}?purge=true` removes)."""
        return self.record.job_dir(job_id)

    def health(self) -> str:
        """"" when the last decision succeeded, else why it failed."""
        return self.last_error

    def idle(self) -> bool:
        """No job waiting or running (what a batch run waits for)."""
        with self._lock:
            return not (self.state.pending or self.state.running or self.backing_off)

    def shutdown(self, stop_jobs: bool = True) -> None:
        """Stop the running jobs (checkpointing; they resume when the service starts again) or
        leave them running, to be re-adopted by the next start."""
        with self._lock:
            if not stop_jobs:
                return
            for js in list(self.state.running.values()):
                self._stop(js)
                self._pending_pause.pop(js.job_id, None)
                self.state.stop(js, self.time.now, preempted=True)
                self.record.queued(js, "suspended", "service stopped: resumes from its checkpoint",
                                   step=int(js.reported_progress))
