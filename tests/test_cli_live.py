"""`dlsched submit | status | cancel` over real HTTP against a uvicorn server on 127.0.0.1, and
`dlsched serve` itself (dry backend) started as a process, used, and stopped with SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

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
    assert "3 job(s)" in r.output and "alpha" in r.output and "10/20" in r.output and "running" in r.output

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
        status = None
        while time.monotonic() < deadline:  # the dry backend makes 10 steps/s after a 1 s start
            status = httpx.get(f"{url}/jobs/job-000001").json()["status"]
            if status == "done":
                break
            time.sleep(0.3)
        assert status == "done"
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
    r = _cli("serve", "--backend", "kubernetes", "--work-dir", str(tmp_path / "w"))
    assert r.exit_code == 2 and "backend" in r.output
    r = _cli("serve", "--backend", "dry", "--policy", "fifoo", "--work-dir", str(tmp_path / "w"))
    assert r.exit_code == 2 and "unknown policy 'fifoo'" in r.output
    assert not (tmp_path / "w").exists()  # refused before creating anything
