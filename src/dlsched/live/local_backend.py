"""The local backend: every task of a job is a trainer process on this machine.

Tasks are placed on virtual nodes (`dlsched.live.nodes`): the node only decides the process's
`DLSCHED_NODE` and the scheduler's accounting, all processes share this machine's cores. Rank
order follows the trainer contract: the parameter servers first (ranks 0..K-1, in node order),
then the workers; the rendezvous is `127.0.0.1` on a port free at launch time.

Processes are started in their own session, so they survive a controller crash; `pids.json` in
the job directory records their pids with psutil create times (a recycled pid is never taken for
ours), and a restarted controller re-attaches with `adopt`. Each rank's output goes to
`job_dir/logs/run<attempt>-rank<r>.log`.

Resize pause: `stop` records when it sent SIGTERM in `last_stop_requested[job_id]` (unix time);
the next run's `Observation.first_step_at` is the time of its trainer's "start" record, so the
pause is `first_step_at - last_stop_requested[job_id]`. `run_started` is when the run was
launched. With `standby` > 0 a pool of warm `--standby` interpreters (see `standby_pool`) takes
the torch import out of that pause.

A run is judged from its processes and the job directory: done once `done.json` exists and the
ranks have exited; stopped after `stop`; failed when a rank exits without `done.json` and nobody
asked, in which case the rest of that run is killed at once (the survivors would hang in a
collective waiting for the dead rank) and `message` carries the exit codes and the failing rank's
log tail. Exit codes of adopted processes (not our children) are unknown; a rank of theirs that is
gone without `done.json` counts as failed after a short grace.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.live.backend import Backend, Launch, Observation, RunState
from dlsched.live.nodes import LocalNodes, default_local_nodes, load_nodes
from dlsched.live.progress_log import ProgressReader, is_done, log_tail
from dlsched.live.standby_pool import StandbyPool

log = logging.getLogger(__name__)

PIDS = "pids.json"
#: Warm interpreters kept when `standby=True`: enough for the largest job of the default nodes.
DEFAULT_STANDBY = 4
#: A rank gone (exit code 0 or unknown) while others run: failed after this long without done.json.
EXIT_GRACE_S = 5.0
#: done.json written but some rank still up after this long: it is killed and the job is done.
DONE_GRACE_S = 15.0
POLL_S = 0.02
CREATE_TIME_TOL = 0.05


@dataclass
class _Rank:
    rank: int
    role: str  # "ps" | "worker"
    node: str
    pid: int
    create_time: float
    log: Path
    proc: subprocess.Popen | None = None  # None when adopted
    warm: bool = False  # started from the standby pool
    exited: bool = False
    code: int | None = None  # exit code when known (our child); negative: killed by that signal
    exited_at: float | None = None

    def poll(self, now: float) -> bool:
        """Refresh `exited`; True while the process runs."""
        if self.exited:
            return False
        if self.proc is not None:
            code = self.proc.poll()
            if code is None:
                return True
            self.code = code
        elif _alive(self.pid, self.create_time):
            return True
        self.exited, self.exited_at = True, now
        return False

    def signal(self, sig: int) -> None:
        """Signal the rank's process group (it is a session leader; children go too)."""
        if self.exited:
            return
        if self.proc is None and not _alive(self.pid, self.create_time):
            return
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:  # not a group leader after all: the process alone
            try:
                os.kill(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def reap(self) -> None:
        if self.proc is not None:
            try:
                self.code = self.proc.wait(timeout=0)
            except subprocess.TimeoutExpired:
                pass


@dataclass
class _Run:
    launch: Launch
    run_id: str
    ranks: list[_Rank]
    started: float
    adopted: bool = False
    stop_requested: float | None = None
    state: RunState = "running"
    message: str = ""
    done_seen: float | None = None


@dataclass
class _Job:
    reader: ProgressReader
    run: _Run


class LocalBackend(Backend):
    """Trainer processes on this machine, on virtual nodes.

    `nodes`: a `LocalNodes`, a path to its YAML, or None for `default_local_nodes()`.
    `trainer_cmd`: the command before the trainer arguments (tests swap in a fake trainer).
    `standby`: warm interpreters to keep (True: `DEFAULT_STANDBY`); 0 disables the pool.
    `log_dir`: where idle standby interpreters write (their logs move to the job directory when
    they are used); a temporary directory by default. Put it on the job directories' filesystem
    (e.g. `work_dir / "standby"`): across filesystems a rank's log is a symlink into it instead.

    Not thread-safe: one controller thread drives it (the standby pool has its own thread).
    """

    name = "local"

    def __init__(self, nodes: LocalNodes | str | Path | None = None, trainer_cmd: list[str] | None = None,
                 standby: int | bool = 0, log_dir: str | Path | None = None):
        if nodes is None:
            nodes = default_local_nodes()
        elif isinstance(nodes, (str, Path)):
            nodes = load_nodes(nodes)
        elif not isinstance(nodes, LocalNodes):
            raise ConfigError(f"nodes must be LocalNodes, a YAML path or None, got {type(nodes).__name__}")
        self.nodes = nodes
        self._cluster = nodes.to_cluster()
        self.trainer_cmd = list(trainer_cmd) if trainer_cmd else [sys.executable, "-m", "dlsched.trainer"]
        size = DEFAULT_STANDBY if standby is True else int(standby or 0)
        if size < 0:
            raise ConfigError(f"standby must be >= 0, got {standby}")
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="dlsched-local-"))
        self.pool = StandbyPool(self.trainer_cmd, size, self.log_dir / "standby") if size else None
        self.jobs: dict[str, _Job] = {}
        #: unix time `stop` sent SIGTERM to the job's last run (for the resize pause)
        self.last_stop_requested: dict[str, float] = {}
        self._closed = False

    # ------------------------------------------------------------------ Backend
    def cluster(self) -> Cluster:
        return self._cluster

    def start(self, launch: Launch) -> None:
        if self._closed:
            raise RuntimeError("backend is closed")
        old = self.jobs.get(launch.job_id)
        if old is not None:
            self._poll(old.run)
            if old.run.state == "running":
                raise RuntimeError(f"job {launch.job_id} is still running; stop it before starting it again")
        tasks = self._tasks(launch)
        job_dir = Path(launch.job_dir).resolve()
        (job_dir / "logs").mkdir(parents=True, exist_ok=True)
        num_ps = sum(1 for t in tasks if t[0] == "ps")
        argv = launch.job.trainer_argv(job_dir, num_ps)
        run_id = f"{launch.job_id}-a{launch.attempt}-{uuid.uuid4().hex[:8]}"
        port = _free_port()
        started = time.time()
        ranks: list[_Rank] = []
        try:
            for r, (role, node) in enumerate(tasks):
                env = {
                    "RANK": str(r), "WORLD_SIZE": str(len(tasks)), "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port), "DLSCHED_RUN_ID": run_id, "DLSCHED_NODE": node,
                    "DLSCHED_ROLE": role,
                }
                ranks.append(self._spawn(r, role, node, argv, env, job_dir,
                                         job_dir / "logs" / f"run{launch.attempt}-rank{r}.log"))
        except OSError as e:  # cannot even start: take down what did start, report as failed
            for rk in ranks:
                rk.signal(signal.SIGKILL)
                rk.reap()
            run = _Run(launch, run_id, ranks, started, state="failed",
                       message=f"could not start rank {len(ranks)}: {e}")
            self._install(launch, run)
            return
        run = _Run(launch, run_id, ranks, started)
        _write_pids(job_dir, run, port)
        self._install(launch, run)

    def stop(self, job_id: str, timeout: float = 30.0) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            return
        self._stop_runs([job.run], timeout)

    def observe(self) -> dict[str, Observation]:
        out = {}
        for jid, job in self.jobs.items():
            self._poll(job.run)
            job.reader.poll()
            out[jid] = self._observation(job)
        return out

    def adopt(self, launch: Launch) -> bool:
        job_dir = Path(launch.job_dir).resolve()
        try:
            info = json.loads((job_dir / PIDS).read_text())
            recs = info["ranks"]
            run_id = str(info["run"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if info.get("job_id") not in (None, launch.job_id) or not recs:
            return False
        ranks = []
        for rec in recs:
            try:
                ranks.append(_Rank(int(rec["rank"]), str(rec["role"]), str(rec["node"]), int(rec["pid"]),
                                   float(rec["create_time"]), Path(rec["log"])))
            except (KeyError, TypeError, ValueError):
                return False
        if not all(_alive(rk.pid, rk.create_time) for rk in ranks):
            return False  # (partly) gone: the controller restarts it from its checkpoint
        run = _Run(launch, run_id, ranks, float(info.get("started", time.time())), adopted=True)
        self._install(launch, run)
        return True

    def forget(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            return
        self._poll(job.run)
        if job.run.state == "running":  # never orphan live processes
            self._stop_runs([job.run], 10.0)
        del self.jobs[job_id]

    def close(self) -> None:
        """Stop (checkpointing) every run, adopted ones included, and the standby pool."""
        if self._closed:
            return
        self._closed = True
        runs = [j.run for j in self.jobs.values()]
        try:
            self._stop_runs(runs, 30.0)
        finally:
            if self.pool is not None:
                self.pool.close()

    def __del__(self) -> None:  # pragma: no cover - best effort: idle standbys only
        pool = getattr(self, "pool", None)
        if pool is not None and not getattr(self, "_closed", True):
            pool.close()

    # ------------------------------------------------------------------ helpers
    def pids(self, job_id: str) -> list[int]:
        """The pids of the job's current run (tests, diagnostics)."""
        job = self.jobs.get(job_id)
        return [rk.pid for rk in job.run.ranks] if job else []

    def placements(self, job_id: str) -> list[dict]:
        """Where each rank of the current run is: rank, role, node, pid, whether it was warm."""
        job = self.jobs.get(job_id)
        if job is None:
            return []
        return [{"rank": rk.rank, "role": rk.role, "node": rk.node, "pid": rk.pid, "warm": rk.warm}
                for rk in job.run.ranks]

    def _tasks(self, launch: Launch) -> list[tuple[str, str]]:
        """(role, node name) per rank: parameter servers first, then workers, in node order."""
        alloc = launch.allocation
        names = self.nodes.names
        for n in alloc.nodes:
            if not 0 <= n < len(names):
                raise ConfigError(f"job {launch.job_id}: allocation uses node {n}, the local backend has "
                                  f"{len(names)} ({', '.join(names)})")
        if alloc.num_workers < 1:
            raise ConfigError(f"job {launch.job_id}: allocation has no worker")
        ps_mode = launch.job.mode == "ps"
        if ps_mode and alloc.num_ps < 1:
            raise ConfigError(f"job {launch.job_id}: mode 'ps' needs at least one parameter server")
        if not ps_mode and alloc.num_ps:
            raise ConfigError(f"job {launch.job_id}: mode 'ddp' has no parameter servers, "
                              f"the allocation places {alloc.num_ps}")
        tasks = [("ps", names[n]) for n, p in zip(alloc.nodes, alloc.ps) for _ in range(p)]
        tasks += [("worker", names[n]) for n, w in zip(alloc.nodes, alloc.workers) for _ in range(w)]
        return tasks

    def _spawn(self, r: int, role: str, node: str, argv: list[str], env: dict[str, str],
               job_dir: Path, log_path: Path) -> _Rank:
        warm = self.pool.take() if self.pool is not None else None
        if warm is not None:
            try:
                StandbyPool.hand_off(warm, argv, env, log_path)
                return _Rank(r, role, node, warm.proc.pid, warm.create_time, log_path, warm.proc, warm=True)
            except OSError as e:  # it died between take and hand-off: cold start instead
                log.info("standby %d unusable (%s); cold start", warm.proc.pid, e)
                warm.proc.kill()
                warm.proc.wait()
        full_env = dict(os.environ)
        full_env.update(env)
        with open(log_path, "ab") as out:
            proc = subprocess.Popen([*self.trainer_cmd, *argv], env=full_env, cwd=job_dir,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            ct = psutil.Process(proc.pid).create_time()
        except psutil.Error:  # already gone: observe reports it
            ct = 0.0
        return _Rank(r, role, node, proc.pid, ct, log_path, proc)

    def _install(self, launch: Launch, run: _Run) -> None:
        job = self.jobs.get(launch.job_id)
        job_dir = Path(launch.job_dir).resolve()
        if job is None or Path(job.reader.job_dir) != job_dir:
            job = _Job(ProgressReader(job_dir), run)
            self.jobs[launch.job_id] = job
        job.run = run

    def _stop_runs(self, runs: list[_Run], timeout: float) -> None:
        """SIGTERM all ranks of all `runs` at once, wait up to `timeout`, SIGKILL the rest."""
        now = time.time()
        live = []
        for run in runs:
            self._poll(run)
            if run.state != "running":
                continue
            run.stop_requested = now
            self.last_stop_requested[run.launch.job_id] = now
            for rk in run.ranks:
                if rk.poll(now):
                    rk.signal(signal.SIGTERM)
                    live.append(rk)
        deadline = time.monotonic() + timeout
        while live and time.monotonic() < deadline:
            t = time.time()
            live = [rk for rk in live if rk.poll(t)]
            if live:
                time.sleep(POLL_S)
        killed = {id(rk) for rk in live}
        for rk in live:
            rk.signal(signal.SIGKILL)
        _wait_gone(live, 10.0)
        for run in runs:
            if run.stop_requested != now:
                continue
            n = sum(1 for rk in run.ranks if id(rk) in killed)
            if n:
                run.message = f"{n} rank(s) killed after not exiting {timeout:g} s after SIGTERM"
            self._poll(run)

    def _poll(self, run: _Run) -> None:
        """Update `run.state` from its processes and the job directory."""
        if run.state != "running":
            return
        now = time.time()
        alive = [rk for rk in run.ranks if rk.poll(now)]
        job_dir = Path(run.launch.job_dir)
        if is_done(job_dir):
            if not alive:
                run.state = "done"
                return
            run.done_seen = run.done_seen or now
            if now - run.done_seen > DONE_GRACE_S:
                for rk in alive:
                    rk.signal(signal.SIGKILL)
                _wait_gone(alive, 5.0)
                run.state = "done"
                run.message = f"{len(alive)} rank(s) killed: still up {DONE_GRACE_S:g} s after done.json"
            return
        if run.stop_requested is not None:
            if not alive:
                run.state = "stopped"
            return
        gone = [rk for rk in run.ranks if rk.exited]
        if not gone:
            return
        crashed = [rk for rk in gone if rk.code not in (None, 0)]
        overdue = [rk for rk in gone if rk.exited_at is not None and now - rk.exited_at > EXIT_GRACE_S]
        if alive and not crashed and not overdue:
            return  # a clean exit while others finish: give the done marker a moment
        if alive:
            for rk in alive:
                rk.signal(signal.SIGKILL)
            _wait_gone(alive, 5.0)
            if is_done(job_dir):  # it finished in the meantime after all
                run.state = "done"
                return
        run.state = "failed"
        run.message = _failure_message(run, crashed or gone)

    def _observation(self, job: _Job) -> Observation:
        run, rd = job.run, job.reader
        first = None
        for rec in reversed(rd.starts):
            if rec.get("run") == run.run_id and isinstance(rec.get("time"), (int, float)):
                first = float(rec["time"])
                break
        current = rd.last is not None and rd.last.get("run") == run.run_id
        return Observation(
            job_id=run.launch.job_id,
            state=run.state,
            step=rd.step,
            loss=rd.loss,
            steps_per_s=rd.steps_per_s if current and run.state == "running" else None,
            samples=list(rd.samples),
            run_started=run.started,
            first_step_at=first,
            message=run.message,
        )


# ---------------------------------------------------------------------------------- functions
def _alive(pid: int, create_time: float) -> bool:
    """Whether `pid` is still the process we recorded (and not a zombie)."""
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - create_time) > CREATE_TIME_TOL:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(ranks: list[_Rank], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = list(ranks)
    while pending and time.monotonic() < deadline:
        t = time.time()
        pending = [rk for rk in pending if rk.poll(t)]
        if pending:
            time.sleep(POLL_S)
    for rk in ranks:
        rk.reap()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_pids(job_dir: Path, run: _Run, port: int) -> None:
    data = {
        "job_id": run.launch.job_id, "run": run.run_id, "attempt": run.launch.attempt,
        "started": run.started, "master_port": port,
        "ranks": [{"rank": rk.rank, "role": rk.role, "node": rk.node, "pid": rk.pid,
                   "create_time": rk.create_time, "log": str(rk.log)} for rk in run.ranks],
    }
    tmp = job_dir / f".{PIDS}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, job_dir / PIDS)


def _describe_exit(rk: _Rank) -> str:
    if rk.code is None:
        return "exited (code unknown: adopted)"
    if rk.code < 0:
        try:
            return f"killed by {signal.Signals(-rk.code).name}"
        except ValueError:
            return f"killed by signal {-rk.code}"
    return f"exited with code {rk.code}"


def _failure_message(run: _Run, culprits: list[_Rank]) -> str:
    parts = [f"rank {rk.rank} ({rk.role} on {rk.node}, pid {rk.pid}) {_describe_exit(rk)}" for rk in culprits]
    msg = "; ".join(parts) + " without done.json"
    first = culprits[0]
    tail = log_tail(first.log, 1500)
    if tail:
        msg += f"\n--- tail of {first.log.name} ---\n{tail}"
    return msg
