"""What a policy sees when it is asked to decide.

`JobState` objects are owned by the engine (simulator or live controller) and updated in place;
building fresh immutable copies of every job on every event would dominate the simulator's cost
on an 82k-job trace. A policy must treat them as read-only: the engine only ever acts on the
`Plan` a policy returns, and validates it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Callable

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec

if TYPE_CHECKING:
    from dlsched.throughput.base import ThroughputModel


class JobStatus(str, Enum):
    FUTURE = "future"  # not yet submitted
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    REJECTED = "rejected"
    UNFINISHED = "unfinished"  # the run ended with the job still waiting or running


class Clock:
    """The engine's current time, shared by every JobState so that progress is computed lazily."""

    __slots__ = ("now",)

    def __init__(self, now: float = 0.0):
        self.now = now


@dataclass(eq=False, slots=True)
class JobState:
    """A job's observable state. Read-only for policies. Slotted: no per-job `__dict__`.

    Progress, attained service and GPU-seconds of a running job grow continuously; they are
    stored as of `last_update` and read through properties that add what accrued until the
    engine's clock, so the engine never has to touch every running job on every event.
    """

    spec: JobSpec
    index: int
    clock: Clock
    rank: int = 0  # position in arrival order (submit time, then index): a cheap FIFO sort key
    status: JobStatus = JobStatus.FUTURE
    allocation: Allocation | None = None
    held: Allocation | None = None  # resources a partially placed (non-gang) job sits on
    rate: float = 0.0  # iterations/s of the current allocation (what a live system measures)
    last_update: float = 0.0
    resume_at: float = 0.0  # paused for a restart/resize until then
    first_start: float | None = None
    end_time: float | None = None
    last_start: float | None = None  # when the current run (or the last one) began
    last_stop: float | None = None  # when the job last stopped running (preempted)
    restarts: int = 0
    preemptions: int = 0
    reason: str = ""
    version: int = 0  # invalidates stale completion events
    # (nodes, workers, ps) -> iterations/s seen: what a live system learns by running a job
    observed_rates: dict[tuple[int, int, int], float] = field(default_factory=dict)
    loss_fn: Callable[[float], float] | None = None  # the job's training-loss curve (engine-set)
    alloc_gpus: float = 0.0  # GPUs of the current allocation
    held_gpus: float = 0.0
    alloc_nodes: int = 0  # nodes the current allocation spans
    fee_rate: float = 0.0  # USD per second the current allocation costs (its GPUs × their nodes' prices)
    # node -> speed factor the job's workers there measure (per-worker step time against the
    # type-level profile, as PAI's per-worker mini-batch times give): set by the simulator at each
    # run and speed change, kept after the run ends (what its last run measured); None where
    # nothing measured it (the live backends do not report it yet)
    node_speeds: dict[int, float] | None = None
    _progress: float = 0.0
    _attained: float = 0.0
    _run_time: float = 0.0
    _held_gpu_seconds: float = 0.0
    _node_seconds: float = 0.0
    _waited: float = 0.0
    _fee: float = 0.0

    # --- continuously growing quantities ---------------------------------------------------
    def _elapsed(self) -> float:
        return max(0.0, self.clock.now - self.last_update)

    @property
    def progress(self) -> float:
        """Iterations done."""
        if self.status is not JobStatus.RUNNING:
            return self._progress
        start = max(self.last_update, self.resume_at)
        return min(self.spec.iterations, self._progress + self.rate * max(0.0, self.clock.now - start))

    @property
    def attained_service(self) -> float:
        """GPU-seconds allocated so far (Tiresias' 2D-LAS service), restart pauses included."""
        if self.status is not JobStatus.RUNNING:
            return self._attained
        return self._attained + self.alloc_gpus * self._elapsed()

    @property
    def gpu_seconds(self) -> float:
        return self.attained_service

    @property
    def fee(self) -> float:
        """USD charged so far: GPU-hours held × the price of the nodes they were on."""
        if self.status is not JobStatus.RUNNING:
            return self._fee
        return self._fee + self.fee_rate * self._elapsed()

    @property
    def run_time(self) -> float:
        """Seconds spent holding a running allocation."""
        if self.status is not JobStatus.RUNNING:
            return self._run_time
        return self._run_time + self._elapsed()

    @property
    def node_seconds(self) -> float:
        """Seconds running × nodes spanned: node_seconds / run_time is how spread out the job ran
        (1.0 = always on one node), the locality DRAGON-style placement is meant to improve."""
        if self.status is not JobStatus.RUNNING:
            return self._node_seconds
        return self._node_seconds + self.alloc_nodes * self._elapsed()

    @property
    def held_gpu_seconds(self) -> float:
        """GPU-seconds held by a partial placement while the job could not run: pure waste."""
        extra = self.held_gpus * self._elapsed() if self.held is not None else 0.0
        return self._held_gpu_seconds + extra

    @property
    def waited(self) -> float:
        """Seconds spent waiting since submit: every stretch the job was neither running nor
        ended — before its first start and after each preemption or failed run (a held partial
        placement is still waiting). Folded in by `settle` like the other totals, so it costs
        nothing per event beyond the lifecycle's own starts and stops."""
        if self.status is not JobStatus.PENDING:
            return self._waited
        return self._waited + self._elapsed()

    def finish_work(self) -> None:
        """All its iterations are done (a completion: the driver has settled the job first)."""
        self._progress = self.spec.iterations

    @property
    def reported_progress(self) -> float:
        """Iterations done as of the last settle (live: the trainer's last report), without the
        extrapolation `progress` adds for the time since."""
        return self._progress

    def report_progress(self, done: float) -> None:
        """Iterations done as a live trainer reported them (the driver has settled the job first)."""
        self._progress = float(min(done, self.spec.iterations))

    def settle(self, now: float) -> None:
        """Fold what accrued up to `now` into the stored values (engine only).

        The same arithmetic as the properties above read at `now` (`x if x > 0.0 else 0.0` is
        `max(0.0, x)`, and so on), written out once: every start, stop and end settles a job, and
        six property calls per settle were a visible part of each decision."""
        e = now - self.last_update
        if not e > 0.0:
            e = 0.0
        status = self.status
        if status is JobStatus.RUNNING:
            lu, ra = self.last_update, self.resume_at
            ran = now - (ra if ra > lu else lu)
            done = self._progress + self.rate * (ran if ran > 0.0 else 0.0)
            total = self.spec.iterations
            self._progress = done if done < total else total
            self._attained = self._attained + self.alloc_gpus * e
            self._run_time = self._run_time + e
            self._node_seconds = self._node_seconds + self.alloc_nodes * e
            self._fee = self._fee + self.fee_rate * e
        elif status is JobStatus.PENDING:
            self._waited = self._waited + e
        if self.held is not None:
            self._held_gpu_seconds = self._held_gpu_seconds + self.held_gpus * e
        self.last_update = now

    # --- convenience -------------------------------------------------------------------------
    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def num_workers(self) -> int:
        return self.allocation.num_workers if self.allocation else 0

    @property
    def num_ps(self) -> int:
        return self.allocation.num_ps if self.allocation else 0

    @property
    def gpus(self) -> float:
        return self.alloc_gpus

    @property
    def declared_work(self) -> float | None:
        """Total iterations the user declared, or None: what a non-oracle policy may know of the
        job's work. `spec.iterations` is the simulator's ground truth; only an oracle reads it."""
        return self.spec.iterations if self.spec.work_known else None

    def waiting_since(self, now: float) -> float:
        """Seconds since the job last ran (or since submit): Tiresias/DRAGON starvation clocks."""
        ref = self.last_stop if self.last_stop is not None else self.spec.submit_time
        return now - ref

    def observed_loss(self, points: int = 20) -> list[tuple[float, float]]:
        """(iteration, training loss) samples logged so far, as a live trainer would report them.

        Only progress up to now is visible, so fitting these is an honest estimate of the total
        work (Optimus' convergence model), not ground truth.
        """
        return observed_losses([self], points)[0]


def observed_losses(jobs: list[JobState], points: int = 20) -> list[list[tuple[float, float]]]:
    """`JobState.observed_loss` of each job (`observed_loss_arrays` as (iteration, loss) pairs)."""
    return [[] if row is None else list(zip(row[0].tolist(), row[1].tolist()))
            for row in observed_loss_arrays(jobs, points)]


def observed_loss_arrays(jobs: list[JobState], points: int = 20) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Each job's logged (iterations, losses) as two arrays, None before it has run. A job class
    with its own `observed_loss` (a live job: the samples its trainer reported; its class sets
    `reports_loss`) is asked for it; otherwise the simulator's loss curve is sampled. Curves whose
    class offers `sample_many(curves, ks)` (the simulator's) are sampled together in one NumPy
    pass: a scheduler refitting many jobs at once would otherwise pay one Python call per sample
    (50 per fit); a fit reads the arrays as they are (no pairs to build and convert back)."""
    out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(jobs)
    batches: dict[Callable, list[tuple[int, float]]] = {}
    for i, js in enumerate(jobs):
        if getattr(js, "reports_loss", False):  # a live job: the samples its trainer reported
            pairs = js.observed_loss(points)
            out[i] = (np.array([k for k, _ in pairs], dtype=float),
                      np.array([v for _, v in pairs], dtype=float)) if pairs else None
            continue
        done = js.progress
        if js.loss_fn is None or done <= 0:
            continue
        many = getattr(type(js.loss_fn), "sample_many", None)
        if many is None:
            ks = np.linspace(done / points, done, points)
            out[i] = ks, np.array([js.loss_fn(k) for k in ks], dtype=float)
        else:
            batches.setdefault(many, []).append((i, done))
    for many, members in batches.items():
        done = np.array([d for _, d in members])
        ks = np.linspace(done / points, done, points, axis=1)  # row i: the same as job i's alone
        losses = np.asarray(many([jobs[i].loss_fn for i, _ in members], ks), dtype=float)
        for row, (i, _) in enumerate(members):
            out[i] = ks[row], losses[row]
    return out


class Snapshot:
    """What a policy sees: read-only by convention, valid for the call it was made for.

    `pending` and `running` are built on first use from the state's own dicts (and `free` from its
    arrays), so a policy that works from the deltas (`arrived`, `finished`, `stopped`) never pays
    for the whole queue. `capacity` is what the nodes offer now: a failed node offers nothing.
    """

    __slots__ = ("now", "cluster", "_free", "_pending", "_running", "restart_overhead", "oracle", "rng",
                 "events", "arrived", "finished", "stopped", "capacity", "profile")

    def __init__(
        self,
        now: float,
        cluster: Cluster,
        free: "np.ndarray | Callable[[], np.ndarray]",
        pending: "list[JobState] | dict[str, JobState]",
        running: "list[JobState] | dict[str, JobState]",
        restart_overhead: float,
        oracle: "ThroughputModel | None" = None,
        rng: np.random.Generator | None = None,
        events: tuple[str, ...] = (),
        arrived: tuple[JobState, ...] = (),
        finished: tuple[JobState, ...] = (),
        stopped: tuple[JobState, ...] = (),
        capacity: np.ndarray | None = None,
        profile: "ThroughputModel | None" = None,
    ):
        self.now = now
        self.cluster = cluster
        self._free = free
        self._pending = pending
        self._running = running
        self.restart_overhead = restart_overhead  # seconds a resize/restart pauses a job, as the policy may assume
        # Ground truth, only for a policy wrapped as an oracle (SRTF): the true throughput model
        # (and, through `remaining_iterations`, each job's true work). None otherwise.
        self.oracle = oracle
        self.rng = rng
        self.events = events  # why the policy is asked: "arrival", "completion", "failure", "tick", "wake"
        # What changed since this policy was last asked: jobs that arrived (now waiting), that
        # left for good (done, rejected, failed, cancelled), that stopped running without
        # finishing (preempted by the last plan, a failed run, a node down).
        self.arrived = arrived
        self.finished = finished
        self.stopped = stopped
        self.capacity = cluster.capacity if capacity is None else capacity
        # The type-level throughput profile (what Gavel-style profiling measures: a job's rate on
        # an allocation's GPU types and sizes, at nominal machine speed), or None where none is
        # known. Not ground truth: machines' own speed factors and their changes are not in it,
        # and it says nothing of a job's total work.
        self.profile = profile

    @property
    def free(self) -> np.ndarray:
        """(N, 3) free resources now (read-only). The core's own array, not a copy: it is
        valid during the call; a policy that keeps it for later must copy it."""
        if callable(self._free):
            self._free = self._free()
        return self._free

    @property
    def pending(self) -> list[JobState]:
        """Submitted jobs not running (partially placed ones included), in the order they queued."""
        if isinstance(self._pending, dict):
            self._pending = list(self._pending.values())
        return self._pending

    @property
    def running(self) -> list[JobState]:
        if isinstance(self._running, dict):
            self._running = list(self._running.values())
        return self._running

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    @property
    def num_running(self) -> int:
        return len(self._running)

    def jobs(self) -> list[JobState]:
        """Running then pending jobs."""
        return self.running + self.pending

    def remaining_iterations(self, job: JobState) -> float:
        """True remaining work, for oracle policies only."""
        if self.oracle is None:
            raise RuntimeError("remaining_iterations is ground truth: declare the policy an oracle")
        return job.spec.iterations - job.progress
