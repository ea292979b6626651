"""The job store: what the API and the controller share must survive restarts and concurrent use."""

from __future__ import annotations

import importlib.util
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from dlsched.core.errors import ConfigError
from dlsched.live.spec import TrainJob
from dlsched.live.store import Store
from dlsched.live.store.engine import mask_url
from dlsched.live.store.views import parse_job_id
from tests.databases import db_url  # noqa: F401 - the fixture: SQLite, and PostgreSQL when configured


def _job(**kw) -> TrainJob:
    return TrainJob(**{"model": "mlp", "steps": 10, **kw})


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
    con.execute("ALTER TABLE dlsched_jobs DROP COLUMN run_time_s")  # issue 30 added it
    con.commit()
    con.close()
    store = Store(f"sqlite:///{path}")
    assert store.get(job.id).waiting_reason == "" and store.get(job.id).run_time_s is None  # not known
    assert store.update(job.id, waiting_reason="needs 1 CPU").waiting_reason == "needs 1 CPU"
    assert store.update(job.id, run_time_s=12.5).run_time_s == 12.5
    store.close()


def test_an_ended_job_keeps_its_folder_and_says_how_long_it_took(store):
    """Issue 30: duration (submit → end) is derived from the stored times, only once the job ended;
    the folder and run time the controller wrote stay through the end and a retry."""
    job = store.add(_job(), now=100.0)
    assert job.duration_s is None and job.job_dir is None and job.run_time_s is None
    store.update(job.id, status="running", started_at=130.0, job_dir="/work/jobs/job-000001")
    assert store.get(job.id).duration_s is None  # still going
    done = store.update(job.id, status="failed", finished_at=190.0, run_time_s=55.0, reason="boom")
    assert (done.duration_s, done.run_time_s, done.job_dir) == (90.0, 55.0, "/work/jobs/job-000001")
    assert done.model_dump()["duration_s"] == 90.0  # what the API sends
    again = store.retry(job.id, now=200.0)
    assert again.duration_s is None and (again.run_time_s, again.job_dir) == (55.0, "/work/jobs/job-000001")
    with pytest.raises(ValueError, match="cannot update"):
        store.update(job.id, duration_s=1.0)  # derived, never written


def test_page_retry_and_delete(store):
    """Issue 17: paging with a total, retry of a failed job, delete of an ended one (both databases)."""
    from dlsched.live.store.views import WrongState

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


# --------------------------------------------------------------------------- the URL: errors and secrecy

SECRET = "s3cr3t-pw"


@pytest.mark.parametrize("url, problem", [
    (f"notaurl://bob:{SECRET}@db.example/jobs", "bad database URL notaurl://bob:***@db.example/jobs: Can't load plugin"),
    (f"postgresql://bob:{SECRET}@[::1", "bad database URL postgresql://bob:***@[::1:"),
    (f"postgresql://bob:{SECRET}@db.example:port/jobs", "bad database URL postgresql://bob:***@db.example:port/jobs:"),
    (f"postgresql://bob:p@ss{SECRET}@db.example/jobs", "its password holds an '@'; percent-encode it as %40"),
    (f"postgresql+psycopg://bob:{SECRET}@127.0.0.1:1/jobs", "cannot open the database postgresql+psycopg://bob:***@127.0.0.1:1/jobs:"),
])
def test_a_bad_database_url_is_one_line_that_never_shows_its_password(url, problem):
    if url.startswith("postgresql+psycopg") and importlib.util.find_spec("psycopg") is None:
        pytest.skip("needs pip install 'dlsched[postgres]'")
    with pytest.raises(ConfigError) as err:
        Store(url)
    msg = str(err.value)
    assert problem in msg and SECRET not in msg and "\n" not in msg


def test_mask_url_hides_passwords_even_in_urls_that_do_not_parse():
    assert mask_url(f"postgresql+psycopg://bob:{SECRET}@h:5432/db") == "postgresql+psycopg://bob:***@h:5432/db"
    assert mask_url(f"x://:{SECRET}@h/db") == "x://:***@h/db"
    assert SECRET not in mask_url(f"nonsense://bob:{SECRET}/with@at@h")
    assert mask_url("sqlite:////tmp/a@b/dlsched.db") == "sqlite:////tmp/a@b/dlsched.db"  # no password: kept
    assert mask_url("postgresql://bob@h/db") == "postgresql://bob@h/db"


def test_a_corrupt_sqlite_file_is_one_line(tmp_path):
    bad = tmp_path / "dlsched.db"
    bad.write_bytes(b"this is not an SQLite database, just garbage" * 100)
    with pytest.raises(ConfigError, match=rf"cannot open the database sqlite:///{bad}: file is not a database$"):
        Store(f"sqlite:///{bad}")


def test_serve_refuses_a_bad_url_or_a_corrupt_store_in_one_line_before_making_anything(tmp_path):
    from typer.testing import CliRunner

    from dlsched.cli import app

    def serve(*args: str, **env: str):
        r = CliRunner().invoke(app, ["serve", "--backend", "dry", "--port", "0", *args], env=env)
        out = " ".join(r.output.split())
        assert r.exit_code == 2 and "Traceback" not in r.output and r.output.count("error:") == 1, r.output
        assert SECRET not in r.output
        return out

    work = tmp_path / "w"
    assert "bad database URL notaurl://bob:***@h/db" in serve("--db-url", f"notaurl://bob:{SECRET}@h/db",
                                                               "--work-dir", str(work))
    # the URL from the environment (not visible in `ps`) is the one used
    assert "bad database URL notaurl://env:***@h/db" in serve("--work-dir", str(work),
                                                               DLSCHED_DB_URL=f"notaurl://env:{SECRET}@h/db")
    url_file = tmp_path / "db-url"
    url_file.write_text(f"notaurl://file:{SECRET}@h/db\n")
    assert "bad database URL notaurl://file:***@h/db" in serve("--db-url-file", str(url_file), "--work-dir", str(work))
    assert f"database URL file {tmp_path / 'nope'}: no such file" in serve("--db-url-file", str(tmp_path / "nope"),
                                                                            "--work-dir", str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()  # a missing URL file is found before the work dir is made
    corrupt = tmp_path / "c" / "dlsched.db"
    corrupt.parent.mkdir()
    corrupt.write_bytes(b"\x00garbage" * 500)
    assert "file is not a database" in serve("--work-dir", str(tmp_path / "c"))


def test_db_url_and_db_url_file_replace_each_other_across_layers(tmp_path):
    from dlsched.live.service import load_service_config

    url_file = tmp_path / "db-url"
    url_file.write_text("sqlite:////tmp/from-file.db\n")
    cfg_file = tmp_path / "service.yaml"
    cfg_file.write_text(f"db_url_file: {url_file}\n")
    assert load_service_config(cfg_file).database_url() == "sqlite:////tmp/from-file.db"
    assert load_service_config(cfg_file, db_url="sqlite:////tmp/flag.db").database_url() == "sqlite:////tmp/flag.db"
    cfg_file.write_text(f"db_url: sqlite:////tmp/cfg.db\ndb_url_file: {url_file}\n")
    with pytest.raises(ConfigError, match="give db_url or db_url_file, not both"):
        load_service_config(cfg_file)


@given(password=st.text(min_size=1, max_size=40), user=st.from_regex(r"[a-z]{0,8}", fullmatch=True))
@settings(max_examples=300, deadline=None)
def test_mask_url_masks_any_password_whole(password, user):
    assert mask_url(f"postgresql+psycopg://{user}:{password}@dbhost:5432/jobs") == \
        f"postgresql+psycopg://{user}:***@dbhost:5432/jobs"
