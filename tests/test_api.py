"""The REST API over a real store and a fake controller (the API never talks to a backend)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from dlsched.core import Cluster
from dlsched.live.admission import admission_problems
from dlsched.live.api import create_app
from dlsched.live.metrics import LiveMetrics
from dlsched.live.store import Store


class FakeController:
    """What the API needs of the controller: its cluster view, its health, admission and job dirs."""

    error = ""
    cluster = Cluster.homogeneous("fake", nodes=2, gpus=4, cpus=16, mem=64)  # as cluster_view says
    work_dir = Path("/nonexistent-dlsched-work")

    def admission_problems(self, job) -> list[tuple[str, str]]:
        return admission_problems(job, self.cluster)

    def job_dir(self, job_id: str) -> Path:
        return self.work_dir / "jobs" / job_id

    def health(self) -> str:
        return self.error

    def cluster_view(self) -> dict:
        return {
            "nodes": [
                {"name": "n0", "gpus": 4.0, "cpus": 16.0, "mem_gb": 64.0, "used_gpus": 2.0, "used_cpus": 2.0,
                 "used_mem_gb": 2.0, "jobs": ["job-000001"]},
                {"name": "n1", "gpus": 4.0, "cpus": 16.0, "mem_gb": 64.0, "used_gpus": 0.0, "used_cpus": 0.0,
                 "used_mem_gb": 0.0, "jobs": []},
            ],
            "policy": "fifo", "backend": "fake", "decisions": 3,
        }

    def step(self) -> None: ...

    def shutdown(self, stop_jobs: bool = True) -> None: ...


@pytest.fixture
def env(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'dlsched.db'}")
    metrics = LiveMetrics()
    client = TestClient(create_app(store, FakeController(), metrics))
    yield client, store, metrics
    client.close()
    store.close()


JOB = {"model": "mlp", "steps": 20, "name": "tiny", "workers": 2, "min_workers": 1, "max_workers": 4}


def test_submit_list_filter_show(env):
    client, store, _ = env
    r = client.post("/jobs", json=JOB)
    assert r.status_code == 201
    job = r.json()
    assert job["id"] == "job-000001" and job["status"] == "queued" and job["spec"]["max_workers"] == 4
    assert store.get(job["id"]).name == "tiny"  # it really is in the store
    second = client.post("/jobs", json={"model": "cnn", "steps": 5}).json()
    store.update(second["id"], status="running", workers=1, nodes=["n0"])

    assert [j["id"] for j in client.get("/jobs").json()] == [job["id"], second["id"]]
    assert [j["id"] for j in client.get("/jobs", params={"status": "running"}).json()] == [second["id"]]
    both = client.get("/jobs", params=[("status", "queued"), ("status", "running")]).json()
    assert len(both) == 2
    shown = client.get(f"/jobs/{second['id']}").json()
    assert shown["status"] == "running" and shown["nodes"] == ["n0"]
    events = client.get(f"/jobs/{job['id']}/events").json()
    assert [e["kind"] for e in events] == ["submitted"]


def test_bad_status_filter_is_422(env):
    client, _, _ = env
    r = client.get("/jobs", params={"status": "runing"})
    assert r.status_code == 422
    assert "status" in r.json()["message"] and "'running'" in r.json()["message"]


def test_unknown_job_is_404_with_a_clear_message(env):
    client, _, _ = env
    for path in ("/jobs/job-000009", "/jobs/job-000009/events"):
        r = client.get(path)
        assert r.status_code == 404
        assert "no job 'job-000009'" in r.json()["detail"]
    assert client.post("/jobs/nope/cancel").status_code == 404


@pytest.mark.parametrize(
    "body, expected",
    [
        ({"model": "mlp", "steps": 0}, "steps: Input should be greater than 0"),
        ({"model": "resnet", "steps": 5}, "model: Input should be 'mlp', 'cnn' or 'transformer'"),
        ({"model": "mlp", "steps": 5, "gpus": 2}, "gpus: Extra inputs are not permitted"),
        ({"steps": 5}, "model: Field required"),
        ({"model": "mlp", "steps": 5, "workers": 8, "max_workers": 4},
         "need min_workers (8) <= workers (8) <= max_workers (4)"),
    ],
)
def test_bad_spec_is_422_with_a_readable_message(env, body, expected):
    client, store, _ = env
    r = client.post("/jobs", json=body)
    assert r.status_code == 422
    data = r.json()
    assert data["message"].startswith("invalid job: ") and expected in data["message"], data["message"]
    assert data["detail"] and all({"loc", "msg", "type"} <= set(p) for p in data["detail"])
    assert store.list() == []


def test_cancel_is_accepted_then_409_once_finished(env):
    client, store, _ = env
    job = client.post("/jobs", json=JOB).json()
    r = client.post(f"/jobs/{job['id']}/cancel")
    assert r.status_code == 202 and r.json()["cancel_requested"] is True
    assert client.post(f"/jobs/{job['id']}/cancel").status_code == 202  # idempotent
    store.update(job["id"], status="cancelled")
    r = client.post(f"/jobs/{job['id']}/cancel")
    assert r.status_code == 409 and "already ended (cancelled)" in r.json()["detail"]


def test_cluster_view_and_503_without_controller(env, tmp_path):
    client, store, _ = env
    view = client.get("/cluster").json()
    assert [n["name"] for n in view["nodes"]] == ["n0", "n1"] and view["policy"] == "fifo"
    bare = TestClient(create_app(store))
    r = bare.get("/cluster")
    assert r.status_code == 503 and "no controller" in r.json()["detail"]
    assert bare.get("/healthz").json() == {"status": "ok", "controller": False, "error": ""}
    assert client.get("/healthz").json()["controller"] is True


def test_failing_decisions_make_healthz_503(env):
    _, store, _ = env
    ctl = FakeController()
    ctl.error = "policy 'x' failed: RuntimeError: boom"
    with TestClient(create_app(store, ctl)) as client:
        r = client.get("/healthz")
    assert r.status_code == 503 and r.json()["status"] == "failing" and "boom" in r.json()["error"]


def test_metrics_exports_job_counts_from_the_store(env):
    client, store, metrics = env
    for _ in range(3):
        client.post("/jobs", json=JOB)
    store.update("job-000002", status="done")
    metrics.decision_seconds.observe(0.01)
    metrics.actions_total.labels(kind="start").inc(2)
    metrics.job_steps_per_second.labels(job="job-000001").set(4.5)
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'dlsched_jobs{status="queued"} 2.0' in text
    assert 'dlsched_jobs{status="done"} 1.0' in text
    assert 'dlsched_jobs{status="failed"} 0.0' in text
    assert 'dlsched_actions_total{kind="start"} 2.0' in text
    assert 'dlsched_actions_total{kind="resize"} 0.0' in text
    assert "dlsched_decision_seconds_count 1.0" in text
    assert 'dlsched_job_steps_per_second{job="job-000001"} 4.5' in text
    assert "dlsched_gpu_slots_total" in text and "dlsched_resize_pause_seconds_bucket" in text


def test_status_page_is_self_contained_and_escapes_names(env):
    client, store, _ = env
    client.post("/jobs", json={**JOB, "name": "<script>alert(1)</script>"})
    store.update("job-000001", status="running", steps_done=5, workers=2, nodes=["n0"])
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    assert "job-000001" in page and "5/20 (25%)" in page and 'style="width:25.0%"' in page  # progress bar
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "n0" in page and "fifo" in page
    assert "setInterval" in page  # refreshes itself
    assert "http://" not in page and "https://" not in page and "<link" not in page and " src=" not in page


def test_openapi_declares_every_route(env):
    client, _, _ = env
    schema = client.get("/openapi.json").json()
    assert {"/jobs", "/jobs/{job_id}", "/jobs/{job_id}/events", "/jobs/{job_id}/cancel", "/cluster", "/metrics",
            "/", "/healthz"} <= set(schema["paths"])
    post = schema["paths"]["/jobs"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/TrainJob")
    assert post["responses"]["201"]["content"]["application/json"]["schema"]["$ref"].endswith("/JobView")
