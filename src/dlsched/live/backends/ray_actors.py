"""The Ray actors of the Ray backend: one `RankActor` per rank, one `RayStandbyPool` per node.

A rank's trainer is a subprocess of an actor on the rank's node: its own `RankActor` (a cold
start) or the node's `RayStandbyPool` (a warm one). Either way its parent is a Ray actor, and the
trainer is started with a parent-death signal, so no rank outlives the actor that owns it; the
actors belong to the controller's Ray driver and die with it.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

import ray

from dlsched.live.backends.standby_pool import Warm, give_command, says_ready, start_standby
from dlsched.trainer.protocol import (ENV_LOCAL_RANK, ENV_LOCAL_WORLD_SIZE, ENV_MASTER_ADDR, ENV_MASTER_PORT,
                                      ENV_NODE_ADDR, log_tail)

TRAINER = [sys.executable, "-m", "dlsched.trainer"]


def _die_with_parent() -> None:
    """Runs in the trainer child before exec: if its actor dies, the kernel kills the trainer, so
    no rank outlives the Ray actor that owns it (Linux only; a no-op elsewhere)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


try:  # resolved before any fork: the pre-exec hook must not load libraries
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):
    _PRCTL = None


def _clean_env() -> dict[str, str]:
    """The actor's environment without Ray's own settings (the trainer is no Ray worker)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}


def _killpg(pid: int, sig: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _node_env() -> dict[str, str]:
    """What a rank learns from its actor: the node's address (every socket of the rank listens
    there and nowhere else) and the GPUs Ray gave this actor, not the pool. With at least one
    whole GPU of its own the rank is alone on its devices (LOCAL_RANK 0 of 1: NCCL on cuda:0);
    with a fraction it shares one and the trainer falls back to gloo."""
    env = {ENV_NODE_ADDR: ray.util.get_node_ip_address()}
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    if ray.get_runtime_context().get_assigned_resources().get("GPU", 0.0) >= 1.0:
        env.update({ENV_LOCAL_RANK: "0", ENV_LOCAL_WORLD_SIZE: "1"})
    return env


class RayStandbyPool:
    """The Ray actor keeping warm trainer interpreters (`--standby`) on one node: a `StandbyPool`.

    Why: a resize restarts every rank, and a cold `python -m dlsched.trainer` spends seconds
    importing torch. A standby has done that already and waits for its command line on stdin, so
    a run started from one reaches its first step about that much sooner. Unlike the local pool it
    hands out the oldest standby even when it is still importing (it is ahead of a cold start all
    the same). The pool is the parent of the processes it hands out, so it also answers for their
    exit codes (`poll`, `signal`); it lives as long as the backend (outside any placement group,
    taking no CPU), and its children die with it."""

    def __init__(self, size: int, cmd: list[str] | None):
        self.size = size
        self.cmd = list(cmd) if cmd else TRAINER
        self.dir = tempfile.mkdtemp(prefix="dlsched-standby-")
        self.idle: list[Warm] = []
        self.busy: dict[int, subprocess.Popen] = {}
        self._fill()

    def _fill(self) -> None:
        self.idle = [w for w in self.idle if w.proc.poll() is None]
        while len(self.idle) < self.size:
            log = Path(self.dir) / f"standby-{uuid.uuid4().hex[:8]}.log"
            self.idle.append(start_standby(self.cmd, log, _clean_env(), self.dir, _die_with_parent))

    def hand_off(self, argv: list[str], env: dict[str, str], log_path: Path) -> Warm | None:
        """Hand the oldest standby the rank's command line; start a replacement."""
        self._fill()
        if not self.idle:
            return None
        w = self.idle.pop(0)
        w.ready = says_ready(w.log)
        try:
            give_command(w, argv, env, log_path)
        except OSError:
            w.proc.kill()
            w.proc.wait()
            return None
        self.busy[w.pid] = w.proc
        self._fill()
        return replace(w, proc=None)

    def ready_count(self) -> int:
        return sum(1 for w in self.idle if w.proc.poll() is None and says_ready(w.log))

    def poll(self, pid: int) -> int | None:
        """The exit code of a handed-out process (None while it runs, -1 if it is not ours)."""
        proc = self.busy.get(pid)
        return proc.poll() if proc is not None else -1

    def signal(self, pid: int, sig: int) -> None:
        proc = self.busy.get(pid)
        if proc is not None and proc.poll() is None:
            _killpg(pid, sig)

    def close(self) -> None:
        for w in self.idle:
            w.proc.kill()
            w.proc.wait()
        self.idle = []
        shutil.rmtree(self.dir, ignore_errors=True)


class RankActor:
    """The Ray actor of one rank: starts one trainer process on its node and reports on it.

    The trainer is either this actor's own child or a warm standby of the node's `RayStandbyPool`
    (then the pool answers for its exit code). Methods run on the actor's main thread (a plain,
    non-threaded actor), which keeps the child's parent-death signal tied to this process."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.pool: Any = None
        self.pid: int | None = None
        self.warm = False
        self.error: str | None = None
        self.log_path: str | None = None

    def where(self) -> dict:
        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(),
                "host": socket.gethostname(), "actor_pid": os.getpid()}

    def master(self) -> tuple[str, int]:
        """This node's address and a port free on it now, for rank 0's rendezvous."""
        ip = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((ip, 0))
            return ip, s.getsockname()[1]

    def launch(self, cmd: list[str] | None, argv: list[str], env: dict[str, str], cwd: str, log_path: str,
               master: tuple[str, int], pool: Any = None) -> int | None:
        try:
            env = dict(env)
            env[ENV_MASTER_ADDR], env[ENV_MASTER_PORT] = master[0], str(master[1])
            for key, value in _node_env().items():  # the backend's own settings win
                env.setdefault(key, value)
            Path(log_path).parent.mkdir(parents=True, exist_ok=True)
            got = ray.get(pool.hand_off.remote(argv, env, Path(log_path))) if pool is not None else None
            if got is not None:
                self.pool, self.pid, self.warm, self.log_path = pool, got.pid, got.ready, str(got.log)
                return self.pid
            self.log_path = log_path
            with open(log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [*(cmd or TRAINER), *argv], env={**_clean_env(), **env}, cwd=cwd, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
            self.pid = self.proc.pid
            return self.pid
        except Exception as e:  # reported through poll(): the backend turns it into a failed run
            self.error = f"{type(e).__name__}: {e}"
            return None

    def _code(self) -> int | None:
        if self.pool is not None:
            return ray.get(self.pool.poll.remote(self.pid))
        return self.proc.poll() if self.proc is not None else None

    def poll(self) -> dict:
        code = self._code()
        out: dict[str, Any] = {"pid": self.pid, "code": code, "error": self.error, "warm": self.warm}
        if (code not in (None, 0)) or self.error:
            out["tail"] = log_tail(self.log_path, 2000)
        return out

    def signal(self, sig: int) -> None:
        """Signal the trainer's whole process group (it may have children of its own)."""
        if self.pool is not None:
            ray.get(self.pool.signal.remote(self.pid, sig))
        elif self.proc is not None and self.proc.poll() is None:
            _killpg(self.proc.pid, sig)

    def wait(self, timeout: float) -> int | None:
        if self.pool is None:
            if self.proc is None:
                return None
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
        deadline = time.monotonic() + timeout
        while True:
            code = self._code()
            if code is not None or time.monotonic() >= deadline:
                return code
            time.sleep(0.05)


RankActorRemote = ray.remote(max_restarts=0, max_concurrency=1)(RankActor)
RayStandbyPoolRemote = ray.remote(max_restarts=0, max_concurrency=1)(RayStandbyPool)
