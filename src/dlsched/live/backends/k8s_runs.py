"""One run of a job on Kubernetes: what the backend records of it, how it is judged from its pods,
and what the controller is told (`Observation`).

Judging (`verdict`), from the pods the watch shows and the pods it saw go:
- a pod gone that dlsched did not delete: failed ("deleted behind dlsched's back");
- a pod Failed (its container exited non-zero, the kubelet refused it, it was evicted), or stuck
  Pending on an error it will not get over (`k8s_watch.FATAL_WAITING`): failed, with the pod's
  reason and its container's exit code and message;
- sim mode: every pod Succeeded (kwok completes them at `dlsched.io/sim-end`): done;
- real mode: the trainer's done.json in the job directory: done; every pod exited 0 without it: failed;
- otherwise running. A node lost, a stop and a gang that never started are decided by the backend.

Sim-mode progress is the dry backend's made-up arithmetic from the run's start, base step and rate
(kept on the pods as annotations, so an adopted run continues exactly); a stop checkpoints the step
reached, kept in the job directory (`SIM_CHECKPOINT`) as the trainer keeps its checkpoints there.
Real-mode progress is the trainer's own log, read as the other backends read it (`ranks.observation`).
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from dlsched.live.backends.base import Launch, Observation, RunState
from dlsched.live.backends.dry import made_up_finish, made_up_step
from dlsched.live.backends.k8s_watch import PodInfo
from dlsched.live.backends.ranks import Job, Run, observation
from dlsched.trainer.protocol import ProgressReader, is_done

log = logging.getLogger("dlsched.k8s")

SIM_CHECKPOINT = "k8s-sim-checkpoint.json"


@dataclass
class KRun:
    """One attempt of a job: its pods (uid → name, node, rank, request) and what became of them."""

    launch: Launch
    run_id: str
    attempt: int
    started: float  # unix time the backend started it (the made-up clock's origin)
    base: int = 0  # checkpointed step it resumed from (sim)
    rate: float = 0.0  # made-up steps/s (sim)
    pods: dict[str, str] = field(default_factory=dict)  # uid -> pod name
    nodes: dict[str, str] = field(default_factory=dict)  # uid -> node name
    ranks: dict[str, tuple[int, str]] = field(default_factory=dict)  # uid -> (rank, role)
    requests: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # uid -> (GPU, CPU, GiB)
    service: str = ""
    service_deleted: bool = False
    state: RunState = "running"
    message: str = ""
    deleting: bool = False  # dlsched deleted (or is deleting) its pods: their going is expected
    gone: set[str] = field(default_factory=set)  # uids seen deleted (written by the watch thread)
    # uids seen Succeeded before anyone deleted them (written by the watch thread): in sim mode, pods
    # that reached their sim-end, whatever a stop that came too late says
    succeeded: set[str] = field(default_factory=set)
    # uid -> when the watch first saw it being deleted or gone (written by the watch thread)
    deletion_seen: dict[str, float] = field(default_factory=dict)
    stop_step: int | None = None  # the step a stop checkpointed (sim)
    ended_at: float | None = None  # unix time it stopped running (its made-up progress stops there)
    reader: ProgressReader | None = None  # real mode
    bound_at: float | None = None  # unix time its last pod was bound

    @property
    def job_id(self) -> str:
        return self.launch.job_id

    def who(self, uid: str) -> str:
        rank, role = self.ranks.get(uid, (-1, "?"))
        return f"pod {self.pods.get(uid, uid)} (rank {rank}, {role} on {self.nodes.get(uid) or 'no node'})"

    def live_pods(self) -> list[tuple[str, str]]:
        """(name, uid) of its pods not seen gone."""
        return [(n, u) for u, n in self.pods.items() if u not in self.gone]

    def made_up_step(self, at: float, startup: float) -> int:
        return made_up_step(self.base, at - self.started, startup, self.rate, self.launch.job.steps)

    def sim_end(self, startup: float) -> float:
        """Sim: the instant its made-up step reaches the job's steps (inf at no progress)."""
        if self.rate <= 0:
            return math.inf
        return self.started + made_up_finish(self.base, startup, self.rate, self.launch.job.steps)


def read_sim_checkpoint(job_dir: Path) -> int:
    try:
        return int(json.loads((Path(job_dir) / SIM_CHECKPOINT).read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def write_sim_checkpoint(job_dir: Path, step: int) -> None:
    try:
        path = Path(job_dir) / SIM_CHECKPOINT
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": int(step), "time": time.time()}))
        tmp.replace(path)
    except OSError as exc:  # the backend's in-memory copy still serves this service's life
        log.warning("cannot write the sim checkpoint of %s: %s", job_dir, exc)


def verdict(run: KRun, infos: dict[str, PodInfo | None], gone: set[str], mode: str) -> tuple[RunState, str] | None:
    """What a running run has become, from its pods (see the module docstring): None while it
    runs, else (state, message)."""
    if not run.deleting:
        lost = [u for u in run.pods if u in gone]
        if lost:
            return "failed", f"{run.who(lost[0])} was deleted behind dlsched's back"
    failed = [u for u, i in infos.items() if i is not None and (i.phase == "Failed" or (i.problem and i.phase == "Pending"))]
    if failed:
        u, i = failed[0], infos[failed[0]]
        assert i is not None
        more = f" ({len(failed) - 1} more pod(s) failed)" if len(failed) > 1 else ""
        return "failed", (f"{run.who(u)} {'failed' if i.phase == 'Failed' else 'cannot start'}: "
                          f"{i.problem or 'no reason given'}{more}")
    seen = [i for i in infos.values() if i is not None]
    all_succeeded = len(seen) == len(run.pods) and all(i.phase == "Succeeded" for i in seen)
    if mode == "sim":
        return ("done", "") if all_succeeded else None
    if is_done(Path(run.launch.job_dir)):
        return "done", ""
    if all_succeeded:
        return "failed", "every pod exited with code 0 without done.json"
    return None


def observe_run(run: KRun, now: float, mode: str, startup: float) -> Observation:
    """What the controller is told of `run` at unix time `now`."""
    if mode == "real":
        assert run.reader is not None
        run.reader.poll()
        return observation(Job(run.reader, Run(run.launch, run.run_id, run.started, [], state=run.state,
                                               message=run.message)))
    steps = run.launch.job.steps
    if run.state == "stopped" and run.stop_step is not None:
        step = run.stop_step
    elif run.state == "done":
        step = steps
    elif run.pods:
        step = run.made_up_step(now if run.state == "running" or run.ended_at is None else min(now, run.ended_at),
                                startup)
    else:  # it never started
        step = run.base
    first = run.started + startup
    started = bool(run.pods) and now >= first
    return Observation(
        job_id=run.job_id, state=run.state, step=step,
        steps_per_s=run.rate if started and run.state == "running" else None,
        samples=[(s, 1.0 / (1 + s)) for s in range(0, step + 1, max(1, step // 10 or 1))],  # made up, as dry's
        first_step_at=first if started else None,
        message=run.message,
        resume={"event": "resume", "run": run.run_id, "step": run.base, "problems": [],
                "checkpoint": f"sim-{run.base}" if run.base else None},
        done=_done(run, startup) if run.state == "done" else None,
    )


def _done(run: KRun, startup: float) -> dict:
    """A sim run's completion record, as the trainer's `done.json` would say it: with the instant
    its made-up step reached the job's steps ("time", on the backend's clock), so the job's end
    is when it finished, not when a round noticed."""
    out: dict = {"steps": run.launch.job.steps}
    if run.rate > 0:
        out["time"] = run.sim_end(startup)
    return out
