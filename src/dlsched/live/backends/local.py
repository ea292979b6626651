"""The local backend: every task of a job is a trainer process on this machine.

Tasks are placed on virtual nodes (`dlsched.live.backends.nodes`): the node only decides the process's
`DLSCHED_NODE` and the scheduler's accounting, all processes share this machine's cores. Rank
order follows the trainer contract (`ranks.rank_layout`); the rendezvous is `127.0.0.1` on a port
free at launch time, and 127.0.0.1 is every rank's node address (`DLSCHED_NODE_ADDR`): nothing a
job opens listens beyond this machine. Runs are judged and observed by `ranks.RankBackend`; this module only starts,
polls and signals processes.

Processes are started in their own session, so they survive a controller crash; `pids.json` in
the job directory records their pids with psutil create times (a recycled pid is never taken for
ours), and a restarted controller re-attaches with `adopt`. Exit codes of adopted processes (not
our children) are unknown; a rank of theirs that is gone without `done.json` counts as failed
after a short grace. Each rank's output goes to `job_dir/logs/run<attempt>-rank<r>.log`.

With `standby` > 0 a pool of warm `--standby` interpreters (`LocalStandbyPool`) takes the torch
import out of the resize pause.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import psutil

from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.live.backends.base import Launch
from dlsched.live.backends.nodes import LocalNodes, default_local_nodes, load_nodes
from dlsched.live.backends.ranks import Rank, RankBackend, Run, rank_layout
from dlsched.live.backends.standby_pool import LocalStandbyPool
from dlsched.trainer.protocol import new_run_id, rank_env

PIDS = "pids.json"
#: Warm interpreters kept when `standby=True`: enough for the largest job of the default nodes.
DEFAULT_STANDBY = 4
POLL_S = 0.02
CREATE_TIME_TOL = 0.05
#: The address of every virtual node: all a job listens on (rendezvous store, gloo, TensorPipe).
LOCAL_ADDR = "127.0.0.1"


@dataclass
class LocalRank(Rank):
    create_time: float = 0.0
    proc: subprocess.Popen | None = None  # None when adopted


class LocalBackend(RankBackend):
    """Trainer processes on this machine, on virtual nodes.

    `nodes`: a `LocalNodes`, a path to its YAML, or None for `default_local_nodes()`.
    `trainer_cmd`: the command before the trainer arguments (tests swap in a fake trainer).
    `standby`: warm interpreters to keep (True: `DEFAULT_STANDBY`); 0 disables the pool.
    `log_dir`: where idle standby interpreters write (their logs move to the job directory when
    they are used); a temporary directory by default (none without a pool). Put it on the job
    directories' filesystem (e.g. `work_dir / "standby"`): across filesystems a rank's log is a
    symlink into it instead.

    Not thread-safe: one controller thread drives it (the standby pool has its own thread).
    """

    name = "local"

    def __init__(self, nodes: LocalNodes | str | Path | None = None, trainer_cmd: list[str] | None = None,
                 standby: int | bool = 0, log_dir: str | Path | None = None):
        super().__init__()
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
        # a temporary directory only when a pool will write there: one per backend built, never removed
        # (a rank's log may link into it), was litter left by every short-lived backend (tests, CLI checks)
        if log_dir is None and size:
            log_dir = tempfile.mkdtemp(prefix="dlsched-local-")
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.pool = LocalStandbyPool(self.trainer_cmd, size, self.log_dir / "standby") if size else None
        self._closed = False

    # ------------------------------------------------------------------ Backend
    def cluster(self) -> Cluster:
        return self._cluster

    def _launch(self, launch: Launch) -> None:
        if self._closed:
            raise RuntimeError("backend is closed")
        names = self.nodes.names
        layout = rank_layout(launch, names)
        self._check_restartable(launch.job_id)
        job_dir = Path(launch.job_dir).resolve()
        (job_dir / "logs").mkdir(parents=True, exist_ok=True)
        argv = launch.job.trainer_argv(job_dir, launch.allocation.num_ps)
        run = Run(launch, new_run_id(launch.job_id, launch.attempt), time.time(), [])
        port = _free_port()
        ranks = [(role, names[n]) for role, n in layout]
        try:
            for r, (role, n) in enumerate(layout):
                env = rank_env(run.run_id, ranks, r, master_addr=LOCAL_ADDR, master_port=port, node_addr=LOCAL_ADDR)
                run.ranks.append(self._spawn(LocalRank(r, role, names[n]), argv, env, job_dir,
                                             job_dir / "logs" / f"run{launch.attempt}-rank{r}.log"))
        except OSError as e:  # cannot even start: take down what did start, report as failed
            self._install(run)
            self._kill(run.ranks, 5.0)
            self._end(run, "failed", f"could not start rank {len(run.ranks)}: {e}")
            return
        _write_pids(job_dir, run, port)
        self._install(run)

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
        try:
            ranks = [LocalRank(int(rec["rank"]), str(rec["role"]), str(rec["node"]), pid=int(rec["pid"]),
                               log=Path(rec["log"]), create_time=float(rec["create_time"])) for rec in recs]
        except (KeyError, TypeError, ValueError):
            return False
        if not all(_alive(rk.pid, rk.create_time) for rk in ranks):
            return False  # (partly) gone: the controller restarts it from its checkpoint
        self._install(Run(launch, run_id, float(info.get("started", time.time())), ranks))
        return True

    def close(self) -> None:
        """Stop (checkpointing) every run, adopted ones included, and the standby pool."""
        if self._closed:
            return
        self._closed = True
        try:
            self._stop_runs([j.run for j in self.jobs.values()], 30.0)
        finally:
            if self.pool is not None:
                self.pool.close()

    def __del__(self) -> None:  # pragma: no cover - best effort: idle standbys only
        pool = getattr(self, "pool", None)
        if pool is not None and not getattr(self, "_closed", True):
            pool.close()

    # ------------------------------------------------------------------ introspection
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

    # ------------------------------------------------------------------ mechanism
    def _spawn(self, rk: LocalRank, argv: list[str], env: dict[str, str], job_dir: Path,
               log_path: Path) -> LocalRank:
        rk.log = log_path
        warm = self.pool.hand_off(argv, env, log_path) if self.pool is not None else None
        if warm is not None:
            rk.pid, rk.create_time, rk.proc, rk.warm = warm.pid, warm.create_time, warm.proc, True
            return rk
        with open(log_path, "ab") as out:
            rk.proc = subprocess.Popen([*self.trainer_cmd, *argv], env={**os.environ, **env}, cwd=job_dir,
                                       stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        rk.pid = rk.proc.pid
        with suppress(psutil.Error):  # already gone: observe reports it
            rk.create_time = psutil.Process(rk.pid).create_time()
        return rk

    def _poll_ranks(self, ranks: list[LocalRank], now: float) -> None:
        for rk in ranks:
            if rk.exited:
                continue
            if rk.proc is not None:  # our child: its exit code is known
                code = rk.proc.poll()
                if code is not None:
                    rk.ended(now, code)
            elif not _alive(rk.pid, rk.create_time):
                rk.ended(now)

    def _signal(self, ranks: list[LocalRank], sig: int) -> None:
        """Signal each rank's process group (it is a session leader; children go too)."""
        for rk in ranks:
            if rk.exited or (rk.proc is None and not _alive(rk.pid, rk.create_time)):
                continue
            try:
                os.killpg(rk.pid, sig)
            except ProcessLookupError:
                pass
            except PermissionError:  # not a group leader after all: the process alone
                with suppress(ProcessLookupError, PermissionError):
                    os.kill(rk.pid, sig)

    def _wait(self, ranks: list[LocalRank], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = list(ranks)
        while pending and time.monotonic() < deadline:
            self._poll_ranks(pending, time.time())
            pending = [rk for rk in pending if not rk.exited]
            if pending:
                time.sleep(POLL_S)


def _alive(pid: int, create_time: float) -> bool:
    """Whether `pid` is still the process we recorded (and not a zombie)."""
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - create_time) > CREATE_TIME_TOL:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCAL_ADDR, 0))
        return s.getsockname()[1]


def _write_pids(job_dir: Path, run: Run, port: int) -> None:
    data = {
        "job_id": run.launch.job_id, "run": run.run_id, "attempt": run.launch.attempt,
        "started": run.started, "master_port": port,
        "ranks": [{"rank": rk.rank, "role": rk.role, "node": rk.node, "pid": rk.pid,
                   "create_time": rk.create_time, "log": str(rk.log)} for rk in run.ranks],
    }
    tmp = job_dir / f".{PIDS}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, job_dir / PIDS)
