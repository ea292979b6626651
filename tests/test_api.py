"""The REST API over a real store and a fake controller (the API never talks to a backend)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from dlsched.core import Cluster
from dlsched.live.controller.admission import admission_problems
from dlsched.live.api.app import DEFAULT_PAGE, PAGE_ROWS, create_app
from dlsched.live.api.metrics import LiveMetrics
from dlsched.live.spec import TrainJob
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
    assert shown["duration_s"] is None  # only an ended job has one

    store.update(second["id"], status="done", finished_at=second["submitted_at"] + 75.0, run_time_s=60.0,
                 job_dir="/srv/dlsched/jobs/job-000002")  # issue 30: what the controller writes at the end
    for view in (client.get(f"/jobs/{second['id']}").json(), client.get("/jobs").json()[1]):
        assert view["duration_s"] == pytest.approx(75.0)
        assert (view["run_time_s"], view["job_dir"]) == (60.0, "/srv/dlsched/jobs/job-000002")
    schema = client.get("/openapi.json").json()["components"]["schemas"]["JobView"]["properties"]
    assert {"duration_s", "run_time_s", "job_dir"} <= set(schema)
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
        # JSON's true is not a number, nor 1 a boolean (pydantic's lax mode took both; schemathesis)
        ({"model": "cnn", "steps": 9, "width": True}, "width: must be a number, not true or false"),
        ({"model": "cnn", "steps": 9, "gpus_per_worker": False}, "gpus_per_worker: must be a number"),
        ({"model": "cnn", "steps": 9, "work_known": 1}, "work_known: must be true or false"),
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
    assert {"/jobs", "/jobs/{job_id}", "/jobs/{job_id}/events", "/jobs/{job_id}/cancel", "/jobs/{job_id}/retry",
            "/cluster", "/metrics", "/", "/healthz"} <= set(schema["paths"])
    assert "delete" in schema["paths"]["/jobs/{job_id}"]
    assert "X-Total-Count" in schema["paths"]["/jobs"]["get"]["responses"]["200"]["headers"]
    post = schema["paths"]["/jobs"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/TrainJob")
    assert post["responses"]["201"]["content"]["application/json"]["schema"]["$ref"].endswith("/JobView")


# --------------------------------------------------------------------------- issue 17: operations


@pytest.mark.parametrize("demand, key", [
    ({"gpus_per_worker": 0, "cpus_per_worker": 0, "mem_gb_per_worker": 0}, "gpus_per_worker"),
    ({"gpus_per_worker": 0.5, "cpus_per_worker": 0.5}, "gpus_per_worker"),
    ({"workers": 9, "max_workers": 9}, "workers"),  # 9 one-GPU workers on 2 x 4 slots: never fits
])
def test_jobs_that_may_never_run_are_refused_at_submit(env, demand, key):
    client, store, _ = env
    r = client.post("/jobs", json={"model": "mlp", "steps": 5, **demand})
    assert r.status_code == 422, r.text
    message = r.json()["message"]
    assert message.startswith(f"invalid job: {key}: "), message
    assert ("at least 1 GPU slot or 1 CPU" in message) if key == "gpus_per_worker" else ("never run" in message)
    assert store.list() == []


def test_cpu_only_and_gpu_workers_are_admitted(env):
    client, _, _ = env
    assert client.post("/jobs", json={"model": "mlp", "steps": 5, "gpus_per_worker": 0}).status_code == 201
    assert client.post("/jobs", json={"model": "mlp", "steps": 5, "cpus_per_worker": 0.25}).status_code == 201


def test_get_jobs_is_paged_with_total_count_and_links(env):
    client, store, _ = env
    for i in range(7):
        store.add(TrainJob(model="mlp", steps=5, name=f"j{i}"))
    store.update("job-000003", status="done")
    r = client.get("/jobs", params={"limit": 3})
    assert [j["id"] for j in r.json()] == ["job-000001", "job-000002", "job-000003"]
    assert r.headers["x-total-count"] == "7"
    assert 'rel="next"' in r.headers["link"] and "offset=3" in r.headers["link"] and "rel=\"prev\"" not in r.headers["link"]
    r = client.get("/jobs", params={"limit": 3, "offset": 6})
    assert [j["id"] for j in r.json()] == ["job-000007"] and 'rel="prev"' in r.headers["link"]
    assert 'rel="next"' not in r.headers["link"]
    r = client.get("/jobs", params={"limit": 2, "order": "newest", "status": "queued"})
    assert [j["id"] for j in r.json()] == ["job-000007", "job-000006"] and r.headers["x-total-count"] == "6"
    for bad in ({"limit": 0}, {"limit": 100_000}, {"offset": -1}, {"order": "sideways"}):
        assert client.get("/jobs", params=bad).status_code == 422


def test_get_jobs_has_a_default_page_size(env):
    client, store, _ = env
    for _ in range(DEFAULT_PAGE + 5):
        store.add(TrainJob(model="mlp", steps=5))
    r = client.get("/jobs")
    assert len(r.json()) == DEFAULT_PAGE and r.headers["x-total-count"] == str(DEFAULT_PAGE + 5)


def test_status_page_is_paged_newest_first_and_shows_waiting_reasons(env):
    client, store, _ = env
    for i in range(PAGE_ROWS + 3):
        store.add(TrainJob(model="mlp", steps=5, name=f"job{i}"))
    store.update("job-000053", waiting_reason="needs 1 CPU per worker, the largest free node has 0")
    page = client.get("/").text
    assert "job-000053" in page and "job-000004" in page and "job-000003" not in page
    assert f"jobs 1–{PAGE_ROWS} of {PAGE_ROWS + 3} (newest first)" in page and "(3 more)" in page
    assert "needs 1 CPU per worker, the largest free node has 0" in page
    assert '<a href="/?offset=50">older' in page
    older = client.get("/", params={"offset": PAGE_ROWS}).text
    assert "job-000003" in older and "job-000004" not in older and "← newer" in older
    store.update("job-000002", status="failed")
    failed = client.get("/", params={"status": "failed"}).text.split("<h2>Jobs</h2>")[1]
    assert "job-000002" in failed and "job-000001" not in failed and "failed 1–1 of 1" in failed


def test_retry_queues_a_failed_job_again_with_an_event(env):
    client, store, _ = env
    job = client.post("/jobs", json=JOB).json()
    store.update(job["id"], status="failed", reason="3 runs failed in a row", steps_done=12, finished_at=1.0)
    r = client.post(f"/jobs/{job['id']}/retry")
    assert r.status_code == 200, r.text
    again = r.json()
    assert again["status"] == "queued" and again["reason"] == "" and again["finished_at"] is None
    assert again["steps_done"] == 12  # kept: it resumes from its checkpoint
    events = client.get(f"/jobs/{job['id']}/events").json()
    assert events[-1]["kind"] == "retried" and "was failed" in events[-1]["message"]
    r = client.post(f"/jobs/{job['id']}/retry")  # queued now: nothing to retry
    assert r.status_code == 409 and "only a failed or cancelled job" in r.json()["detail"]
    store.update(job["id"], status="done")
    assert client.post(f"/jobs/{job['id']}/retry").status_code == 409
    assert client.post("/jobs/job-000099/retry").status_code == 404
    assert client.post("/jobs/bogus/retry").status_code == 404


def test_delete_removes_an_ended_job_and_purges_its_dir(env, tmp_path):
    client, store, _ = env
    ctl = client.app.state.controller
    ctl.work_dir = tmp_path / "work"
    a = client.post("/jobs", json=JOB).json()["id"]
    b = client.post("/jobs", json=JOB).json()["id"]
    r = client.delete(f"/jobs/{a}")
    assert r.status_code == 409 and "cancel it first" in r.json()["detail"]
    store.update(a, status="cancelled")
    store.set_meta(f"alloc:{a}", "{}")
    job_dir = ctl.job_dir(a)
    job_dir.mkdir(parents=True)
    (job_dir / "checkpoint.pt").write_bytes(b"x")
    r = client.delete(f"/jobs/{a}", params={"purge": "true"})
    assert r.status_code == 200, r.text
    assert r.json() == {"id": a, "status": "cancelled", "purged": str(job_dir)}
    assert not job_dir.exists() and store.get(a) is None and store.events(a) == []
    assert store.get_meta(f"alloc:{a}") is None
    assert client.get(f"/jobs/{a}").status_code == 404 and client.delete(f"/jobs/{a}").status_code == 404
    store.update(b, status="done")
    r = client.delete(f"/jobs/{b}")  # no purge: the job dir stays
    assert r.status_code == 200 and r.json()["purged"] is None
    assert client.post("/jobs", json=JOB).json()["id"] == "job-000003"  # ids are never reused


def test_delete_with_purge_needs_a_controller(env):
    _, store, _ = env
    job = store.add(TrainJob(model="mlp", steps=5))
    store.update(job.id, status="done")
    bare = TestClient(create_app(store))
    r = bare.delete(f"/jobs/{job.id}", params={"purge": True})
    assert r.status_code == 503 and store.get(job.id) is not None  # nothing deleted
    assert bare.delete(f"/jobs/{job.id}").status_code == 200


def test_api_docs_work_offline(env):
    client, _, _ = env
    import re

    for page in ("/docs", "/redoc"):
        html = client.get(page).text
        urls = re.findall(r"""(?:src|href)\s*=\s*['"]([^'"]+)['"]|url:\s*['"]([^'"]+)['"]""", html)
        urls = [u for pair in urls for u in pair if u]
        assert urls, html
        assert not [u for u in urls if "://" in u or u.startswith("//")], urls  # nothing from a CDN
        for u in urls:
            assert client.get(u).status_code == 200, u


def test_status_page_shows_control_characters_as_escapes(env):
    client, _, _ = env
    client.post("/jobs", json={**JOB, "name": "evil\x1b[31m\u202e"})
    page = client.get("/").text
    assert "evil\\x1b[31m\\u202e" in page and "\x1b" not in page and "\u202e" not in page
