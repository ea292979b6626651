"""The interface every live backend implements: Actions in, Observations out.

A backend runs trainers and reports what they do; it decides nothing. The controller hands it
one batched `apply(stops, launches)` per decision (as kube-scheduler keeps its binding cycle apart
from scheduling, and Blox batches suspend/launch): every stop at once, then every launch. All the
controller learns comes back through `observe()` (progress, speed, a run's end, its completion
record) and `node_events()` (a node failing, coming back); it never reads a job's files around
this interface, except to find, after a restart of the service, a job that finished while no
service watched (`JobRecord.done_marker`, the trainer's own protocol).

The trainer writes its progress, checkpoints and completion marker into the job directory
(`dlsched.trainer.protocol` reads them, and says how a run is launched: argv and rank
environment). Every backend therefore needs that directory on storage all of the job's processes
and the controller can reach: local disk for the local backend, a shared filesystem for a
multi-machine Ray cluster, a ReadWriteMany volume on Kubernetes. Resizes are restart-based: the
trainer checkpoints on SIGTERM and resumes from the checkpoint at whatever size it is started
with next.

Backends are registered with their options in `registry.py`, and all pass one conformance suite
(`tests/backend_conformance.py`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.events import NodeEvent
from dlsched.live.spec import TrainJob

#: running: processes up (maybe still loading); done: the trainer wrote its completion marker;
#: failed: a process exited without it and nobody asked it to stop; stopped: it exited after
#: a stop (checkpointed).
RunState = Literal["running", "done", "failed", "stopped"]

#: How long a stop waits for a run to checkpoint and exit before killing it.
STOP_TIMEOUT_S = 30.0


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
    steps_per_s: float | None = None  # measured by the trainer over its last report interval
    samples: list[tuple[int, float]] = field(default_factory=list)  # (step, loss) so far, all runs
    first_step_at: float | None = None  # unix time the current run finished its first step
    message: str = ""  # why it failed, for people: the full text (log tails included)
    resume: dict | None = None  # the current run's "resume" record (`dlsched.trainer.protocol`), once written
    #: the trainer's completion record ({"steps", "loss", ...}) once the job has trained all its
    #: steps, even while some of its ranks are still exiting: the job is done, never run again
    done: dict | None = None


class Backend(ABC):
    """Runs trainers on a set of nodes, one batch of Actions at a time."""

    name: str = "backend"

    @abstractmethod
    def cluster(self) -> Cluster:
        """The nodes jobs can use, as the scheduler sees them (GPU slots, CPUs, memory). Fixed
        for the backend's life: nodes that fail and come back are `node_events`."""

    @abstractmethod
    def apply(self, stops: Sequence[str], launches: Sequence[Launch], timeout: float = STOP_TIMEOUT_S) -> None:
        """Carry out one decision: ask every run of `stops` to checkpoint and exit (all at once),
        wait up to `timeout` for them and kill what is left; then start every launch (a resize is
        a job in both lists). Returns when the stopped runs are gone and the launches are under
        way. Stopping an unknown or ended job is a no-op. A launch that cannot start is reported
        by `observe` as a failed run, never raised, so one bad launch cannot undo a decision."""

    @abstractmethod
    def observe(self) -> dict[str, Observation]:
        """The current state of every job started (or adopted) and not yet forgotten."""

    def node_events(self) -> list[NodeEvent]:
        """Nodes that failed or came back since the last call (`NodeEvent.time` is unix time):
        what the backend queued with `_note_node`. A backend whose nodes cannot fail says nothing."""
        return self.__dict__.pop("_node_queue", [])

    def _note_node(self, at: float, node: int, kind: str) -> None:
        """Queue a node event for the controller's next `node_events`."""
        self.__dict__.setdefault("_node_queue", []).append(NodeEvent(at, node, kind))

    def foreign_usage(self) -> np.ndarray | None:
        """What others use on each node of `cluster()` (nodes × resources, as `Cluster.capacity`),
        e.g. pods of other schedulers on a shared Kubernetes node; None when nobody else uses them."""
        return None

    def adopt(self, launch: Launch) -> bool:
        """Re-attach to a run started before the controller restarted. Returns False when the run
        is not alive any more (the controller then restarts it from its checkpoint, or marks it
        done if it finished meanwhile). Backends that cannot adopt return False."""
        return False

    def forget(self, job_id: str) -> None:
        """Drop a finished, failed or stopped job from `observe` (its files stay)."""

    def close(self) -> None:
        """Stop everything this backend started (checkpointing) and release its resources."""

    def detach(self) -> None:
        """Release what this backend holds but leave its runs running, for the next controller to
        adopt (what a service that leaves its jobs up calls instead of `close`)."""

    def lost(self) -> str:
        """Why this backend may no longer act on its cluster (another controller leads it now),
        "" while it may. The service stops, leaving the jobs to the new leader."""
        return ""

    # ------------------------------------------------------------------ one job at a time
    def start(self, launch: Launch) -> None:
        """`apply` with one launch (tests, tools)."""
        self.apply((), (launch,))

    def stop(self, job_id: str, timeout: float = STOP_TIMEOUT_S) -> None:
        """`apply` with one stop (tests, tools)."""
        self.apply((job_id,), (), timeout)
