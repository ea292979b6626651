"""Folding what the backend observed into the live controller's jobs (part of `Controller`).

Each round a running job's reported step, speed, loss samples and first step after a (re)start
become its progress, `rate`, `observed_rates` and the measured pauses; a finished run ends the job,
a dead one goes to `failures.py`; the trainer's "resume" record becomes a checkpoint
event when the run did not resume where the job was. Apart from `loop.py` because this is the
only place measurements enter the scheduler's state.
"""

from __future__ import annotations

from dlsched.live.backends.base import Observation
from dlsched.live.controller.job_record import LiveJobState


class ControllerObservations:
    """The observation side of `Controller` (a mixin: it works on the controller's state, record,
    backend and pause lists, set up in `Controller.__init__`)."""

    def _observe(self) -> None:
        obs = self.backend.observe()
        self._node_changes()  # before judging runs: those on a failed node just wait again
        for js in list(self.state.running.values()):
            o = obs.get(js.job_id)
            if o is None:
                continue
            done = o.state == "done" or o.done is not None  # finished, even while its ranks still exit
            end = self._done_at(js, o.done or {}) if done else None
            self._fold(js, o, end)
            self._note_resume(js, o)
            if done:  # never resize or restart a complete job (`forget` stops the rest)
                self._finish(js, o.done or {}, end)
            elif o.state in ("failed", "stopped"):
                self._failed(js, o)

    def _fold(self, js: LiveJobState, o: Observation, at: float | None = None) -> None:
        """Fold an observation in, the job's time accounted up to `at` (default now)."""
        js.settle(self.time.now if at is None else at)
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
