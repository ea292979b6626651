"""One decision of the live controller and the Actions it leads to (part of `Controller`).

Snapshot → policy → `ClusterState.diff` → Actions, handed to the backend in one batch
(`Backend.apply`: every preemption's and resize's stop at once, then every start and resize's
launch), then recorded in the core's order: preemptions, holds, starts and resizes
(restart-based: checkpoint, stop, start at the new size), rejections. A decision that fails
changes nothing and is kept in `last_error`. Apart from `loop.py` because this is where
a policy's word becomes processes started and stopped; the round that calls it stays there.
"""

from __future__ import annotations

import logging
import statistics
import time

from dlsched.core.allocation import Allocation
from dlsched.core.errors import PlanError
from dlsched.core.snapshot import JobStatus
from dlsched.framework.actions import Action, Kind
from dlsched.live.backends.base import Launch
from dlsched.live.controller.job_record import LiveJobState

log = logging.getLogger("dlsched.controller")


class ControllerDecisions:
    """The decision and the actions of `Controller` (a mixin: it works on the controller's state,
    record, backend and metrics, set up in `Controller.__init__`)."""

    def _decide(self, reasons: tuple[str, ...]) -> None:
        restart = statistics.median(self.pauses) if self.pauses else self.assumed_restart
        snap = self.state.snapshot(self.time.now, reasons, restart, rng=self.rng, profile=self.profile)
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
        if self._carry_out(actions):  # launched something: its pods are bound when apply returns
            self.decision_to_bound.append(time.perf_counter() - t0)

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

    def _carry_out(self, actions: list[Action]) -> int:
        """One batched `Backend.apply` for the whole decision (every stop at once, then every
        launch), then the bookkeeping of each Action in the core's order. Stopped runs' last
        progress is folded in before their Actions change the state, as a checkpointed step.
        Returns how many runs it launched."""
        stopping = [self.state.jobs[a.job_id] for a in actions if a.kind in (Kind.STOP, Kind.RESIZE)]
        now = self.clock()
        for js in stopping:
            self._pending_pause[js.job_id] = (now, "resize")  # a preemption's wait is dropped below: queueing
        launches: dict[str, Launch] = {}
        for a in actions:
            if a.kind in (Kind.START, Kind.RESIZE):
                js = self.state.jobs[a.job_id]
                self._pending_pause.setdefault(js.job_id, (now, "start" if js.first_start is None else "restart"))
                launches[a.job_id] = self._launch(js, a.allocation, attempt=js.attempt)
        self._apply(stopping, list(launches.values()))
        for a in actions:
            self._act(a, launches.get(a.job_id))
        return len(launches)

    def _apply(self, stopping: list[LiveJobState], launches: list[Launch]) -> None:
        """One `Backend.apply`, then the stopped runs' last reported progress (their checkpoint)
        folded into their jobs."""
        if stopping or launches:
            self.backend.apply([js.job_id for js in stopping], launches, self.stop_timeout)
        observed = self.backend.observe() if stopping else {}
        self.time.now = self.now()
        for js in stopping:
            o = observed.get(js.job_id)
            if o is not None:
                self._fold(js, o)

    def _act(self, a: Action, launch: Launch | None) -> None:
        js = self.state.jobs[a.job_id]
        if a.kind is Kind.STOP:
            self.backend.forget(js.job_id)
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
            kind = "resized" if old else ("started" if js.first_start is None else "restarted")
            self.state.apply(a, self.time.now)
            js.resume_expected = int(js.reported_progress)  # what its "resume" record is checked against
            js.attempt = launch.attempt + 1
            self.record.running(js, a.allocation)
            size = f"{a.allocation.num_workers}w/{a.allocation.num_ps}ps"
            self.record.event(js, kind, f"{old.num_workers}w/{old.num_ps}ps → {size}" if old else size,
                              {"workers": a.allocation.num_workers, "ps": a.allocation.num_ps,
                               "nodes": self.record.node_names(a.allocation)})
            self._count({"started": "start", "restarted": "restart", "resized": "resize"}[kind])
            return
        self._count("stop" if a.kind is Kind.STOP else "hold")

    def _stop_now(self, jobs: list[LiveJobState]) -> None:
        """Checkpoint and stop these jobs' runs in one batch (cancel, shutdown, a failed node),
        fold their last reported progress and drop them from the backend."""
        if not jobs:
            return
        self._apply(jobs, [])
        for js in jobs:
            self.backend.forget(js.job_id)

    def _launch(self, js: LiveJobState, alloc: Allocation, attempt: int) -> Launch:
        launch = Launch(js.job_id, js.train_job, alloc, self.record.job_dir(js.job_id), attempt=attempt)
        launch.job_dir.mkdir(parents=True, exist_ok=True)
        return launch
