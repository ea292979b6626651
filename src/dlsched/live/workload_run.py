"""Run a fixed workload live, start to finish, without a service: what the fidelity check and the
end-to-end benchmarks need. Jobs are submitted to a store at their arrival times and one
controller drives the backend until every job has ended, exactly as `dlsched serve` would."""

from __future__ import annotations

import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from dlsched.core.policy import Policy
from dlsched.live.backends.base import Backend
from dlsched.live.controller import Controller
from dlsched.live.spec import TrainJob


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds after the run starts
    job: TrainJob


@dataclass
class LiveJobResult:
    job_id: str
    model: str
    arrival: float
    status: str
    steps_done: int
    steps: int
    jct: float | None  # finished − submitted, seconds
    restarts: int
    job_dir: Path


@dataclass
class LiveRun:
    policy: str
    jobs: list[LiveJobResult]
    pauses: list[float] = field(default_factory=list)
    startups: list[float] = field(default_factory=list)
    decision_times: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def mean_jct(self) -> float:
        done = [j.jct for j in self.jobs if j.jct is not None]
        return statistics.fmean(done) if done else float("nan")


def run_workload(
    arrivals: list[Arrival],
    backend: Backend,
    policy: Policy,
    work_dir: Path,
    *,
    tick: float = 0.5,
    timeout: float = 3600.0,
    on_tick: Callable[[int, int], None] | None = None,
) -> LiveRun:
    """Submit `arrivals` on time, drive the controller until all jobs end (or `timeout`)."""
    from dlsched.live.store.lease import Owner, StoreLease, WorkDirLock
    from dlsched.live.api.metrics import LiveMetrics
    from dlsched.live.store import Store

    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    owner = Owner.me(None)
    with ExitStack() as held:  # like `dlsched serve`: no second driver may adopt these jobs meanwhile
        lock = WorkDirLock(work_dir, owner)
        lock.acquire()
        held.callback(lock.release)
        store = Store(f"sqlite:///{work_dir / 'dlsched.db'}")
        held.callback(store.close)
        lease = StoreLease(store, owner)
        lease.acquire()
        held.callback(lease.release)
        lease.start_heartbeat()
        ctl = Controller(store, backend, policy, work_dir=work_dir, tick=tick, metrics=LiveMetrics())
        return _drive(arrivals, store, ctl, policy, work_dir, tick, timeout, on_tick)


def _drive(arrivals: list[Arrival], store, ctl: Controller, policy: Policy, work_dir: Path, tick: float,
           timeout: float, on_tick: Callable[[int, int], None] | None) -> LiveRun:
    t0 = time.time()
    todo = sorted(arrivals, key=lambda a: a.at)
    ids: list[tuple[str, Arrival]] = []
    try:
        while True:
            now = time.time()
            while todo and todo[0].at <= now - t0:
                a = todo.pop(0)
                ids.append((store.add(a.job, now=t0 + a.at).id, a))
            ctl.step()
            ended = sum(1 for jid, _ in ids if store.get(jid).status not in ("queued", "running"))
            if on_tick is not None:
                on_tick(ended, len(arrivals))
            if (not todo and ended == len(arrivals)) or now - t0 > timeout:
                break
            time.sleep(tick)
    finally:
        ctl.shutdown(stop_jobs=True)
    out = []
    for jid, a in ids:
        v = store.get(jid)
        jct = v.finished_at - v.submitted_at if v.status == "done" and v.finished_at else None
        out.append(LiveJobResult(jid, a.job.model, a.at, v.status, v.steps_done, a.job.steps, jct, v.restarts,
                                 work_dir / "jobs" / jid))
    return LiveRun(policy.name, out, list(ctl.pauses), list(ctl.startups), list(ctl.decision_times),
                   time.time() - t0)
