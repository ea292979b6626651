"""The live controller: observe → snapshot → policy → plan → diff → actions, on wall-clock time.

It runs the very same Policy objects as the simulator. The pieces a policy reads are kept in the
same `JobState` objects the simulator uses, fed from measurements instead of a throughput model:
progress is the trainer's reported step, `rate` its measured steps/s, `observed_rates` the speed
measured at each size (what Optimus' speed fit learns from), and `observed_loss` the reported
loss samples (what Optimus' convergence fit reads). So an estimator cannot tell a live job from a
simulated one, which is the point: what a policy learned in simulation is what it does live.

Decisions are asked on the triggers the policy declares (arrivals and completions when
`on_events`, every `interval` seconds, at `wake_at`), exactly as the simulator does; a failed
run also counts as an event, because resources came free. The plan is checked with the
simulator's validation before anything happens, then applied as a diff: preemptions first (they
free resources), then resizes (restart-based: checkpoint, stop, start at the new size; the pause
until the first step at the new size is measured), then starts.

The store is the only channel to the API: new jobs and cancel requests are read from it, status
is written back. Times in snapshots are seconds since the service's epoch, kept in the store, so a
restarted service sees the same clock.
"""

from __future__ import annotations

import json
import logging
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import GPU
from dlsched.core.errors import PlanError
from dlsched.core.plan import Plan
from dlsched.core.policy import Policy
from dlsched.core.snapshot import Clock, JobState, JobStatus, Snapshot
from dlsched.live.backend import Backend, Launch, Observation
from dlsched.live.progress_log import is_done, read_done
from dlsched.sim.feasibility import never_fits
from dlsched.sim.validation import check_capacity, check_shape

log = logging.getLogger("dlsched.controller")

#: A run that fails this many times in a row is given up (a bug in the job, not bad luck).
MAX_FAILURES = 3
#: What a policy may assume a resize costs before any has been measured.
DEFAULT_RESTART_OVERHEAD = 5.0


@dataclass(eq=False)
class LiveJobState(JobState):
    """A JobState whose loss samples come from the trainer instead of a simulated curve."""

    samples: list[tuple[int, float]] = field(default_factory=list)
    failures: int = 0  # failed runs without progress past the previous failure
    failed_at_step: float = -1.0
    attempt: int = 0  # runs started so far

    def observed_loss(self, points: int = 20) -> list[tuple[float, float]]:
        if not self.samples:
            return []
        idx = np.unique(np.linspace(0, len(self.samples) - 1, min(points, len(self.samples))).astype(int))
        return [(float(self.samples[i][0]), self.samples[i][1]) for i in idx]


class Controller:
    """Drives one backend with one policy, using the store as its queue and its record."""

    def __init__(
        self,
        store,
        backend: Backend,
        policy: Policy,
        *,
        work_dir: Path,
        tick: float = 1.0,
        metrics=None,
        clock: Callable[[], float] = time.time,
        seed: int = 0,
        stop_timeout: float = 30.0,
    ):
        self.store = store
        self.backend = backend
        self.policy = policy
        self.work_dir = Path(work_dir)
        self.tick = tick
        self.metrics = metrics
        self.clock = clock
        self.stop_timeout = stop_timeout
        self.cluster = backend.cluster()
        self.rng = np.random.default_rng(seed)
        epoch = store.get_meta("epoch")
        if epoch is None:
            epoch = repr(clock())
            store.set_meta("epoch", epoch)
        self.epoch = float(epoch)
        self.time = Clock(self.now())
        self.jobs: dict[str, LiveJobState] = {}
        self.decisions = 0
        self.decision_times: list[float] = []
        self.pauses: list[float] = []  # measured resize/restart pauses: stop asked -> first step
        self.startups: list[float] = []  # first starts: launch asked -> first step
        self._pending_pause: dict[str, tuple[float, str]] = {}  # job -> (unix time asked, kind)
        self._events: set[str] = set()
        self._next_tick = self.time.now if policy.interval else float("inf")
        self._wake = float("inf")
        self.last_plan_error = ""
        self._published: dict[str, dict] = {}  # what _publish last wrote per running job
        self._lock = threading.Lock()
        policy.reset(self.cluster, seed)
        self._recover()

    # ------------------------------------------------------------------ clock
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
            js = self._admit(view)
            if js.status is JobStatus.PENDING:
                self._events.add("arrival")
            if view.status != "running" or js.status is not JobStatus.PENDING:
                continue
            alloc = self._stored_allocation(view.id)
            job_dir = self._job_dir(view.id)
            if is_done(job_dir):
                self._finish(js, "done", read_done(job_dir) or {})
                continue
            if alloc is not None:
                launch = Launch(view.id, view.spec, alloc, job_dir, attempt=max(view.attempt - 1, 0))
                if self.backend.adopt(launch):
                    self._mark_running(js, alloc, fresh=False)
                    self.store.add_event(view.id, "adopted", "re-attached to its running processes")
                    continue
            js.status = JobStatus.PENDING
            js.last_stop = self.time.now
            self.store.update(view.id, status="queued", workers=0, ps=0, nodes=[])
            self.store.add_event(view.id, "recovered", "service restarted: resumes from its checkpoint")

    def _admit(self, view) -> LiveJobState:
        submit = max(0.0, view.submitted_at - self.epoch)
        spec = view.spec.job_spec(view.id, submit)
        js = LiveJobState(spec=spec, index=len(self.jobs), clock=self.time, rank=len(self.jobs))
        js.status = JobStatus.PENDING
        js.last_update = self.time.now
        js.attempt = view.attempt
        js.restarts = view.restarts
        js._progress = float(view.steps_done)
        self.jobs[view.id] = js
        reason = never_fits(spec, self.cluster)
        if reason:
            self._end(js, "rejected", reason)
        return js

    # ------------------------------------------------------------------ one round
    def step(self) -> None:
        """One round: read the store, observe the backend, decide if due, act, write back."""
        with self._lock:
            self.time.now = self.now()
            self._ingest()
            self._observe()
            if self._due():
                self._decide()
            self._publish()

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
            js = self.jobs.get(view.id)
            if js is None:
                js = self._admit(view)
                if js.status is JobStatus.PENDING:
                    self.store.add_event(view.id, "queued", "waiting for the policy")
                    self._events.add("arrival")
            if view.cancel_requested and js.status in (JobStatus.PENDING, JobStatus.RUNNING):
                if js.status is JobStatus.RUNNING:
                    self.backend.stop(view.id, self.stop_timeout)
                    self._count("cancel")
                self._end(js, "cancelled", "cancelled by the user")
                self._events.add("completion")

    def _observe(self) -> None:
        obs = self.backend.observe()
        now = self.time.now
        for jid, js in list(self.jobs.items()):
            if js.status is not JobStatus.RUNNING:
                continue
            o = obs.get(jid)
            if o is None:
                continue
            self._fold(js, o, now)
            if o.state == "done":
                self._finish(js, "done", read_done(self._job_dir(jid)) or {})
            elif o.state in ("failed", "stopped"):
                self._failed(js, o)

    def _fold(self, js: LiveJobState, o: Observation, now: float) -> None:
        js.settle(now)
        js._progress = float(min(o.step, js.spec.iterations))
        if o.samples:
            js.samples = list(o.samples)
        pending = self._pending_pause.get(js.job_id)
        if o.first_step_at is not None and pending is not None and o.first_step_at >= pending[0]:
            del self._pending_pause[js.job_id]
            pause, kind = o.first_step_at - pending[0], pending[1]
            if kind == "start":
                self.startups.append(pause)
            else:
                self.pauses.append(pause)
                if self.metrics is not None:
                    self.metrics.resize_pause_seconds.observe(pause)
            self.store.add_event(js.job_id, "first-step", f"{kind}: first step {pause:.2f} s after it was asked",
                                 {"pause_s": pause, "kind": kind})
        if o.steps_per_s and o.first_step_at is not None:
            js.rate = float(o.steps_per_s)
            a = js.allocation
            if a is not None:
                js.observed_rates[(a.num_nodes, a.num_workers, a.num_ps)] = js.rate
        else:
            js.rate = 0.0

    def _failed(self, js: LiveJobState, o: Observation) -> None:
        """A run died without finishing: back to the queue, resuming from its checkpoint."""
        jid = js.job_id
        self._release(js)
        self.backend.forget(jid)
        if o.step > js.failed_at_step:  # it got further than last time: not a crash loop
            js.failures = 0
        js.failures += 1
        js.failed_at_step = max(js.failed_at_step, float(o.step))
        self._events.add("completion")  # its resources came free
        if js.failures >= MAX_FAILURES:
            self._end(js, "failed", f"{js.failures} runs failed in a row; last: {o.message or o.state}")
            return
        js.status = JobStatus.PENDING
        js.last_stop = self.time.now
        self.store.update(jid, status="queued", workers=0, ps=0, nodes=[], reason=o.message[:500])
        self.store.add_event(jid, "failed-run", o.message[:2000] or o.state, {"step": o.step})

    # ------------------------------------------------------------------ decisions
    def _due(self) -> bool:
        now = self.time.now
        if now >= self._next_tick:
            self._events.add("tick")
            interval = self.policy.interval
            self._next_tick = now + interval if interval else float("inf")
        if now >= self._wake:
            self._events.add("wake")
            self._wake = float("inf")
        due = bool(self._events & {"tick", "wake"}) or (
            self.policy.on_events and bool(self._events & {"arrival", "completion"})
        )
        active = any(j.status in (JobStatus.PENDING, JobStatus.RUNNING) for j in self.jobs.values())
        return due and active

    def snapshot(self) -> Snapshot:
        free = self.cluster.capacity - self._used()
        free.setflags(write=False)
        pending = [j for j in self.jobs.values() if j.status is JobStatus.PENDING]
        running = [j for j in self.jobs.values() if j.status is JobStatus.RUNNING]
        return Snapshot(
            now=self.time.now,
            cluster=self.cluster,
            free=free,
            pending=pending,
            running=running,
            restart_overhead=statistics.median(self.pauses) if self.pauses else DEFAULT_RESTART_OVERHEAD,
            rng=self.rng,
            events=tuple(sorted(self._events)),
        )

    def _decide(self) -> None:
        snap = self.snapshot()
        self._events.clear()
        t0 = time.perf_counter()
        try:
            plan = self.policy.schedule(snap)
            self._validate(plan, snap)
        except PlanError as exc:  # a policy bug: keep the cluster as it is and say why
            log.error("plan refused: %s", exc)
            self.last_plan_error = str(exc)
            return
        finally:
            spent = time.perf_counter() - t0
            self.decisions += 1
            self.decision_times.append(spent)
            if self.metrics is not None:
                self.metrics.decision_seconds.observe(spent)
        if plan.wake_at is not None and plan.wake_at > self.time.now:
            self._wake = plan.wake_at
        self._apply(plan)

    def _validate(self, plan: Plan, snap: Snapshot) -> None:
        name = self.policy.name
        now = self.time.now
        used = np.zeros_like(self.cluster.capacity)
        touched: list[int] = []
        for jid, alloc in plan.allocations.items():
            js = self.jobs.get(jid)
            if js is None or js.status not in (JobStatus.PENDING, JobStatus.RUNNING):
                raise PlanError(f"policy {name!r} at t={now:.1f}: job {jid!r} cannot run")
            check_shape(name, now, js.spec, alloc, self.cluster)
            np.add.at(used, list(alloc.nodes), self._usage(js, alloc))
            touched += list(alloc.nodes)
        for jid in plan.rejected:
            js = self.jobs.get(jid)
            if js is None or js.status is not JobStatus.PENDING:
                raise PlanError(f"policy {name!r} at t={now:.1f}: only a waiting job can be rejected, not {jid!r}")
        if touched:
            check_capacity(name, now, self.cluster, used, np.unique(touched),
                           lambda n: [j for j, a in plan.allocations.items() if n in a.nodes])

    def _apply(self, plan: Plan) -> None:
        running = {jid: js for jid, js in self.jobs.items() if js.status is JobStatus.RUNNING}
        stops = [js for jid, js in running.items() if jid not in plan.allocations]
        resizes = [(js, plan.allocations[jid]) for jid, js in running.items()
                   if jid in plan.allocations and plan.allocations[jid] != js.allocation]
        starts = [(self.jobs[jid], a) for jid, a in plan.allocations.items() if jid not in running]
        for js in stops:
            self._stop(js, "preempted", "preempted by the policy")
            self._count("stop")
        for js, alloc in resizes:
            old = js.allocation
            self._stop(js, None, "")
            self._start(js, alloc, kind="resized",
                        message=f"{old.num_workers}w/{old.num_ps}ps → {alloc.num_workers}w/{alloc.num_ps}ps")
            self._count("resize")
        for js, alloc in starts:
            kind = "started" if js.first_start is None else "restarted"
            self._start(js, alloc, kind=kind, message=f"{alloc.num_workers}w/{alloc.num_ps}ps")
            self._count("start" if kind == "started" else "restart")
        for jid, reason in plan.rejected.items():
            self._end(self.jobs[jid], "rejected", reason or "rejected by the policy")

    # ------------------------------------------------------------------ actions
    def _stop(self, js: LiveJobState, kind: str | None, message: str) -> None:
        self._pending_pause[js.job_id] = (self.clock(), "resize")
        self.backend.stop(js.job_id, self.stop_timeout)
        obs = self.backend.observe().get(js.job_id)
        now = self.now()
        self.time.now = now
        if obs is not None:
            self._fold(js, obs, now)
        self.backend.forget(js.job_id)
        self._release(js)
        js.status = JobStatus.PENDING
        js.last_stop = now
        if kind is not None:
            js.preemptions += 1
            self._pending_pause.pop(js.job_id, None)  # a preemption's wait is queueing, not a pause
            self.store.update(js.job_id, status="queued", workers=0, ps=0, nodes=[], steps_done=int(js._progress))
            self.store.add_event(js.job_id, kind, message, {"step": int(js._progress)})

    def _start(self, js: LiveJobState, alloc: Allocation, kind: str, message: str) -> None:
        jid = js.job_id
        launch = Launch(jid, self._spec_of(jid), alloc, self._job_dir(jid), attempt=js.attempt)
        launch.job_dir.mkdir(parents=True, exist_ok=True)
        if js.first_start is not None:
            js.restarts += 1
        self._pending_pause.setdefault(jid, (self.clock(), "start" if js.first_start is None else "restart"))
        self.backend.start(launch)
        js.attempt += 1
        self._mark_running(js, alloc, fresh=True)
        self.store.set_meta(f"alloc:{jid}", json.dumps(self._alloc_json(alloc)))
        self.store.add_event(jid, kind, message, {"workers": alloc.num_workers, "ps": alloc.num_ps,
                                                  "nodes": self._node_names(alloc)})

    def _mark_running(self, js: LiveJobState, alloc: Allocation, fresh: bool) -> None:
        now = self.time.now
        js.settle(now)
        js.status = JobStatus.RUNNING
        js.allocation = alloc
        js.alloc_gpus = alloc.num_workers * js.spec.worker_demand[GPU]
        js.alloc_nodes = alloc.num_nodes
        js.rate = 0.0
        js.resume_at = now
        if js.first_start is None:
            js.first_start = now
        js.last_start = now
        js.version += 1
        view = self.store.get(js.job_id)
        started_at = view.started_at if view is not None and view.started_at else self.clock()
        self.store.update(js.job_id, status="running", workers=alloc.num_workers, ps=alloc.num_ps,
                          nodes=self._node_names(alloc), attempt=js.attempt, restarts=js.restarts,
                          started_at=started_at, reason="")

    def _release(self, js: LiveJobState) -> None:
        js.settle(self.time.now)
        js.allocation = None
        js.alloc_gpus = 0.0
        js.alloc_nodes = 0
        js.rate = 0.0
        js.version += 1

    def _finish(self, js: LiveJobState, status: str, done: dict) -> None:
        js._progress = js.spec.iterations
        steps = int(done.get("steps", js.spec.iterations))
        self.backend.forget(js.job_id)
        self._end(js, status, "", steps_done=steps, loss=done.get("loss", js.samples[-1][1] if js.samples else None))
        self._events.add("completion")

    def _end(self, js: LiveJobState, status: str, reason: str, **fields) -> None:
        """A terminal state: done, failed, cancelled or rejected."""
        if js.allocation is not None:
            self._release(js)
        js.status = {"done": JobStatus.DONE, "rejected": JobStatus.REJECTED}.get(status, JobStatus.UNFINISHED)
        js.end_time = self.time.now
        js.reason = reason
        self._pending_pause.pop(js.job_id, None)
        self.store.update(js.job_id, status=status, reason=reason, finished_at=self.clock(),
                          workers=0, ps=0, nodes=[], **fields)
        self.store.add_event(js.job_id, status, reason)

    # ------------------------------------------------------------------ bookkeeping
    def _publish(self) -> None:
        """Write running jobs' progress to the store, and the gauges."""
        changed = {}
        for jid, js in self.jobs.items():
            if js.status is JobStatus.RUNNING:
                row = {"steps_done": int(js._progress), "steps_per_s": js.rate or None,
                       "loss": js.samples[-1][1] if js.samples else None}
                if self._published.get(jid) != row:
                    changed[jid] = self._published[jid] = row
        self.store.update_many(changed)
        if self.metrics is not None:
            used = self._used()
            self.metrics.gpu_slots_total.set(float(self.cluster.capacity[:, GPU].sum()))
            self.metrics.gpu_slots_used.set(float(used[:, GPU].sum()))
            for jid, js in self.jobs.items():
                if js.status is JobStatus.RUNNING:
                    self.metrics.job_steps_per_second.labels(job=jid).set(js.rate)
        # forget terminal jobs: the store keeps them, the policy must not see them
        for jid in [j for j, s in self.jobs.items() if s.status not in (JobStatus.PENDING, JobStatus.RUNNING)]:
            if self.metrics is not None:
                try:
                    self.metrics.job_steps_per_second.remove(jid)
                except KeyError:
                    pass
            del self.jobs[jid]
            self._published.pop(jid, None)

    def _count(self, kind: str) -> None:
        if self.metrics is not None:
            self.metrics.actions_total.labels(kind=kind).inc()

    def _used(self) -> np.ndarray:
        used = np.zeros_like(self.cluster.capacity)
        for js in self.jobs.values():
            if js.status is JobStatus.RUNNING and js.allocation is not None:
                np.add.at(used, list(js.allocation.nodes), self._usage(js, js.allocation))
        return used

    @staticmethod
    def _usage(js: JobState, alloc: Allocation) -> np.ndarray:
        return alloc.usage(np.asarray(js.spec.worker_demand), np.asarray(js.spec.ps_demand))

    def _job_dir(self, job_id: str) -> Path:
        return self.work_dir / "jobs" / job_id

    def _spec_of(self, job_id: str):
        view = self.store.get(job_id)
        return view.spec

    def _node_names(self, alloc: Allocation) -> list[str]:
        return [self.cluster.node_names[n] for n in alloc.nodes]

    def _alloc_json(self, alloc: Allocation) -> dict[str, list[int]]:
        return {self.cluster.node_names[n]: [w, p] for n, w, p in zip(alloc.nodes, alloc.workers, alloc.ps)}

    def _stored_allocation(self, job_id: str) -> Allocation | None:
        raw = self.store.get_meta(f"alloc:{job_id}")
        if not raw:
            return None
        index = {name: i for i, name in enumerate(self.cluster.node_names)}
        try:
            placement = {index[name]: (int(w), int(p)) for name, (w, p) in json.loads(raw).items()}
        except (KeyError, ValueError, TypeError):
            return None  # the cluster changed since: restart from the checkpoint instead
        return Allocation.of(placement)

    # ------------------------------------------------------------------ API helpers
    def cluster_view(self) -> dict:
        with self._lock:
            used = self._used()
            nodes = []
            for i, name in enumerate(self.cluster.node_names):
                cap = self.cluster.capacity[i]
                jobs = [jid for jid, js in self.jobs.items()
                        if js.status is JobStatus.RUNNING and js.allocation is not None and i in js.allocation.nodes]
                nodes.append({"name": name, "gpus": float(cap[0]), "cpus": float(cap[1]), "mem_gb": float(cap[2]),
                              "used_gpus": float(used[i, 0]), "used_cpus": float(used[i, 1]),
                              "used_mem_gb": float(used[i, 2]), "jobs": jobs})
            return {"nodes": nodes, "policy": self.policy.name, "backend": self.backend.name,
                    "decisions": self.decisions}

    def idle(self) -> bool:
        """No job waiting or running (what a batch run waits for)."""
        with self._lock:
            return not any(j.status in (JobStatus.PENDING, JobStatus.RUNNING) for j in self.jobs.values())

    def shutdown(self, stop_jobs: bool = True) -> None:
        """Stop the running jobs (checkpointing; they resume when the service starts again) or
        leave them running, to be re-adopted by the next start."""
        with self._lock:
            if not stop_jobs:
                return
            for js in list(self.jobs.values()):
                if js.status is JobStatus.RUNNING:
                    self._stop(js, "suspended", "service stopped: resumes from its checkpoint")
