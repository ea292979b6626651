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

Its parts, each a mixin of `Controller` in a module of its own: `decisions.py` (a
decision and its Actions), `observations.py` (folding what the backend observed),
`failures.py` (failed runs: backoff, retry, fail), `reports.py` (waiting
reasons, health, the cluster view). This module holds the state they share, recovery after a
restart, the round that calls them, and a job's end.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.core.policy import Policy
from dlsched.core.snapshot import Clock, JobStatus
from dlsched.framework.state import ClusterState
from dlsched.framework.triggers import Triggers
from dlsched.throughput.base import ThroughputModel
from dlsched.live.backends.base import Backend
from dlsched.live.controller.decisions import ControllerDecisions
from dlsched.live.controller.failures import ControllerFailures
from dlsched.live.controller.observations import ControllerObservations
from dlsched.live.controller.reports import ControllerReports
from dlsched.live.controller.job_record import JobRecord, LiveJobState
from dlsched.live.controller.reports import ClusterView
from dlsched.live.controller.retry import RetryConfig

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


class Controller(ControllerDecisions, ControllerObservations, ControllerFailures, ControllerReports):
    """Drives one backend with one policy, using the store as its queue and its record."""

    def __init__(self, store, backend: Backend, policy: Policy, *, work_dir: Path, tick: float = 1.0,
                 metrics=None, clock: Callable[[], float] = time.time, seed: int = 0, stop_timeout: float = 30.0,
                 restart_overhead: float = DEFAULT_RESTART_OVERHEAD, retry: RetryConfig | None = None,
                 spec_of: Callable[[Any, float], JobSpec] | None = None, profile: ThroughputModel | None = None):
        """`spec_of` and `profile` serve a trace replay (`dlsched.k8s.replay`): the scheduler's
        view of each stored job (see `LiveJobState.from_view`), and the throughput profile the
        policies see in their snapshot, as the simulator gives them (None: no profile is known)."""
        refusal = live_refusal(policy)
        if refusal:
            raise ConfigError(refusal)
        self.backend, self.policy, self.metrics, self.clock = backend, policy, metrics, clock
        self.tick, self.stop_timeout = tick, stop_timeout
        self.spec_of, self.profile = spec_of, profile
        self.on_ended: Callable[[LiveJobState], None] | None = None  # sees each ended job before it leaves memory
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
        self.decision_times: list[float] = []  # seconds each policy call took
        self.decision_to_bound: list[float] = []  # seconds from a policy call to its launches applied (pods bound)
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
        self._round = threading.Lock()  # one round (or the shutdown) at a time; the API never takes it
        self.view: ClusterView  # published at the end of every round (`_publish_view`)
        policy.reset(self.cluster, seed)
        self._recover()
        self._publish_view()

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
        js = LiveJobState.from_view(view, self.epoch, self.time, index=self.admitted, spec_of=self.spec_of)
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
        """One round: read the store, observe the backend, decide if due, act, write back, and
        publish the cluster view the API reads. Rounds (and `shutdown`) take turns on the round
        lock, which nothing else takes: the API reads only the published view and the store, so
        it never waits on a decision or on backend I/O."""
        with self._round:
            self.time.now = self.now()
            self._ingest()
            self._end_backoffs()
            foreign = self.backend.foreign_usage()
            if foreign is not None and self.state.use_elsewhere(foreign):
                self._happened.add("node")  # room came or went: worth asking the policy again
            self._observe()
            reasons = self.triggers.due(self.time.now, self._happened)
            self._happened = set()
            if reasons and (self.state.pending or self.state.running):
                self._decide(reasons)
            self.record.publish(self.state, self.metrics)
            self._publish_waiting()
            self._forget_ended()
            self._publish_view()

    def run(self, stop: threading.Event) -> None:
        """`step` every `tick` seconds until `stop` is set; an error in one round is logged, not fatal."""
        while not stop.is_set():
            try:
                self.step()
            except Exception:  # keep serving: the next round may succeed (e.g. a transient DB lock)
                log.exception("controller round failed")
            stop.wait(self.tick)

    def _ingest(self) -> None:
        cancelled: list[LiveJobState] = []
        for view in self.store.list(["queued", "running"]):
            js = self.state.jobs.get(view.id)
            if js is None:
                js = self._admit(view)
                if js.status is JobStatus.PENDING:
                    self.record.event(js, "queued", "waiting for the policy")
            if view.cancel_requested and js.status in (JobStatus.PENDING, JobStatus.RUNNING):
                cancelled.append(js)
        self._stop_now([js for js in cancelled if js.status is JobStatus.RUNNING])
        for js in cancelled:
            if js.status is JobStatus.RUNNING:
                self._count("cancel")
            self._end(js, JobStatus.UNFINISHED, "cancelled", "cancelled by the user")

    def _node_changes(self) -> None:
        """Nodes the backend saw fail or come back (asked right after `observe`, so a run that
        failed with its node is a node failure, not a failed run of the job). A failed node's jobs
        lose their runs (stopped, back to waiting, resuming from their checkpoints, as in the
        simulator) and the node offers nothing until it is back."""
        for ev in self.backend.node_events():
            if not 0 <= ev.node < len(self.cluster.node_names):
                log.warning("the backend reported node index %s, which is not in the cluster", ev.node)
                continue
            name = self.cluster.node_names[ev.node]
            if ev.kind == "fail":
                if ev.node not in self.state.down:
                    hit = [js for js in self.state.on_node(ev.node) if js.status is JobStatus.RUNNING]
                    self._stop_now(hit)
                    self.state.fail_node(ev.node, self.time.now)  # its runs stop, holds on it go
                    for js in hit:
                        self._pending_pause.pop(js.job_id, None)
                        self.record.queued(js, "node-failed", f"its node {name} failed: resumes from its "
                                           "checkpoint", step=int(js.reported_progress))
                    self._happened.add("failure")
                    log.warning("node %s failed (%d job(s) on it)", name, len(hit))
            elif ev.kind == "join":
                if ev.node in self.state.down:
                    self.state.join_node(ev.node)
                    self._happened.add("node")
                    log.info("node %s is back", name)

    # ------------------------------------------------------------------ a job's end
    def _done_at(self, js: LiveJobState, done: dict) -> float | None:
        """When a finished job ended, on the controller's clock: the time its completion record
        says (the trainer's `time`), never before the round that last saw it running nor after
        now, so JCTs are the jobs', not the rounds'. None when the record has no time."""
        at = done.get("time")
        if not isinstance(at, (int, float)) or isinstance(at, bool):
            return None
        return min(self.time.now, max(js.last_update, float(at) - self.epoch))

    def _finish(self, js: LiveJobState, done: dict, end: float | None = None) -> None:
        """The job trained all its steps; it ended at `end` (default: `_done_at`, else now)."""
        self.backend.forget(js.job_id)
        end = self._done_at(js, done) if end is None else end
        self._end(js, JobStatus.DONE, "done", "", at=end, steps_done=int(done.get("steps", js.spec.iterations)),
                  loss=done.get("loss", js.samples[-1][1] if js.samples else None))

    def _end(self, js: LiveJobState, status: JobStatus, label: str, reason: str, at: float | None = None,
             **fields) -> None:
        """A terminal state: done, failed, cancelled or rejected (at controller time `at`, else now)."""
        when = self.time.now if at is None else at
        self.state.end(js, when, status, reason)
        self._pending_pause.pop(js.job_id, None)
        if self.backing_off.pop(js.job_id, None) is not None or js.failures:
            self.record.clear_retry(js.job_id)
        self._happened.add("completion")
        self.record.ended(js, label, reason, finished_at=None if at is None else self.epoch + at, **fields)

    def _forget_ended(self) -> None:
        """Terminal jobs leave memory (the store keeps them; the policy must not see them)."""
        for jid in [j for j, s in self.state.jobs.items() if s.status not in (JobStatus.PENDING, JobStatus.RUNNING)]:
            if self.on_ended is not None:
                self.on_ended(self.state.jobs[jid])
            del self.state.jobs[jid]
            self.record.forget(jid, self.metrics)

    def _count(self, kind: str) -> None:
        if self.metrics is not None:
            self.metrics.actions_total.labels(kind=kind).inc()

    def shutdown(self, stop_jobs: bool = True) -> None:
        """Stop the running jobs in one batch (checkpointing; they resume when the service starts
        again) or leave them running, to be re-adopted by the next start."""
        with self._round:
            if not stop_jobs:
                self.record.save_run_times(list(self.state.running.values()))  # the next service adds on
                return
            running = list(self.state.running.values())
            self._stop_now(running)
            for js in running:
                self._pending_pause.pop(js.job_id, None)
                self.state.stop(js, self.time.now, preempted=True)
                self.record.queued(js, "suspended", "service stopped: resumes from its checkpoint",
                                   step=int(js.reported_progress))
            self._publish_view()
