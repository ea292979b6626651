"""Failed runs in the live controller: retry after a backoff, or fail the job (part of `Controller`).

A run that died without `done.json` goes back to the queue and waits out a backoff (`retry.py`)
where no policy sees it (`ClusterState.park`); after `retry.attempts` failures in a row without
getting further the job is `failed`. The count and the end of the wait are kept in the store.
Apart from `loop.py` because this is the one path a job takes when its processes die.
"""

from __future__ import annotations

from dlsched.core.snapshot import JobStatus
from dlsched.live.backends.base import Observation
from dlsched.live.controller.job_record import LiveJobState
from dlsched.live.controller.retry import waiting_note
from dlsched.live.backends.ranks import one_line


class ControllerFailures:
    """The failure handling of `Controller` (a mixin: it works on the controller's state, record,
    backend, `retry` config and `backing_off`, set up in `Controller.__init__`)."""

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
