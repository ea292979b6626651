"""A backend that trains nothing: steps grow with the clock at a made-up speed.

It exists so that the controller, the service and the policies' live behaviour can be exercised
without processes: tests drive it with a fake clock (milliseconds instead of minutes), the
decision-overhead benchmark with many jobs, and `dlsched serve --backend dry` lets a user try the
API and the status page on any machine. Speed grows sub-linearly with workers (w^0.8 by default,
like a data-parallel job); a stop "checkpoints" the exact step reached. A run makes no progress for
`startup` seconds, then steps at its rate: its first step is reported as done at the end of the
start-up, so the pause the controller measures is exactly `startup` (what the simulator's
restart overhead models).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable

from dlsched.core.cluster import Cluster
from dlsched.live.backends.base import STOP_TIMEOUT_S, Backend, Launch, Observation


def made_up_rate(rate_per_worker: float, workers: int, scaling: float) -> float:
    """Steps/s of a run with `workers` workers: `rate_per_worker * workers ** scaling`."""
    return rate_per_worker * workers ** scaling


def made_up_step(base: int, elapsed: float, startup: float, rate: float, steps: int) -> int:
    """Steps done `elapsed` seconds after a run started from checkpointed step `base`: none for
    `startup` seconds, then `rate` a second, never past `steps`."""
    return min(steps, base + int(max(0.0, elapsed - startup) * rate))


def made_up_finish(base: int, startup: float, rate: float, steps: int) -> float:
    """Seconds after its start at which such a run reaches `steps` (`made_up_step` == steps)."""
    return startup + max(0, steps - base) / rate


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


@dataclass
class _Run:
    launch: Launch
    started: float
    base: int  # checkpointed steps it resumed from
    run_id: str = ""
    stopped: bool = False
    failed: bool = False
    message: str = ""
    history: list[tuple[int, float]] = field(default_factory=list)


class DryBackend(Backend):
    name = "dry"

    def __init__(self, cluster: Cluster, clock: Callable[[], float] = time.time, rate_per_worker: float = 10.0,
                 startup: float = 1.0, scaling: float = 0.8):
        self._cluster = cluster
        self.clock = clock
        self.rate_per_worker = rate_per_worker
        self.startup = startup
        self.scaling = scaling  # speed-up exponent: rate = rate_per_worker * workers ** scaling
        self.runs: dict[str, _Run] = {}
        self.checkpoints: dict[str, int] = {}
        self.launches: list[Launch] = []
        self.completions: dict[str, int] = {}  # job -> times it wrote done

    def cluster(self) -> Cluster:
        return self._cluster

    def rate(self, launch: Launch) -> float:
        return made_up_rate(self.rate_per_worker, launch.allocation.num_workers, self.scaling)

    def _step(self, run: _Run) -> int:
        return made_up_step(run.base, self.clock() - run.started, self.startup, self.rate(run.launch),
                            run.launch.job.steps)

    def apply(self, stops: Sequence[str], launches: Sequence[Launch], timeout: float = STOP_TIMEOUT_S) -> None:
        for job_id in stops:
            run = self.runs.get(job_id)
            if run is not None and not (run.stopped or run.failed):
                self.checkpoints[job_id] = self._step(run)
                run.stopped = True
        for launch in launches:
            old = self.runs.get(launch.job_id)
            if old is not None and not (old.stopped or old.failed):
                raise RuntimeError(f"job {launch.job_id} is still running; stop it before starting it again")
            self.launches.append(launch)
            self.runs[launch.job_id] = _Run(launch, self.clock(), self.checkpoints.get(launch.job_id, 0),
                                            run_id=f"{launch.job_id}-dry{len(self.launches)}")

    def crash(self, job_id: str, message: str = "killed") -> None:
        """Make the job's current run fail with `message`, losing what it did since its start (tests)."""
        run = self.runs[job_id]
        run.message = message
        self.checkpoints[job_id] = run.base  # nothing checkpointed since the start
        run.failed = True
        run.history.append((self._step(run), 0.0))

    def fail_node(self, node: int, message: str = "node failed") -> None:
        """Node `node` goes down: the runs on it fail (as `crash`), and `node_events` says so (tests)."""
        for jid, run in self.runs.items():
            if node in run.launch.allocation.nodes and not (run.stopped or run.failed):
                self.crash(jid, message)
        self._note_node(self.clock(), node, "fail")

    def join_node(self, node: int) -> None:
        """Node `node` is back (tests)."""
        self._note_node(self.clock(), node, "join")

    def lose_checkpoint(self, job_id: str) -> None:
        """Delete the job's checkpoint: its next run starts from step 0 (tests)."""
        self.checkpoints[job_id] = 0

    def observe(self) -> dict[str, Observation]:
        out = {}
        for jid, run in self.runs.items():
            step = self.checkpoints[jid] if run.stopped else self._step(run)
            first = run.started + self.startup
            started = self.clock() >= first
            state = "stopped" if run.stopped else "failed" if run.failed else (
                "done" if step >= run.launch.job.steps else "running")
            if state == "done" and jid not in self.completions:
                self.completions[jid] = 1
            out[jid] = Observation(
                job_id=jid, state=state, step=step,
                steps_per_s=self.rate(run.launch) if started else None,
                samples=[(s, 1.0 / (1 + s)) for s in range(0, step + 1, max(1, step // 10 or 1))],
                first_step_at=first if started else None,
                message=run.message if run.failed else "",
                resume={"event": "resume", "run": run.run_id, "step": run.base, "problems": [],
                        "checkpoint": f"dry-{run.base}" if run.base else None},
                done={"steps": step, "loss": 1.0 / (1 + step)} if state == "done" else None,
            )
        return out

    def forget(self, job_id: str) -> None:
        run = self.runs.get(job_id)
        if run is not None and (run.stopped or run.failed or self._step(run) >= run.launch.job.steps):
            del self.runs[job_id]
