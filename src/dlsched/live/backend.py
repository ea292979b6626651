"""The interface every live backend implements: start, stop (resize = stop + start), observe.

A backend runs trainer processes and reports what they do; it decides nothing. The controller
owns every decision and talks to backends only through this interface, so a Kubernetes backend
(a later issue) is one more subclass: `start` creates the pods of a `Launch`, `stop` deletes them
after the trainer's SIGTERM checkpoint, `observe` reads pod phases and the progress log.

The trainer writes its progress, checkpoints and completion marker into the job directory
(`dlsched.trainer.protocol` reads them). Every backend therefore needs that directory on storage all of the
job's processes and the controller can reach: local disk for the local backend, a shared
filesystem for a multi-machine Ray cluster. Resizes are restart-based: the trainer checkpoints on
SIGTERM and resumes from the checkpoint at whatever size it is started with next.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.live.spec import TrainJob

#: running: processes up (maybe still loading); done: the trainer wrote its completion marker;
#: failed: a process exited without it and nobody asked it to stop; stopped: it exited after
#: `stop` (checkpointed).
RunState = Literal["running", "done", "failed", "stopped"]


@dataclass(frozen=True)
class Launch:
    """One run of a job: where its tasks go. `allocation` indexes `Backend.cluster()` nodes."""

    job_id: str
    job: TrainJob
    allocation: Allocation
    job_dir: Path
    attempt: int = 0  # runs of this job started before this one (restarts, resizes)


@dataclass
class Observation:
    """What a backend knows of one job's current (or last) run."""

    job_id: str
    state: RunState
    step: int = 0  # global steps done, from the progress log (0 before the first report)
    loss: float | None = None
    steps_per_s: float | None = None  # measured by the trainer over its last report interval
    samples: list[tuple[int, float]] = field(default_factory=list)  # (step, loss) so far, all runs
    run_started: float | None = None  # unix time the current run was launched
    first_step_at: float | None = None  # unix time the current run finished its first step
    message: str = ""  # why it failed, for people: the full text (log tails included)
    resume: dict | None = None  # the current run's "resume" record (`dlsched.trainer.protocol`), once written


class Backend(ABC):
    """Runs trainer processes on a fixed set of nodes."""

    name: str = "backend"

    @abstractmethod
    def cluster(self) -> Cluster:
        """The nodes jobs can use, as the scheduler sees them (GPU slots, CPUs, memory)."""

    @abstractmethod
    def start(self, launch: Launch) -> None:
        """Start every task of `launch` and return at once. The trainer resumes from the
        checkpoint in `launch.job_dir` when there is one."""

    @abstractmethod
    def stop(self, job_id: str, timeout: float = 30.0) -> None:
        """Ask the job's processes to checkpoint and exit (SIGTERM), wait for them, kill what is
        left after `timeout`. Returns when nothing of the job runs. Unknown or finished jobs: no-op."""

    def resize(self, launch: Launch, timeout: float = 30.0) -> None:
        """Restart-based resize: checkpoint and stop, then start at the new allocation."""
        self.stop(launch.job_id, timeout)
        self.start(launch)

    @abstractmethod
    def observe(self) -> dict[str, Observation]:
        """The current state of every job started (or adopted) and not yet forgotten."""

    def adopt(self, launch: Launch) -> bool:
        """Re-attach to a run started before the controller restarted. Returns False when the run
        is not alive any more (the controller then restarts it from its checkpoint, or marks it
        done if it finished meanwhile). Backends that cannot adopt return False."""
        return False

    def forget(self, job_id: str) -> None:
        """Drop a finished, failed or stopped job from `observe` (its files stay)."""

    def close(self) -> None:
        """Stop everything this backend started (checkpointing) and release its resources."""
