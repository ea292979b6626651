"""Start and stop a real `dlsched serve` process for end-to-end tests, and talk to it over HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
import psutil
import yaml


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Warm trainer interpreters of a local-backend service started here (see `Service`).
STANDBY = 1


class Service:
    """`dlsched serve --config ...` as a child process; `kill()` is a crash, `stop()` a clean exit.

    `nodes` None: the backend's default cluster (the dry backend's needs no file). `port` None: a
    free one. `env`: extra environment of the process (e.g. DLSCHED_TOKEN)."""

    def __init__(self, tmp: Path, policy: str, nodes: list[dict] | None, backend: str = "local",
                 port: int | None = None, env: dict[str, str] | None = None, **extra):
        self.tmp = Path(tmp)
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **(env or {})}
        cfg = {"port": self.port, "work_dir": str(self.tmp / "work"), "policy": policy, "tick": 0.5,
               "backend": backend}
        if nodes is not None:
            nodes_file = self.tmp / "nodes.yaml"
            nodes_file.write_text(yaml.safe_dump({"nodes": nodes}))
            cfg["nodes"] = str(nodes_file)
        cfg.update(extra)
        if backend == "local":  # one warm interpreter, not the default 4: each costs ~3.5 s of CPU to
            # warm (and again after each hand-off) and the suite is CPU-bound on 2 cores; with one,
            # a job's first rank is still handed off warm and the others start cold: both paths run
            cfg["backend_options"] = {"standby": STANDBY, **cfg.get("backend_options", {})}
        self.work_dir = Path(cfg["work_dir"])
        self.config = self.tmp / "service.yaml"
        self.config.write_text(yaml.safe_dump(cfg))
        self.proc: subprocess.Popen | None = None
        self.children: set[int] = set()

    def _argv(self) -> list[str]:
        return [sys.executable, "-m", "dlsched.cli", "serve", "--config", str(self.config)]

    def run_to_exit(self, timeout: float = 60.0) -> subprocess.CompletedProcess:
        """Run a service expected to refuse to start; its exit code and output."""
        return subprocess.run(self._argv(), capture_output=True, text=True, timeout=timeout, env=self.env)

    def log(self) -> str:
        return (self.tmp / "service.log").read_text()

    def start(self, timeout: float = 60.0) -> "Service":
        log = open(self.tmp / "service.log", "ab")
        self.proc = subprocess.Popen(self._argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=self.env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited: {(self.tmp / 'service.log').read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"service did not come up: {(self.tmp / 'service.log').read_text()[-3000:]}")

    def _remember_children(self) -> None:
        """Trainer processes run in their own sessions; note them so the test can clean up by PID."""
        for pids in (self.work_dir / "jobs").glob("*/pids.json"):
            try:
                self.children.update(int(p) for p in _pids(json.loads(pids.read_text())))
            except (OSError, ValueError):
                pass

    def kill(self) -> None:
        self._remember_children()
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        self._remember_children()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for pid in self.children:  # anything of ours still alive after the service is gone
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass

    # ---- HTTP helpers
    def submit(self, **job) -> dict:
        r = httpx.post(f"{self.url}/jobs", json=job, timeout=10)
        assert r.status_code == 201, r.text
        return r.json()

    def jobs(self) -> list[dict]:
        return httpx.get(f"{self.url}/jobs", params={"limit": 1000}, timeout=10).json()  # one page: every test job

    def events(self, job_id: str) -> list[dict]:
        return httpx.get(f"{self.url}/jobs/{job_id}/events", timeout=10).json()

    def wait(self, pred, timeout: float, what: str):
        deadline = time.time() + timeout
        while time.time() < deadline:
            jobs = self.jobs()
            if pred(jobs):
                return jobs
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}: {json.dumps(self.jobs(), indent=1)[:4000]}\n"
                             f"{(self.tmp / 'service.log').read_text()[-4000:]}")

    def job_dir(self, job_id: str) -> Path:
        return self.work_dir / "jobs" / job_id


@contextmanager
def app_server(app) -> Iterator[str]:
    """A real HTTP server for `app` in a thread, on a socket bound to a free 127.0.0.1 port (no race
    for it); yields its URL and stops it on exit."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "the test server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def _pids(data) -> list[int]:
    """Every integer under a 'pid'/'pids' key of the backend's pids.json, whatever its layout."""
    out: list[int] = []
    if isinstance(data, dict):
        for k, v in data.items():
            if k in ("pid", "pids"):
                out += [v] if isinstance(v, int) else [x for x in v if isinstance(x, int)] if isinstance(v, list) else []
            else:
                out += _pids(v)
    elif isinstance(data, list):
        for x in data:
            out += _pids(x)
    return out


def progress_records(job_dir: Path) -> list[dict]:
    path = Path(job_dir) / "progress.jsonl"
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def all_ended(jobs: list[dict]) -> bool:
    return bool(jobs) and all(j["status"] not in ("queued", "running") for j in jobs)
