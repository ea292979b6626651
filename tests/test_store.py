"""The job store: what the API and the controller share must survive restarts and concurrent use."""

from __future__ import annotations

import os
import threading

import pytest
from sqlalchemy import create_engine, text

from dlsched.core.errors import ConfigError
from dlsched.live.spec import TrainJob
from dlsched.live.store import Store, parse_job_id


def _job(**kw) -> TrainJob:
    return TrainJob(**{"model": "mlp", "steps": 10, **kw})


#: A PostgreSQL database the store tests may empty, e.g. postgresql+psycopg://user@127.0.0.1:5432/test
#: (needs `pip install 'dlsched[postgres]'`). Without it the tests run on SQLite only.
PG_URL = os.environ.get("DLSCHED_TEST_PG_URL")


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'db' / 'dlsched.db'}"  # parent folder created on demand
    if not PG_URL:
        pytest.skip("set DLSCHED_TEST_PG_URL to run the store tests on PostgreSQL too")
    engine = create_engine(PG_URL)
    with engine.begin() as conn:  # every test starts from an empty database
        conn.execute(text("DROP TABLE IF EXISTS dlsched_events, dlsched_meta, dlsched_jobs CASCADE"))
    engine.dispose()
    return PG_URL


@pytest.fixture
def store(db_url):
    s = Store(db_url)
    yield s
    s.close()


def test_add_get_list_and_filter(store):
    a = store.add(_job(name="a"), now=100.0)
    b = store.add(_job(model="cnn", steps=5), now=101.0)
    assert (a.id, b.id) == ("job-000001", "job-000002")
    assert a.status == "queued" and a.submitted_at == 100.0 and a.name == "a"
    got = store.get(a.id)
    assert got == a and got.spec == _job(name="a")
    assert store.get("job-999999") is None and store.get("job-1") is None and store.get("nonsense") is None
    store.update(b.id, status="running", workers=2, nodes=["n0", "n1"], started_at=102.0)
    assert [j.id for j in store.list()] == [a.id, b.id]  # oldest first
    assert [j.id for j in store.list(["running"])] == [b.id]
    assert [j.id for j in store.list(["queued", "done"])] == [a.id]
    with pytest.raises(ValueError, match="unknown job status 'runing'"):
        store.list(["runing"])


def test_update_writes_only_known_fields(store):
    job = store.add(_job())
    view = store.update(job.id, status="done", steps_done=10, loss=0.25, steps_per_s=3.5, finished_at=9.0,
                        reason="all steps trained", job_dir="/tmp/x", attempt=2, restarts=1)
    assert (view.status, view.steps_done, view.loss, view.restarts, view.job_dir) == ("done", 10, 0.25, 1, "/tmp/x")
    for bad in ({"spec": _job()}, {"id": "job-000009"}, {"submitted_at": 1.0}, {"colour": "red"}):
        with pytest.raises(ValueError, match="cannot update"):
            store.update(job.id, **bad)
    with pytest.raises(ValueError, match="unknown job status"):
        store.update(job.id, status="finished")
    with pytest.raises(KeyError):
        store.update("job-000042", status="done")
    assert store.get(job.id).status == "done"


def test_update_many_writes_all_or_nothing(store):
    a, b = store.add(_job()), store.add(_job())
    store.update_many({a.id: {"steps_done": 4, "loss": 0.5}, b.id: {"steps_done": 7, "nodes": ["n0"]}})
    assert (store.get(a.id).steps_done, store.get(a.id).loss) == (4, 0.5)
    assert (store.get(b.id).steps_done, store.get(b.id).nodes) == (7, ["n0"])
    with pytest.raises(ValueError, match="cannot update job field"):
        store.update_many({a.id: {"steps_done": 9}, b.id: {"spec": {}}})
    with pytest.raises(KeyError):
        store.update_many({a.id: {"steps_done": 9}, "nonsense": {"steps_done": 1}})
    assert store.get(a.id).steps_done == 4  # a bad entry anywhere writes nothing
    store.update_many({})


def test_cancel_request_is_idempotent_and_recorded(store):
    job = store.add(_job())
    assert store.request_cancel(job.id).cancel_requested
    assert store.request_cancel(job.id).cancel_requested
    assert store.request_cancel("job-000077") is None
    kinds = [e.kind for e in store.events(job.id)]
    assert kinds == ["submitted", "cancel-requested"]  # the second request adds nothing
    # the controller publishing progress afterwards must not undo the request
    store.update(job.id, steps_done=3, status="running")
    assert store.get(job.id).cancel_requested


def test_events_order_limit_and_filter(store):
    a, b = store.add(_job(), now=1.0), store.add(_job(), now=2.0)
    for i in range(5):
        store.add_event(a.id, "progress", f"step {i}", {"step": i}, now=10.0 + i)
    store.add_event(b.id, "started", "1w")
    evs = store.events(a.id)
    assert [e.kind for e in evs] == ["submitted"] + ["progress"] * 5
    assert evs[-1].data == {"step": 4} and evs[-1].message == "step 4" and evs[-1].time == 14.0
    assert [e.message for e in store.events(a.id, limit=2)] == ["step 3", "step 4"]  # newest, oldest first
    assert {e.job_id for e in store.events()} == {a.id, b.id}
    assert store.events("job-000404") == []
    with pytest.raises(KeyError):
        store.add_event("job-000404", "x")


def test_meta_and_counts(store):
    assert store.get_meta("epoch") is None
    store.set_meta("epoch", "12.5")
    store.set_meta("epoch", "13.5")
    assert store.get_meta("epoch") == "13.5"
    store.add(_job())
    store.update(store.add(_job()).id, status="failed")
    counts = store.counts()
    assert counts["queued"] == 1 and counts["failed"] == 1 and counts["done"] == 0 and len(counts) == 6


def test_everything_survives_reopening_the_file_and_ids_are_never_reused(db_url):
    url = db_url
    s = Store(url)
    a = s.add(_job(name="keep"), now=5.0)
    b = s.add(_job(), now=6.0)
    s.update(a.id, status="running", nodes=["n3"], steps_done=7)
    s.add_event(a.id, "started", "2w", {"workers": 2})
    s.set_meta("epoch", "42.0")
    with s.engine.begin() as conn:  # someone deletes the newest job by hand
        conn.execute(text("DELETE FROM dlsched_events WHERE job_seq = :n"), {"n": parse_job_id(b.id)})
        conn.execute(text("DELETE FROM dlsched_jobs WHERE seq = :n"), {"n": parse_job_id(b.id)})
    s.close()

    s2 = Store(url)
    again = s2.get(a.id)
    assert again.name == "keep" and again.status == "running" and again.nodes == ["n3"] and again.steps_done == 7
    assert [e.kind for e in s2.events(a.id)] == ["submitted", "started"]
    assert s2.get_meta("epoch") == "42.0"
    assert s2.add(_job()).id == "job-000003"  # not job-000002 again
    s2.close()


def test_concurrent_writers_lose_nothing(store):
    target = store.add(_job())
    errors: list[BaseException] = []
    added: list[str] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        try:
            for i in range(15):
                view = store.add(_job(name=f"t{k}-{i}"))
                with lock:
                    added.append(view.id)
                store.update(target.id, steps_done=k * 100 + i)
                store.add_event(target.id, "tick", f"{k}-{i}")
                if k == 0 and i == 7:
                    store.request_cancel(target.id)
                store.list(["queued"])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(added) == len(set(added)) == 90
    assert len(store.list()) == 91
    assert len([e for e in store.events(target.id) if e.kind == "tick"]) == 90
    assert store.get(target.id).cancel_requested  # not overwritten by the progress updates


def test_in_memory_and_bad_urls():
    mem = Store("sqlite://")
    job = mem.add(_job())
    t = threading.Thread(target=lambda: mem.update(job.id, status="running"))
    t.start()
    t.join()
    assert mem.get(job.id).status == "running"  # the same database from another thread
    mem.close()
    with pytest.raises(ConfigError, match="bad database URL"):
        Store("not a url at all")


def test_a_store_made_before_waiting_reasons_opens_and_gains_the_column(tmp_path):
    """Issue 17 added `waiting_reason`: a database made by the version before must still open."""
    import sqlite3

    path = tmp_path / "old.db"
    old = Store(f"sqlite:///{path}")
    job = old.add(TrainJob(model="mlp", steps=5))
    old.close()
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE dlsched_jobs DROP COLUMN waiting_reason")  # as the old version made it
    con.commit()
    con.close()
    store = Store(f"sqlite:///{path}")
    assert store.get(job.id).waiting_reason == ""
    assert store.update(job.id, waiting_reason="needs 1 CPU").waiting_reason == "needs 1 CPU"
    store.close()


def test_page_retry_and_delete(store):
    """Issue 17: paging with a total, retry of a failed job, delete of an ended one (both databases)."""
    from dlsched.live.store import WrongState

    ids = [store.add(_job(name=f"j{i}")).id for i in range(5)]
    store.update(ids[1], status="failed", steps_done=3, finished_at=1.0, reason="boom")
    jobs, total = store.page(limit=2, offset=1, newest_first=True)
    assert [j.id for j in jobs] == [ids[3], ids[2]] and total == 5
    jobs, total = store.page(["queued"], limit=10)
    assert [j.id for j in jobs] == [ids[0], ids[2], ids[3], ids[4]] and total == 4
    again = store.retry(ids[1])
    assert (again.status, again.reason, again.finished_at, again.steps_done) == ("queued", "", None, 3)
    assert store.events(ids[1])[-1].kind == "retried"
    with pytest.raises(WrongState):
        store.retry(ids[1])
    with pytest.raises(WrongState):
        store.delete(ids[1])
    store.update(ids[1], status="done")
    store.set_meta(f"alloc:{ids[1]}", "{}")
    assert store.delete(ids[1]).status == "done"
    assert store.get(ids[1]) is None and store.events(ids[1]) == [] and store.get_meta(f"alloc:{ids[1]}") is None
    for op in (store.retry, store.delete):
        with pytest.raises(KeyError):
            op(ids[1])
        with pytest.raises(KeyError):
            op("nonsense")
    assert store.add(_job()).id == "job-000006"  # never reused
