"""What every process-running backend does the same way: rank layout, run records, judging, observing.

A backend that runs a job as ranks (trainer processes) subclasses `RankBackend` and supplies only
its mechanism: how to start the ranks of a `Launch` (`_launch`), and how to poll, signal, wait for
and release them (`_poll_ranks`, `_signal`, `_wait`, `_release`). Everything the controller sees
is decided here, once: the rank order of the trainer contract, a batch of stops and launches
(`apply`: every stop signalled at once, so a preemption wave costs one timeout, not one per job),
a run's state, the failure message and the `Observation`.

A run is judged from its ranks and the job directory: done once `done.json` exists and every rank
has exited (ranks still up `DONE_GRACE_S` after it are killed); stopped once every rank has exited
after `stop`; failed when a rank exits without `done.json` and nobody asked, in which case the rest
of that run is killed at once (the survivors would hang in a collective waiting for the dead
rank) and `message` carries how each rank ended and the failing rank's log tail. A rank that exits
cleanly (or with an unknown code) while others run is given `EXIT_GRACE_S` for the done marker to
appear before the run counts as failed.

`Observation.first_step_at` is the time of the run's trainer's "start" record (its first step):
the controller measures a resize pause from when it asked for the stop to that time.
"""

from __future__ import annotations

import re
import signal
import time
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dlsched.core.errors import ConfigError
from dlsched.live.backends.base import STOP_TIMEOUT_S, Backend, Launch, Observation, RunState
from dlsched.trainer.protocol import ProgressReader, is_done, log_tail, read_done

#: A rank gone (exit code 0 or unknown) while others run: failed after this long without done.json.
EXIT_GRACE_S = 5.0
#: done.json written but some rank still up after this long: it is killed and the job is done.
DONE_GRACE_S = 15.0
#: After SIGKILL, how long to wait for the ranks to be gone.
KILL_WAIT_S = 10.0
#: Longest one-line failure summary.
SUMMARY_LIMIT = 300


def rank_layout(launch: Launch, node_names: tuple[str, ...] | list[str]) -> list[tuple[str, int]]:
    """(role, node index) per rank, per the trainer contract: parameter servers first, then
    workers, each in node order. Raises `ConfigError` for an allocation the job cannot run on."""
    alloc, jid = launch.allocation, launch.job_id
    for n in alloc.nodes:
        if not 0 <= n < len(node_names):
            raise ConfigError(f"job {jid}: the allocation uses node {n}, but node index {n} is not in the "
                              f"cluster ({len(node_names)} nodes: {', '.join(node_names)})")
    if alloc.num_workers < 1:
        raise ConfigError(f"job {jid}: an allocation needs at least one worker")
    ps_mode = launch.job.mode == "ps"
    if ps_mode and alloc.num_ps < 1:
        raise ConfigError(f"job {jid}: mode 'ps' needs at least one parameter server")
    if not ps_mode and alloc.num_ps:
        raise ConfigError(f"job {jid}: mode 'ddp' takes no parameter servers, the allocation places {alloc.num_ps}")
    layout = [("ps", n) for n, p in zip(alloc.nodes, alloc.ps) for _ in range(p)]
    return layout + [("worker", n) for n, w in zip(alloc.nodes, alloc.workers) for _ in range(w)]


@dataclass
class Rank:
    """One trainer process of a run, as far as judging it goes. Backends subclass it with their
    handle on the process (a Popen, a Ray actor)."""

    rank: int
    role: str  # "ps" | "worker"
    node: str  # node name
    pid: int | None = None
    log: Path | None = None
    warm: bool = False  # handed to a standby interpreter instead of a cold start
    exited: bool = False
    code: int | None = None  # exit code when known; negative: killed by that signal
    exited_at: float | None = None
    error: str | None = None  # why it has no process (never started, its Ray actor died)
    tail: str = ""  # its log's tail, when the launcher fetched it (the log may be on another machine)

    def ended(self, now: float, code: int | None = None, error: str | None = None) -> None:
        """Record that the process is gone (first report wins the time)."""
        if not self.exited:
            self.exited, self.exited_at = True, now
        if code is not None:
            self.code = code
        if error is not None and self.error is None:
            self.error = error

    @property
    def crashed(self) -> bool:
        return self.exited and (self.error is not None or self.code not in (None, 0))

    def describe_exit(self) -> str:
        if self.error is not None:
            return self.error
        if self.code is None:
            return "exited (code unknown: adopted)"
        if self.code < 0:
            try:
                return f"killed by {signal.Signals(-self.code).name}"
            except ValueError:
                return f"killed by signal {-self.code}"
        return f"exited with code {self.code}"


@dataclass
class Run:
    """One launch of a job: its ranks and what has become of them."""

    launch: Launch
    run_id: str
    started: float  # unix time it was launched
    ranks: list[Rank]
    stop_requested: float | None = None
    state: RunState = "running"
    message: str = ""
    done_seen: float | None = None


@dataclass
class Job:
    """A job's progress log (read across all its runs) and its current run."""

    reader: ProgressReader
    run: Run


def failure_message(culprits: list[Rank]) -> str:
    """How each culprit ended, then the tail of the first one's log (what people need first)."""
    parts = [f"rank {rk.rank} ({rk.role} on {rk.node}" + (f", pid {rk.pid}" if rk.pid else "") + f") "
             f"{rk.describe_exit()}" for rk in culprits]
    msg = "; ".join(parts) + " without done.json"
    first = culprits[0]
    tail = first.tail or log_tail(first.log, 1500)
    if tail:
        msg += f"\n--- tail of {first.log.name if first.log else f'rank {first.rank}'} ---\n{tail[-1500:]}"
    return msg


def last_error_line(text: str) -> str:
    """The line of a log tail that says what went wrong: the last one naming an error (a Python
    traceback ends with it; the trainer's own "rank N failed: ..." too), else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("--- tail of ")]
    for ln in reversed(lines):
        if _ERROR_LINE.search(ln):
            return ln
    return lines[-1] if lines else ""


_ERROR_LINE = re.compile(r"error|exception|failed|fatal|killed|abort|timeout", re.IGNORECASE)


def one_line(message: str) -> str:
    """A failure message (`failure_message`, or any backend's) in one line for people: its first
    line (how the ranks ended) and the last error line of the log tail below it, without control
    characters, at most `SUMMARY_LIMIT` characters. The full text belongs in the job's events."""
    head, _, rest = message.strip().partition("\n")
    line = last_error_line(rest)
    text = f"{head}: {line}" if line else head
    text = "".join(c if c.isprintable() else " " for c in text)
    return text if len(text) <= SUMMARY_LIMIT else text[: SUMMARY_LIMIT - 1] + "…"


def observation(job: Job) -> Observation:
    """What the controller sees of `job`: the run's state, and progress from the log."""
    run, rd = job.run, job.reader
    first = None
    for rec in reversed(rd.starts):
        if rec.get("run") == run.run_id and isinstance(rec.get("time"), (int, float)):
            first = float(rec["time"])
            break
    current = rd.last is not None and rd.last.get("run") == run.run_id
    resume = next((rec for rec in reversed(rd.resumes) if rec.get("run") == run.run_id), None)
    job_dir = Path(run.launch.job_dir)
    return Observation(
        job_id=run.launch.job_id, state=run.state, step=rd.step,
        steps_per_s=rd.steps_per_s if current and run.state == "running" else None,
        samples=list(rd.samples), first_step_at=first, message=run.message, resume=resume,
        done=(read_done(job_dir) or {}) if is_done(job_dir) else None)


class RankBackend(Backend):
    """A backend whose runs are ranks it can poll, signal and wait for; it judges them here.

    Subclasses start runs in `start` (`_check_restartable`, `rank_layout`, then `_install` the
    `Run`) and implement the four mechanism hooks. Not thread-safe: one controller thread drives it.
    """

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}

    # ------------------------------------------------------------------ mechanism
    @abstractmethod
    def _launch(self, launch: Launch) -> None:
        """Start every rank of `launch` (`_check_restartable`, `rank_layout`, then `_install` the
        `Run`); a launch that cannot start is installed as a failed run (`_end`), not raised,
        except for an allocation the job cannot run on (`ConfigError`, a controller bug)."""

    @abstractmethod
    def _poll_ranks(self, ranks: list[Rank], now: float) -> None:
        """Refresh `exited`/`code`/`error` of `ranks` (`Rank.ended`) without blocking for long."""

    @abstractmethod
    def _signal(self, ranks: list[Rank], sig: int) -> None:
        """Send `sig` to the processes of `ranks` (and their children)."""

    @abstractmethod
    def _wait(self, ranks: list[Rank], timeout: float) -> None:
        """Return once every rank of `ranks` has exited, or after `timeout`."""

    def _release(self, run: Run) -> None:
        """Free what an ended run holds besides its processes (Ray: actors, placement group)."""

    # ------------------------------------------------------------------ Backend
    def apply(self, stops: Sequence[str], launches: Sequence[Launch], timeout: float = STOP_TIMEOUT_S) -> None:
        runs = [self.jobs[j].run for j in dict.fromkeys(stops) if j in self.jobs]
        if runs:
            self._stop_runs(runs, timeout)
        for launch in launches:
            self._launch(launch)

    def observe(self) -> dict[str, Observation]:
        out = {}
        for jid, job in self.jobs.items():
            self._judge(job.run)
            job.reader.poll()
            out[jid] = observation(job)
        return out

    def fail_node(self, node: int) -> None:
        """Fault injection (chaos runs, the conformance suite): node `node` goes down. Every rank
        on it is killed, so its runs fail as they would with the machine, and `node_events`
        reports the failure (the controller then keeps the node out of plans)."""
        name = self.cluster().node_names[node]
        self._kill([rk for job in self.jobs.values() if job.run.state == "running"
                    for rk in job.run.ranks if rk.node == name and not rk.exited], KILL_WAIT_S)
        self._note_node(time.time(), node, "fail")

    def join_node(self, node: int) -> None:
        """Fault injection: node `node` is back."""
        self._note_node(time.time(), node, "join")

    def forget(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            return
        self._judge(job.run)
        if job.run.state == "running":  # never orphan live processes
            self._stop_runs([job.run], 10.0)
        del self.jobs[job_id]

    # ------------------------------------------------------------------ for subclasses
    def _check_restartable(self, job_id: str) -> None:
        old = self.jobs.get(job_id)
        if old is not None:
            self._judge(old.run)
            if old.run.state == "running":
                raise RuntimeError(f"job {job_id} is still running; stop it before starting it again")

    def _install(self, run: Run) -> None:
        """Make `run` its job's current run (the progress reader carries over across runs)."""
        job_dir = Path(run.launch.job_dir).resolve()
        job = self.jobs.get(run.launch.job_id)
        if job is None or Path(job.reader.job_dir).resolve() != job_dir:
            self.jobs[run.launch.job_id] = Job(ProgressReader(job_dir), run)
        else:
            job.run = run

    def _end(self, run: Run, state: RunState, message: str = "") -> None:
        run.state = state
        if message:
            run.message = message
        self._release(run)

    def _kill(self, ranks: list[Rank], timeout: float) -> None:
        if ranks:
            self._signal(ranks, signal.SIGKILL)
            self._wait(ranks, timeout)

    def _stop_runs(self, runs: list[Run], timeout: float) -> None:
        """SIGTERM all ranks of all `runs` at once, wait up to `timeout`, SIGKILL the rest."""
        now = time.time()
        live: list[Rank] = []
        stopping = []
        for run in runs:
            self._judge(run)
            if run.state != "running":
                continue
            run.stop_requested = now
            stopping.append(run)
            live += [rk for rk in run.ranks if not rk.exited]
        if live:
            self._signal(live, signal.SIGTERM)
            self._wait(live, timeout)
        left = [rk for rk in live if not rk.exited]
        self._kill(left, KILL_WAIT_S)
        for run in stopping:
            n = sum(1 for rk in run.ranks if any(rk is x for x in left))
            if n:
                run.message = f"{n} rank(s) killed after not exiting {timeout:g} s after SIGTERM"
            self._judge(run)

    def _judge(self, run: Run) -> None:
        """Update `run.state` from its ranks and the job directory (see the module docstring)."""
        if run.state != "running":
            return
        now = time.time()
        self._poll_ranks(run.ranks, now)
        alive = [rk for rk in run.ranks if not rk.exited]
        job_dir = Path(run.launch.job_dir)
        if is_done(job_dir):
            if not alive:
                self._end(run, "done")
                return
            run.done_seen = run.done_seen or now
            if now - run.done_seen > DONE_GRACE_S:
                self._kill(alive, 5.0)
                self._end(run, "done", f"{len(alive)} rank(s) killed: still up {DONE_GRACE_S:g} s after done.json")
            return
        if run.stop_requested is not None:
            if not alive:
                self._end(run, "stopped")
            return
        gone = [rk for rk in run.ranks if rk.exited]
        if not gone:
            return
        crashed = [rk for rk in gone if rk.crashed]
        overdue = [rk for rk in gone if rk.exited_at is not None and now - rk.exited_at > EXIT_GRACE_S]
        if alive and not crashed and not overdue:
            return  # a clean exit while others finish: give the done marker a moment
        if alive:
            self._kill(alive, 5.0)
            if is_done(job_dir):  # it finished in the meantime after all
                self._end(run, "done")
                return
        self._end(run, "failed", failure_message(crashed or gone))
