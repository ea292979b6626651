"""Pools of warm trainer interpreters, so a resize does not pay the torch import.

Starting `python -m dlsched.trainer` costs ~3 s of imports before the first step, more than the
whole resize-pause budget (2 s from SIGTERM to the first step at the new size). The trainer's
`--standby` mode imports everything, prints `ready` and then waits for one JSON line
`{"argv": [...], "env": {...}}` on stdin; handing that line to an already-warm process turns a
cold start into a fork-free hand-off.

`StandbyPool` is the contract both backends use: `hand_off` a rank's command line to a standby (or
None: cold-start it), `ready_count`, `close`. Two implementations: `LocalStandbyPool` here (a
thread in the backend's process, for the local backend) and `RayStandbyPool` in `ray_actors`
(a Ray actor per node, which stays the parent of what it hands out).

Each standby process writes its stdout/stderr straight into a file (never a pipe): a trainer must
outlive the controller, and a pipe whose reader died turns the trainer's next print into an error.
Readiness is seen by reading that file. On hand-off the file is renamed to the rank's log path in
the job directory (the open descriptor follows the inode), or symlinked when the two paths are on
different filesystems. Only stdin is a pipe, closed right after the hand-off line; an idle
standby whose controller died reads end-of-file and exits.

Warming costs ~3 s of CPU per interpreter, and on a small machine the refill after a hand-off
competes with the very run it just started (measured on 2 cores: a 4-worker warm start took 12 s
to its first step with four refills importing torch beside it, ~2 s without). So the local pool
waits `refill_delay` seconds after a hand-off, warms at most `max_warming` interpreters at a time,
and, when it is allowed to undo it (root), runs them at a lower CPU priority (`warm_nice`) that is
reset to normal, on every thread, at hand-off; otherwise at normal priority.

If the trainer does not support `--standby` (it exits before printing `ready`), the local pool
turns itself off and the backend cold-starts every rank.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import psutil

from dlsched.trainer.protocol import log_tail

log = logging.getLogger(__name__)

#: Consecutive standby processes that die before `ready` after which the pool gives up.
MAX_FAILURES = 2
POLL_S = 0.05
REFILL_DELAY_S = 3.0
WARM_NICE = 10


@dataclass
class Warm:
    """One standby interpreter. `proc` is its handle in the process that started it: the caller's
    after a hand-off by a pool in the caller's process; None when the pool is a Ray actor, which
    stays its parent and answers for it."""

    pid: int
    log: Path
    create_time: float
    proc: subprocess.Popen | None = None
    ready: bool = False  # it had printed `ready` (finished importing)
    nice: int = 0


class StandbyPool(Protocol):
    """What a backend asks of a pool of warm `--standby` trainer interpreters."""

    size: int

    def hand_off(self, argv: list[str], env: dict[str, str], log_path: Path) -> Warm | None:
        """Give one rank's command line to an idle standby, which becomes that rank (its output
        moves to `log_path`); None when there is none to give: cold-start the rank instead."""

    def ready_count(self) -> int:
        """Idle standbys that have finished importing."""

    def close(self) -> None:
        """Kill the idle standbys (handed-off ones are ranks now) and stop refilling."""


def start_standby(cmd: list[str], log_path: Path, env: dict[str, str] | None = None, cwd: str | None = None,
                  preexec_fn: Callable[[], None] | None = None) -> Warm:
    """Start `cmd --standby` in its own session, its output going to `log_path`, stdin a pipe."""
    with open(log_path, "ab") as out:
        proc = subprocess.Popen([*cmd, "--standby"], stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=cwd, start_new_session=True, preexec_fn=preexec_fn)
    try:
        ct = psutil.Process(proc.pid).create_time()
    except psutil.Error:
        ct = 0.0
    return Warm(proc.pid, Path(log_path), ct, proc)


def give_command(w: Warm, argv: list[str], env: dict[str, str], log_path: Path) -> None:
    """Hand `w` its rank: move its log to `log_path`, restore its priority, send the argv/env line.
    Raises OSError when the standby died meanwhile."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(w.log, log_path)
        w.log = log_path
    except OSError:  # another filesystem: leave the file, point at it
        with suppress(OSError):
            if log_path.is_symlink() or log_path.exists():
                log_path.unlink()
            log_path.symlink_to(w.log)
    if w.nice:
        _renice(w.pid, 0)
    assert w.proc is not None and w.proc.stdin is not None
    w.proc.stdin.write((json.dumps({"argv": argv, "env": env}) + "\n").encode())
    w.proc.stdin.flush()
    w.proc.stdin.close()


class LocalStandbyPool:
    """Keeps `size` interpreters of `cmd --standby` warm on this machine, refilling in a background
    thread; a handed-off interpreter (and its `Popen`) belongs to the caller from then on."""

    def __init__(self, cmd: list[str], size: int, log_dir: Path, env: dict[str, str] | None = None,
                 refill_delay: float = REFILL_DELAY_S, max_warming: int | None = None,
                 warm_nice: int | None = None):
        self.cmd = list(cmd)
        self.refill_delay = refill_delay
        self.max_warming = max_warming or max(1, (os.cpu_count() or 2) // 2)
        # lowering a priority back needs privileges: only nice what we can un-nice
        self.warm_nice = (WARM_NICE if warm_nice is None else warm_nice) if _can_unnice() else 0
        self._hold_until = 0.0
        self.size = max(0, int(size))
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = env
        #: None until the first standby is ready (True) or the pool gave up (False).
        self.supported: bool | None = None
        self.last_error = ""
        self._pool: list[Warm] = []
        self._failures = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dlsched-standby", daemon=True)
        if self.size:
            self._thread.start()

    # ------------------------------------------------------------------ public
    def hand_off(self, argv: list[str], env: dict[str, str], log_path: Path) -> Warm | None:
        """A ready interpreter, now running the rank, or None (then cold-start)."""
        with self._lock:
            w = next((w for w in self._pool if w.ready and w.proc.poll() is None), None)
            if w is None:
                return None
            self._pool.remove(w)
            self._hold_until = time.monotonic() + self.refill_delay
        try:
            give_command(w, argv, env, log_path)
            return w
        except OSError as e:  # it died between take and hand-off: cold start instead
            log.info("standby %d unusable (%s); cold start", w.pid, e)
            _kill(w.proc)
            w.proc.wait()
            return None

    def ready_count(self) -> int:
        with self._lock:
            return sum(1 for w in self._pool if w.ready and w.proc.poll() is None)

    def wait_ready(self, n: int, timeout: float) -> bool:
        """Wait until `n` interpreters are ready (benchmarks and tests); False on timeout or
        when the trainer has no standby mode."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready_count() >= min(n, self.size):
                return True
            if self.supported is False:
                return False
            time.sleep(POLL_S)
        return False

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with self._lock:
            pool, self._pool = self._pool, []
        for w in pool:
            _kill(w.proc)
        for w in pool:
            with suppress(subprocess.TimeoutExpired):
                w.proc.wait(timeout=5)
            if w.proc.stdin:
                w.proc.stdin.close()
            with suppress(OSError):
                w.log.unlink()

    # ------------------------------------------------------------------ background
    def _loop(self) -> None:
        while not self._closed.is_set():
            try:
                self._tick()
            except Exception as e:  # never let the refill thread die silently
                log.warning("standby pool: %s", e)
            self._wake.wait(POLL_S)
            self._wake.clear()

    def _tick(self) -> None:
        with self._lock:
            for w in list(self._pool):
                code = w.proc.poll()
                if code is not None:
                    self._pool.remove(w)
                    if not w.ready:
                        self._failures += 1
                        self.last_error = f"standby exited with {code}: {log_tail(w.log, 500)}"
                        if self._failures >= MAX_FAILURES and self.supported is not True:
                            self.supported = False
                            log.info("trainer has no usable --standby mode; cold starts only (%s)",
                                     self.last_error)
                    with suppress(OSError):
                        w.log.unlink()
                elif not w.ready and says_ready(w.log):
                    w.ready = True
                    self.supported = True
                    self._failures = 0
            if self.supported is False or self._closed.is_set() or time.monotonic() < self._hold_until:
                return
            warming = sum(1 for w in self._pool if not w.ready)
            missing = min(self.size - len(self._pool), self.max_warming - warming)
            if self.supported is None:  # first probe: one at a time until it says ready
                missing = min(missing, 1 - warming)
        for _ in range(missing):
            w = self._spawn()
            with self._lock:
                if self._closed.is_set():
                    _kill(w.proc)
                    return
                self._pool.append(w)

    def _spawn(self) -> Warm:
        w = start_standby(self.cmd, self.log_dir / f"standby-{uuid.uuid4().hex[:12]}.log", self.env)
        if self.warm_nice:
            _renice(w.pid, self.warm_nice)
            w.nice = self.warm_nice
        return w


def says_ready(path: str | Path) -> bool:
    """Whether a standby interpreter has printed its `ready` line (the --standby protocol)."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    return any(line.strip() == b"ready" for line in head.splitlines())


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def _can_unnice() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _renice(pid: int, nice: int) -> None:
    """Set the priority of every thread of `pid` (Linux applies it per thread)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        with suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid, nice)
