"""`dlsched submit | status | cancel` over real HTTP against a uvicorn server on 127.0.0.1, and
`dlsched serve` itself (dry backend) started as a process, used, and stopped with SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from dlsched.cli import app
from dlsched.live.api import create_app
from dlsched.live.store import Store
from tests.live_service import app_server, free_port
from tests.test_api import FakeController

runner = CliRunner()


@pytest.fixture
def service(tmp_path):
    """A real HTTP server in a thread, on a socket we bound to a free port (no race for it)."""
    store = Store(f"sqlite:///{tmp_path / 'dlsched.db'}")
    with app_server(create_app(store, FakeController())) as url:
        yield url, store
    store.close()


def _cli(*args: str):
    return runner.invoke(app, list(args))


def test_submit_status_cancel_over_http(service, tmp_path):
    url, store = service
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("- {model: mlp, steps: 20, name: alpha}\n- {model: cnn, steps: 8, workers: 2, max_workers: 3}\n")
    r = _cli("submit", str(jobs), "--url", url)
    assert r.exit_code == 0, r.output
    assert "submitted job-000001 (alpha)" in r.output and "submitted job-000002" in r.output
    assert [j.spec.model for j in store.list()] == ["mlp", "cnn"] and store.get("job-000002").spec.max_workers == 3

    single = tmp_path / "one.json"
    single.write_text(json.dumps({"model": "transformer", "steps": 3}))
    assert "job-000003" in _cli("submit", str(single), "--url", url).output

    store.update("job-000001", status="running", steps_done=10, workers=2, nodes=["n0"], steps_per_s=2.5)
    store.add_event("job-000001", "started", "2w/0ps on n0")
    r = _cli("status", "--url", url)
    assert r.exit_code == 0, r.output
    assert "3 jobs" in r.output and "alpha" in r.output and "10/20" in r.output and "running" in r.output

    r = _cli("status", "job-000001", "--url", url)
    assert r.exit_code == 0, r.output
    assert "submitted" in r.output and "2w/0ps on n0" in r.output and "2.50 steps/s" in r.output

    r = _cli("cancel", "job-000001", "--url", url)
    assert r.exit_code == 0 and "cancel requested for job-000001" in r.output
    assert store.get("job-000001").cancel_requested

    store.update("job-000002", status="done")
    r = _cli("cancel", "job-000002", "--url", url)
    assert r.exit_code == 2 and "already ended (done)" in r.output

    r = _cli("status", "job-000099", "--url", url)
    assert r.exit_code == 2 and "no job 'job-000099'" in r.output


def test_bad_job_file_is_refused_locally_with_file_and_key(service, tmp_path):
    url, store = service
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {model: mlp, steps: 5}\n- {model: resnet, steps: 0, gpu: 1}\n")
    r = _cli("submit", str(bad), "--url", url)
    assert r.exit_code == 2
    out = " ".join(r.output.split())  # undo rich's line wrapping
    assert f"{bad}: job 2: model: Input should be 'mlp', 'cnn' or 'transformer'" in out
    assert "job 2: steps: Input should be greater than 0" in out and "job 2: gpu: unknown key (typo?)" in out
    assert store.list() == []  # nothing sent, not even the valid first job
    assert _cli("submit", str(tmp_path / "missing.yaml"), "--url", url).exit_code == 2


def test_no_service_is_one_clear_line():
    url = f"http://127.0.0.1:{free_port()}"
    for args in (("status",), ("cancel", "job-000001")):
        r = _cli(*args, "--url", url)
        assert r.exit_code == 2
        assert f"no dlsched service at {url}: start one with `dlsched serve`" in " ".join(r.output.split())
        assert "Traceback" not in r.output


def test_serve_runs_jobs_and_stops_cleanly_on_sigterm(tmp_path):
    port = free_port()
    work = tmp_path / "svc"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlsched.cli", "serve", "--backend", "dry", "--policy", "fifo", "--port", str(port),
         "--work-dir", str(work)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        job = tmp_path / "job.yaml"
        job.write_text("model: mlp\nsteps: 15\n")
        r = _cli("submit", str(job), "--url", url)
        assert r.exit_code == 0, r.output
        status, view = None, {}
        while time.monotonic() < deadline:  # the dry backend makes 10 steps/s after a 1 s start
            view = httpx.get(f"{url}/jobs/job-000001").json()
            status = view["status"]
            if status == "done":
                break
            time.sleep(0.3)
        assert status == "done"
        assert view["job_dir"] == str((work / "jobs" / "job-000001").absolute()) and Path(view["job_dir"]).is_dir()
        assert 0 < view["run_time_s"] <= view["duration_s"]
        assert view["duration_s"] == pytest.approx(view["finished_at"] - view["submitted_at"])
        assert httpx.get(f"{url}/cluster").json()["backend"] == "dry"
        assert 'dlsched_jobs{status="done"} 1.0' in httpx.get(f"{url}/metrics").text
        page = httpx.get(f"{url}/").text
        assert "job-000001" in page and "15/15" in page
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert proc.returncode == 0, out
    assert f"status page: http://127.0.0.1:{port}/" in out and "stopping" in out
    assert (work / "dlsched.db").is_file()
    reopened = Store(f"sqlite:///{work / 'dlsched.db'}")
    assert reopened.get("job-000001").status == "done"  # persisted where the config said
    reopened.close()


def test_serve_config_errors_are_one_line_each(tmp_path):
    from dlsched.live.service import ServiceConfig, is_loopback, load_service_config

    cfg_file = tmp_path / "service.yaml"
    cfg_file.write_text("port: 9001\npolicy: fifo\nbackend: dry\nstop_jobs_on_exit: false\n")
    cfg = load_service_config(cfg_file, port=9002, policy=None)
    assert (cfg.port, cfg.policy, cfg.backend, cfg.stop_jobs_on_exit) == (9002, "fifo", "dry", False)  # flags win
    assert cfg.database_url().startswith("sqlite:///") and cfg.database_url().endswith("dlsched-service/dlsched.db")
    assert ServiceConfig().host == "127.0.0.1"
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("example.org")

    cfg_file.write_text("prot: 9001\n")
    r = _cli("serve", "--config", str(cfg_file))
    assert r.exit_code == 2 and "prot: unknown key (typo?)" in r.output
    r = _cli("serve", "--backend", "kubernets", "--work-dir", str(tmp_path / "w"))
    assert r.exit_code == 2 and "unknown backend 'kubernets' (did you mean 'kubernetes'?)" in r.output
    r = _cli("serve", "--backend", "dry", "-o", "rate=3", "--work-dir", str(tmp_path / "w"))
    assert r.exit_code == 2 and "rate: unknown key" in r.output and len(r.output.strip().splitlines()) == 1
    r = _cli("serve", "--backend", "ray", "-o", "nodes", "--work-dir", str(tmp_path / "w"))
    assert r.exit_code == 2 and "--backend-option takes KEY=VALUE" in r.output
    r = _cli("serve", "--backend", "kubernetes", "-o", "kubeconfig=/nonexistent/kubeconfig",
             "--work-dir", str(tmp_path / "k"))  # (the cluster is reached once the work dir is leased)
    assert r.exit_code == 2 and "Kubernetes configuration" in r.output and len(r.output.strip().splitlines()) == 1
    r = _cli("serve", "--backend", "dry", "--policy", "fifoo", "--work-dir", str(tmp_path / "w"))
    assert r.exit_code == 2 and "unknown policy 'fifoo'" in r.output
    assert not (tmp_path / "w").exists()  # refused before creating anything


# --------------------------------------------------------------------------- issue 17: operations


def _flat(output: str) -> str:
    return " ".join(output.split())  # undo rich's wrapping


def test_status_shows_the_newest_page_and_how_many_more(service):
    url, store = service
    from dlsched.live.spec import TrainJob

    for i in range(25):
        store.add(TrainJob(model="mlp", steps=5, name=f"n{i:02d}"))
    r = _cli("status", "--url", url)
    assert r.exit_code == 0, r.output
    assert "20 newest of 25 jobs (5 more: --offset 20)" in _flat(r.output)
    assert "job-000025" in r.output and "job-000006" in r.output and "job-000005" not in r.output
    r = _cli("status", "--url", url, "--offset", "20")
    assert "job-000005" in r.output and "job-000001" in r.output and "job-000006" not in r.output
    store.update("job-000003", status="failed", reason="boom")
    r = _cli("status", "--url", url, "--status", "failed")
    assert r.exit_code == 0 and "1 failed jobs" in _flat(r.output) and "boom" in r.output
    for bad in (("--limit", "0"), ("--limit", "5000"), ("--offset", "-1"), ("--status", "runing")):
        r = _cli("status", "--url", url, *bad)
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1, r.output


def test_status_shows_why_a_queued_job_waits(service):
    url, store = service
    from dlsched.live.spec import TrainJob

    job = store.add(TrainJob(model="mlp", steps=5))
    store.update(job.id, waiting_reason="needs 1 CPU per worker, the largest free node has 0")
    flat = _flat(_cli("status", "--url", url).output)
    assert "needs 1 CPU per worker, the largest free node has 0" in flat
    assert "waiting needs 1 CPU per worker" in _flat(_cli("status", job.id, "--url", url).output)


def test_user_text_cannot_carry_terminal_escapes_or_markup(service, tmp_path):
    url, store = service
    job = tmp_path / "job.yaml"
    job.write_text('model: mlp\nsteps: 5\nname: "evil\\e[2J\\e[31m[bold]x[/]\\u202e"\n')
    r = _cli("submit", str(job), "--url", url)
    assert r.exit_code == 0, r.output
    assert store.get("job-000001").name.startswith("evil\x1b[2J")  # stored as given
    store.update("job-000001", reason="bad \x1b]0;title\x07 reason", nodes=["n\x1b[1m0"])
    store.add_event("job-000001", "note", "msg \x1b[5m blink")
    for out in (r.output, _cli("status", "--url", url).output, _cli("status", "job-000001", "--url", url).output):
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out, repr(out)
    listing = _cli("status", "job-000001", "--url", url).output
    assert "evil\\x1b[2J\\x1b[31m[bold]x[/]\\u202e" in listing and "msg \\x1b[5m blink" in listing
    r = _cli("status", "job\x1b[31m", "--url", url)  # user text in an error message too
    assert r.exit_code == 2 and "\x1b" not in r.output and "job\\x1b[31m" in r.output


def test_submit_refuses_workers_that_take_nothing(service, tmp_path):
    url, store = service
    bad = tmp_path / "zero.yaml"
    bad.write_text("model: mlp\nsteps: 5\ngpus_per_worker: 0\ncpus_per_worker: 0\nmem_gb_per_worker: 0\n")
    r = _cli("submit", str(bad), "--url", url)
    assert r.exit_code == 2 and "gpus_per_worker: each worker must take at least 1 GPU slot or 1 CPU" in _flat(r.output)
    assert store.list() == []
    huge = tmp_path / "huge.yaml"
    huge.write_text("model: mlp\nsteps: 5\nworkers: 9\n")  # 9 slots on a 2 x 4 cluster: the service says no
    r = _cli("submit", str(huge), "--url", url)
    assert r.exit_code == 2 and "invalid job: workers: can never run on this cluster" in _flat(r.output)
    assert "Traceback" not in r.output and store.list() == []


def test_retry_and_delete_over_http(service, tmp_path):
    url, store = service
    from dlsched.live.spec import TrainJob

    job = store.add(TrainJob(model="mlp", steps=50))
    r = _cli("retry", job.id, "--url", url)
    assert r.exit_code == 2 and f"job {job.id} is queued: only a failed or cancelled job can be retried" in _flat(r.output)
    r = _cli("delete", job.id, "--url", url)
    assert r.exit_code == 2 and "cancel it first" in _flat(r.output)
    store.update(job.id, status="failed", steps_done=20, reason="3 runs failed in a row")
    r = _cli("retry", job.id, "--url", url)
    assert r.exit_code == 0 and f"{job.id} queued again; resumes from its checkpoint (step 20 of 50)" in r.output
    assert store.get(job.id).status == "queued" and store.events(job.id)[-1].kind == "retried"
    store.update(job.id, status="cancelled")
    r = _cli("delete", job.id, "--url", url)
    assert r.exit_code == 0 and f"deleted {job.id} (was cancelled)" in r.output
    assert store.get(job.id) is None
    for cmd in ("retry", "delete"):
        r = _cli(cmd, "job-000042", "--url", url)
        assert r.exit_code == 2 and "no job 'job-000042'" in r.output


# --------------------------------------------------------------------------- issue 30: an ended job's time and folder


def test_a_finished_job_shows_how_long_it_took_and_its_folder(tmp_path, monkeypatch):
    """The controller (dry backend, fake clock: no processes) records where a job's runs write and
    how long they ran; `dlsched status` then shows an ended job's duration, run time and folder,
    which exists. Job b waits for a's one GPU, so its duration (submit → end) exceeds its run time."""
    from rich.console import Console

    import dlsched.cli_live as cli_live
    from dlsched.core import Cluster
    from dlsched.live.backends.dry import DryBackend, FakeClock
    from dlsched.live.controller import Controller
    from dlsched.live.spec import TrainJob
    from dlsched.policies.registry import make_policy

    clock = FakeClock()
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    cluster = Cluster.homogeneous("live", nodes=1, gpus=1, cpus=8, mem=32)
    ctl = Controller(store, DryBackend(cluster, clock), make_policy("fifo"), work_dir=tmp_path / "work",
                     clock=clock)
    a = store.add(TrainJob(model="mlp", steps=50), now=clock())
    b = store.add(TrainJob(model="mlp", steps=30, name="second"), now=clock())
    never = store.add(TrainJob(model="mlp", steps=30), now=clock())
    store.request_cancel(never.id)  # cancelled while queued: it never ran, so it has no folder
    for _ in range(30):
        clock.advance(1.0)
        ctl.step()
    va, vb, vn = store.get(a.id), store.get(b.id), store.get(never.id)
    assert va.status == vb.status == "done" and vn.status == "cancelled"
    for v in (va, vb):  # a start recorded the folder; the end kept it
        assert v.job_dir is not None and Path(v.job_dir).is_absolute() and Path(v.job_dir).is_dir()
        assert v.duration_s == pytest.approx(v.finished_at - v.submitted_at) and v.duration_s > 0
        assert 0 < v.run_time_s <= v.duration_s
    assert Path(vb.job_dir) == (tmp_path / "work" / "jobs" / b.id).absolute()
    assert vb.duration_s - vb.run_time_s >= va.run_time_s - 1.0  # b queued while a ran
    assert vn.job_dir is None and vn.run_time_s is None and vn.duration_s is not None

    monkeypatch.setattr(cli_live, "console", Console(width=400))  # wide enough that no path is folded
    with app_server(create_app(store, FakeController())) as url:
        table = _cli("status", "--url", url)
        one = _cli("status", b.id, "--url", url)
    store.close()
    assert table.exit_code == 0, table.output
    rows = {cells[0]: cells for line in table.output.splitlines()
            if len(cells := [c.strip() for c in line.split("│")[1:-1]]) > 1}
    assert rows[b.id][-3] == f"{cli_live._span(vb.duration_s)} (ran {cli_live._span(vb.run_time_s)})"  # age
    # the row names its folder; the parent they share is said once under the table
    assert rows[b.id][-1] == f"{Path(vb.job_dir).name}/"
    assert f"job dirs are in {Path(vb.job_dir).parent}/" in table.output
    assert rows[never.id][-3] == cli_live._span(vn.duration_s) and rows[never.id][-1] == "–"  # never ran
    assert one.exit_code == 0, one.output
    assert f"job dir    {vb.job_dir}" in one.output
    assert f"took       {cli_live._span(vb.duration_s)} (ran {cli_live._span(vb.run_time_s)})" in one.output


def test_durations_read_as_a_person_would_say_them():
    from dlsched.cli_live import _span

    assert [_span(s) for s in (None, 0.04, 4.25, 59.4, 61, 3599, 3600, 5 * 3600 + 7 * 60 + 59)] == [
        "–", "0.0s", "4.2s", "59s", "1m01s", "59m59s", "1h00m", "5h07m"]
