"""One service per store and per work dir: a second one refuses naming the owner, a taken port
fails before any job is touched, a lease left by a killed service is taken over."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys

import pytest
import yaml

from dlsched.live.store.lease import Owner, OwnedElsewhere, StopWhenLost, StoreLease, WorkDirLock
from dlsched.live.store import Store
from tests.databases import KINDS, db_url, make_db_url  # noqa: F401 - db_url is a fixture
from tests.live_service import Service


class FakeClock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _owner(**kw) -> Owner:
    base = Owner.me(port=8765)
    return Owner(**{**base.__dict__, "owner_id": f"other-{id(kw)}", **kw})


# --------------------------------------------------------------------------- the store lease


def test_a_second_lease_on_one_store_is_refused_naming_the_owner(db_url):
    a, b = Store(db_url), Store(db_url)
    first = StoreLease(a, Owner.me(port=9001))
    first.acquire()
    second = StoreLease(b, Owner.me(port=9002))
    with pytest.raises(OwnedElsewhere) as err:
        second.acquire()
    msg = str(err.value)
    assert "is owned by another dlsched service" in msg and "\n" not in msg
    assert f"pid {first.owner.pid} on host {socket.gethostname()}, port 9001, since " in msg
    assert "last heartbeat 0 s ago" in msg
    first.release()
    second.acquire()  # free once released
    assert b.lease_holder()["port"] == 9002
    second.release()
    assert a.lease_holder() is None
    a.close()
    b.close()


def test_a_lease_silent_for_its_ttl_is_taken_over_from_another_host(db_url, caplog):
    store, clock = Store(db_url), FakeClock()
    other = _owner(host="elsewhere.example", pid=4242)
    assert store.lease_swap(None, {**other.__dict__, "heartbeat_at": clock.t, "ttl": 30.0})
    mine = StoreLease(store, Owner.me(port=1), ttl=30.0, clock=clock)
    clock.t += 29  # still within its ttl: another host's process cannot be checked, only its heartbeat
    with pytest.raises(OwnedElsewhere, match="pid 4242 on host elsewhere.example.*last heartbeat 29 s ago"):
        mine.acquire()
    clock.t += 2
    with caplog.at_level(logging.WARNING, logger="dlsched.lease"):
        mine.acquire()
    assert store.lease_holder()["owner_id"] == mine.owner.owner_id
    assert "no heartbeat for 31 s" in mine.taken_from and "elsewhere.example" in mine.taken_from
    assert any("took the store over from a stale lease" in r.getMessage() for r in caplog.records)
    store.close()


def test_a_dead_process_on_this_host_is_taken_over_at_once(db_url):
    store, clock = Store(db_url), FakeClock()
    dead = _owner(pid=_dead_pid())
    assert store.lease_swap(None, {**dead.__dict__, "heartbeat_at": clock.t, "ttl": 3600.0})
    mine = StoreLease(store, Owner.me(port=1), clock=clock)
    mine.acquire()  # a fresh heartbeat, but its process is gone: no need to wait an hour
    assert f"its process {dead.pid} on this host is gone" in mine.taken_from
    # a live process on this host (this one) with a fresh heartbeat is not taken over
    other = StoreLease(Store(db_url), _owner(), clock=clock)
    with pytest.raises(OwnedElsewhere):
        other.acquire()
    other.store.close()
    # the same host name in another PID namespace (a container): its pid means nothing here
    mine.release()
    assert store.lease_swap(None, {**_owner(pid=dead.pid, pid_ns="pid:[1]").__dict__, "heartbeat_at": clock.t,
                                   "ttl": 3600.0})
    with pytest.raises(OwnedElsewhere):
        StoreLease(store, Owner.me(port=1), clock=clock).acquire()
    store.close()


def test_an_owner_that_lost_its_lease_stops_and_leaves_the_new_one_alone(db_url):
    clock = FakeClock()
    old = StoreLease(Store(db_url), Owner.me(port=1), ttl=10.0, clock=clock)
    old.acquire()
    stop = StopWhenLost(old)
    assert old.valid() and not stop.is_set()
    clock.t += 11  # frozen past its ttl: it can no longer be sure the store is its own
    assert not old.valid() and stop.is_set()
    new = StoreLease(Store(db_url), _owner(host="elsewhere.example"), ttl=10.0, clock=clock)
    new.acquire()
    assert not old.renew() and "now belongs to pid" in old.lost and "elsewhere.example" in old.lost
    old.release()  # must not delete the new owner's row
    assert new.store.lease_holder()["owner_id"] == new.owner.owner_id
    assert new.renew() and new.valid()
    new.release()
    old.store.close()
    new.store.close()


# --------------------------------------------------------------------------- the work dir


def test_a_work_dir_is_locked_by_one_service_at_a_time(tmp_path):
    first = WorkDirLock(tmp_path, Owner.me(port=9001))
    first.acquire()
    with pytest.raises(OwnedElsewhere, match=rf"the work dir {tmp_path} is in use by another dlsched service "
                                             rf"\(pid \d+ on host .*, port 9001, since .*\): stop it first"):
        WorkDirLock(tmp_path, Owner.me(port=9002)).acquire()
    first.release()
    again = WorkDirLock(tmp_path, Owner.me(port=9003))
    again.acquire()
    again.release()


# --------------------------------------------------------------------------- real services

DRY_JOB = {"model": "mlp", "steps": 100_000}  # the dry backend makes 10 steps/s: runs for the whole test


@pytest.fixture(params=KINDS)
def services(request, tmp_path):
    """Make dry-backend `dlsched serve` processes on one database of each kind; all stopped after."""
    made: list[Service] = []
    urls = make_db_url(request.param, tmp_path)
    url = next(urls)

    def make(name: str, **extra) -> Service:
        svc = Service(tmp_path / name, "fifo", None, backend="dry", db_url=url, **extra)
        made.append(svc)
        return svc

    yield make
    for svc in made:
        svc.stop()
    urls.close()


def _steadily_running(svc: Service, job: str) -> list[str]:
    """Wait until `job` trains (its first step recorded); its event kinds from then on."""
    svc.wait(lambda js: js[0]["status"] == "running" and "first-step" in [e["kind"] for e in svc.events(job)],
             30, "the job to train")
    return [e["kind"] for e in svc.events(job)]


def _one_line_refusal(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, result.stderr
    return " ".join(result.stderr.split())


def test_a_second_service_on_the_same_store_refuses_and_touches_nothing(services):
    first = services("a").start()
    job = first.submit(**DRY_JOB)["id"]
    before = _steadily_running(first, job)

    other_dir = services("b").run_to_exit()  # its own work dir and port, the same database
    msg = _one_line_refusal(other_dir)
    assert "is owned by another dlsched service" in msg
    assert f"pid {first.proc.pid} on host {socket.gethostname()}, port {first.port}, since" in msg

    same_dir = services("c", work_dir=str(first.work_dir)).run_to_exit()
    msg = _one_line_refusal(same_dir)
    assert f"the work dir {first.work_dir} is in use by another dlsched service" in msg
    assert f"pid {first.proc.pid}" in msg and f"port {first.port}" in msg

    assert [e["kind"] for e in first.events(job)] == before  # nobody adopted, recovered or stopped it
    assert first.jobs()[0]["status"] == "running" and first.proc.poll() is None


def test_a_second_service_on_a_taken_port_fails_before_touching_a_job(services):
    first = services("a").start()
    job = first.submit(**DRY_JOB)["id"]
    before = _steadily_running(first, job)

    # same port, same work dir and store: the port is what must stop it, before anything else
    again = services("b", port=first.port, work_dir=str(first.work_dir)).run_to_exit()
    msg = _one_line_refusal(again)
    assert f"cannot listen on 127.0.0.1:{first.port}" in msg and "already in use" in msg

    assert [e["kind"] for e in first.events(job)] == before
    assert first.jobs()[0]["status"] == "running" and first.proc.poll() is None


def test_the_lease_of_a_killed_service_is_taken_over_and_its_jobs_finish_once(services):
    svc = services("a")
    svc.start()
    jobs = [svc.submit(model="mlp", steps=20)["id"], svc.submit(**DRY_JOB)["id"]]
    svc.wait(lambda js: js[1]["status"] == "running", 30, "the jobs to start")
    svc.kill()  # SIGKILL: its lease row stays behind, its heartbeat stops
    svc.start()  # at once: its process is gone, no need to wait for the ttl
    assert "took the store over from a stale lease" in svc.log() and "is gone" in svc.log()
    done = svc.wait(lambda js: js[0]["status"] == "done", 60, "the short job to finish")
    assert done[0]["steps_done"] == 20
    assert [e["kind"] for e in svc.events(jobs[0])].count("done") == 1
    assert done[1]["status"] == "running"


def test_a_service_that_loses_its_lease_stops_and_leaves_the_jobs_to_the_new_owner(services):
    svc = services("a", lease_seconds=3)  # renewed every second
    svc.start()
    job = svc.submit(**DRY_JOB)["id"]
    before = _steadily_running(svc, job)
    store = Store(yaml.safe_load(svc.config.read_text())["db_url"])
    holder = store.lease_holder()
    thief = {**holder, "owner_id": "thief", "host": "elsewhere.example", "pid": 4242}
    assert store.lease_swap(holder["owner_id"], thief)  # what a takeover by another host looks like
    assert svc.proc.wait(30) == 2
    log = svc.log()
    assert "lost the lease on the store" in log and "pid 4242 on host elsewhere.example" in log
    assert "Traceback" not in log
    view = store.get(job)
    assert view.status == "running" and not view.cancel_requested  # not suspended: not its job any more
    assert [e.kind for e in store.events(job)] == before
    assert store.lease_holder()["owner_id"] == "thief"  # and the new owner's row is left alone
    store.close()
