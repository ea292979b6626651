"""One service per store and per work dir: exclusive leases a service takes before it adopts anything.

Two services on one store would both adopt its jobs and run each of them twice (two trainers
writing one job folder). So `dlsched serve` takes two locks before its controller reads a job, and
a second service refuses to start, naming the owner:

- **the work dir**: a file lock (`filelock`, flock on Unix) on `.dlsched-service.lock`, with the
  owner written beside it in `.dlsched-service.owner.json`. The kernel drops the lock when the
  process dies, even by SIGKILL, so it never outlives its service.
- **the store**: one row in the database's `dlsched_lease` table (owner id, host, pid, port,
  since, heartbeat, ttl), renewed every ttl/3 seconds by the running service. A row rather than
  PostgreSQL's advisory locks because it works the same on SQLite and PostgreSQL, needs no
  connection held open for the service's lifetime (the pool may recycle it), and says who holds
  it. A row whose holder is gone is taken over, with a log line: at once when the holder ran on
  this host and its process (pid + start time) no longer exists, else when its heartbeat is
  older than its ttl (so hosts' clocks must agree to well within the ttl).

The store and the work dir are locked separately because either can be shared alone: services on
two machines pointing at one PostgreSQL database, or two stores given one work dir.

A service that cannot renew its lease for a whole ttl (frozen, or its database unreachable) must
assume another service took over: `StoreLease.valid()` turns false from that moment, and
`StopWhenLost` makes the controller's loop stop before its next round.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from dlsched.core.errors import DlschedError

log = logging.getLogger("dlsched.lease")

#: Seconds without a heartbeat after which another host may take a store over.
DEFAULT_TTL = 30.0
LOCK_FILE = ".dlsched-service.lock"
OWNER_FILE = ".dlsched-service.owner.json"


class OwnedElsewhere(DlschedError):
    """Another service owns the store or the work dir (one line, names it)."""


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _process_start(pid: int) -> float | None:
    """When process `pid` started (unix time), or None when there is no such process."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return None
    except psutil.Error:  # exists but cannot be inspected (another user's): assume it is the one
        return -1.0


def _pid_namespace() -> str:
    """This process's PID namespace ("" where there is none to read): two containers may share a
    host name (docker --network host) while their pids mean different processes."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


@dataclass(frozen=True)
class Owner:
    """Who holds a lease: enough to name it to a person and to tell whether it is still alive."""

    owner_id: str
    host: str
    pid: int
    proc_started: float
    port: int | None
    since: float
    pid_ns: str = ""

    @classmethod
    def me(cls, port: int | None, clock: Callable[[], float] = time.time) -> "Owner":
        return cls(owner_id=uuid.uuid4().hex, host=socket.gethostname(), pid=os.getpid(),
                   proc_started=_process_start(os.getpid()) or 0.0, port=port, since=clock(),
                   pid_ns=_pid_namespace())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Owner":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def describe(self) -> str:
        port = f", port {self.port}" if self.port is not None else ""
        return f"pid {self.pid} on host {self.host}{port}, since {_when(self.since)}"

    def gone(self) -> bool:
        """Known dead: it ran on this host, in our PID namespace, and no process with its pid and
        start time exists. (Elsewhere nothing can be known: only its heartbeat tells.)"""
        if self.host != socket.gethostname() or self.pid_ns != _pid_namespace():
            return False
        started = _process_start(self.pid)
        return started is None or (started >= 0 and abs(started - self.proc_started) > 1.0)


# --------------------------------------------------------------------------- the work dir


class WorkDirLock:
    """An exclusive file lock on a service's work dir, and a note of who holds it."""

    def __init__(self, work_dir: Path, owner: Owner):
        from filelock import FileLock

        self.work_dir = Path(work_dir)
        self.owner = owner
        self._lock = FileLock(str(self.work_dir / LOCK_FILE), timeout=0, thread_local=False)

    def acquire(self) -> None:
        from filelock import Timeout

        try:
            self._lock.acquire()
        except Timeout:
            raise OwnedElsewhere(f"the work dir {self.work_dir} is in use by another dlsched service "
                                 f"({self._holder()}): stop it first, or give this one another --work-dir") from None
        except OSError as exc:
            raise OwnedElsewhere(f"cannot lock the work dir {self.work_dir}: {exc}") from None
        note = self.work_dir / OWNER_FILE
        tmp = note.with_name(f"{note.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(self.owner)))
        os.replace(tmp, note)

    def _holder(self) -> str:
        try:
            return Owner.from_dict(json.loads((self.work_dir / OWNER_FILE).read_text())).describe()
        except (OSError, ValueError, KeyError, TypeError):
            return "owner not recorded"

    def release(self) -> None:
        if not self._lock.is_locked:
            return
        try:
            note = self.work_dir / OWNER_FILE
            if json.loads(note.read_text()).get("owner_id") == self.owner.owner_id:
                note.unlink()
        except (OSError, ValueError, AttributeError):
            pass
        self._lock.release()


# --------------------------------------------------------------------------- the store


class StoreLease:
    """The store's lease row: taken (or taken over when stale), heartbeated, released."""

    def __init__(self, store, owner: Owner, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.time):
        if ttl <= 0:
            raise ValueError("the lease ttl must be positive")
        self.store, self.owner, self.ttl, self.clock = store, owner, float(ttl), clock
        self.renewed_at: float | None = None  # our clock when the row last said it was ours
        self.lost = ""  # why we no longer hold it
        self.taken_from: str = ""  # whom we took the store over from, and why
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _row(self, now: float) -> dict[str, Any]:
        return {**asdict(self.owner), "heartbeat_at": now, "ttl": self.ttl}

    def _staleness(self, holder: dict[str, Any], now: float) -> str:
        """Why `holder`'s lease may be taken over ("" while it is live)."""
        owner = Owner.from_dict(holder)
        if owner.gone():
            return f"its process {owner.pid} on this host is gone"
        silent = now - float(holder["heartbeat_at"])
        if silent > float(holder["ttl"]):
            return f"no heartbeat for {silent:.0f} s (its ttl is {float(holder['ttl']):.0f} s)"
        return ""

    def acquire(self) -> None:
        """Take the lease, or take over a stale one; OwnedElsewhere while another service holds it."""
        for _ in range(5):  # only a race with another starting service loops
            now = self.clock()
            holder = self.store.lease_holder()
            if holder is None:
                won = self.store.lease_swap(None, self._row(now))
            elif holder["owner_id"] == self.owner.owner_id:
                won = True
            else:
                why = self._staleness(holder, now)
                if not why:
                    age = max(0.0, now - float(holder["heartbeat_at"]))
                    raise OwnedElsewhere(
                        f"the store {self.store.shown_url} is owned by another dlsched service "
                        f"({Owner.from_dict(holder).describe()}, last heartbeat {age:.0f} s ago): stop it first, "
                        "or give this one its own --db-url")
                won = self.store.lease_swap(holder["owner_id"], self._row(now))
                if won:
                    self.taken_from = f"{Owner.from_dict(holder).describe()}: {why}"
                    log.warning("took the store over from a stale lease (%s)", self.taken_from)
            if won:
                self.renewed_at = now
                return
        raise OwnedElsewhere(f"the store {self.store.shown_url} is being claimed by another starting service")

    def renew(self) -> bool:
        """One heartbeat; False (and `lost` says why) once the lease is no longer ours."""
        if self.lost:
            return False
        now = self.clock()
        try:
            ours = self.store.lease_renew(self.owner.owner_id, now)
        except Exception as exc:  # the database may be back by the next beat
            log.warning("could not renew the store lease: %s", " ".join(str(exc).split())[:300])
            if not self.valid():
                self._lose(f"no heartbeat could be written for {self.ttl:.0f} s")
            return not self.lost
        if not ours:
            holder = self.store.lease_holder()
            who = Owner.from_dict(holder).describe() if holder else "nobody"
            self._lose(f"the store's lease now belongs to {who}")
            return False
        self.renewed_at = now
        return True

    def _lose(self, why: str) -> None:
        self.lost = why
        log.error("lost the lease on the store: %s; this service stops scheduling", why)

    def valid(self) -> bool:
        """Still ours for sure: renewed within the last ttl and not lost."""
        return not self.lost and self.renewed_at is not None and self.clock() - self.renewed_at < self.ttl

    def start_heartbeat(self, on_lost: Callable[[str], None] = lambda why: None) -> None:
        """Renew every ttl/3 seconds in a daemon thread; call `on_lost` once if the lease goes."""

        def beat() -> None:
            while not self._stop.wait(self.ttl / 3):
                if not self.renew():
                    on_lost(self.lost)
                    return

        self._thread = threading.Thread(target=beat, name="dlsched-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop the heartbeat and delete the row if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.renewed_at is None or self.lost:
            return
        try:
            self.store.lease_release(self.owner.owner_id)
        except Exception as exc:  # it expires by itself after its ttl
            log.warning("could not release the store lease: %s", " ".join(str(exc).split())[:300])
        self.renewed_at = None


class StopWhenLost(threading.Event):
    """The controller's stop event, also set from the moment the lease may have passed to another
    service: a service that was frozen longer than the ttl must not run one more round."""

    def __init__(self, lease: StoreLease, also_lost: Callable[[], str] | None = None):
        super().__init__()
        self.lease = lease
        self.also_lost = also_lost  # another ownership that may be lost: the backend's (a Kubernetes Lease)

    def is_set(self) -> bool:
        return super().is_set() or not self.lease.valid() or bool(self.also_lost and self.also_lost())
