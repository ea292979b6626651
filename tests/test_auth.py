"""Optional bearer-token authentication: changes need the token, reads are open unless `auth: all`,
a route added later is covered by its method, and the CLI sends the token from a file or the env."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from dlsched.cli import app as cli_app
from dlsched.core.errors import ConfigError
from dlsched.live.api import create_app
from dlsched.live.api.auth import ApiAuth, resolve_token
from dlsched.live.service import ServiceConfig, exposure_warning
from dlsched.live.store import Store
from tests.live_service import app_server
from tests.test_api import FakeController

TOKEN = "tok-0123456789abcdef"
JOB = {"model": "mlp", "steps": 10}


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'dlsched.db'}")
    yield s
    s.close()


def _client(store, scope="writes", token=TOKEN) -> TestClient:
    return TestClient(create_app(store, FakeController(), auth=ApiAuth(token, scope)))


def _bearer(token: str = TOKEN) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_changes_need_the_token_and_reads_stay_open(store):
    c = _client(store)
    for headers in ({}, _bearer("wrong"), {"Authorization": f"Basic {TOKEN}"}, {"Authorization": TOKEN}):
        r = c.post("/jobs", json=JOB, headers=headers)
        assert r.status_code == 401, (headers, r.text)
        assert r.headers["www-authenticate"] == "Bearer"
        assert "Authorization: Bearer <token>" in r.json()["detail"]
    assert c.post("/jobs", json={"model": "nope"}).status_code == 401  # no token: not even validation details
    assert store.list() == []
    job = c.post("/jobs", json=JOB, headers=_bearer()).json()
    assert c.post(f"/jobs/{job['id']}/cancel").status_code == 401
    assert not store.get(job["id"]).cancel_requested
    assert c.post(f"/jobs/{job['id']}/cancel", headers=_bearer()).status_code == 202
    for path in ("/jobs", f"/jobs/{job['id']}", f"/jobs/{job['id']}/events", "/cluster", "/metrics", "/", "/healthz"):
        assert c.get(path).status_code == 200, path


def test_auth_all_closes_every_read_but_the_liveness_probe(store):
    c = _client(store, scope="all")
    for path in ("/jobs", "/cluster", "/metrics", "/"):
        assert c.get(path).status_code == 401, path
        assert c.get(path, headers=_bearer()).status_code == 200, path
    assert c.get("/healthz").status_code == 200


def test_a_route_added_later_is_guarded_by_its_method(store):
    api = create_app(store, FakeController(), auth=ApiAuth(TOKEN))

    @api.patch("/later/{thing}")
    def later_change(thing: str) -> dict:
        return {"changed": thing}

    @api.get("/later")
    def later_read() -> dict:
        return {}

    c = TestClient(api)
    assert c.patch("/later/x").status_code == 401
    assert c.patch("/later/x", headers=_bearer()).json() == {"changed": "x"}
    assert c.get("/later").status_code == 200
    # retry and delete came after the check was written: covered all the same
    job = c.post("/jobs", json=JOB, headers=_bearer()).json()["id"]
    store.update(job, status="failed", reason="boom")
    assert c.post(f"/jobs/{job}/retry").status_code == 401 and c.delete(f"/jobs/{job}").status_code == 401
    assert store.get(job).status == "failed"
    assert c.post(f"/jobs/{job}/retry", headers=_bearer()).status_code < 300
    assert store.get(job).status == "queued"


def test_no_token_means_no_check(store):
    c = TestClient(create_app(store, FakeController()))
    assert c.post("/jobs", json=JOB).status_code == 201


def test_where_the_token_comes_from(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(f"  {TOKEN}\n")
    token_file.chmod(0o600)
    assert resolve_token(token_file, env={"DLSCHED_TOKEN": "other"}) == TOKEN  # the file wins
    assert resolve_token(None, env={"DLSCHED_TOKEN": TOKEN}) == TOKEN
    assert resolve_token(None, env={}) is None
    with pytest.raises(ConfigError, match="DLSCHED_TOKEN is set but empty"):
        resolve_token(None, env={"DLSCHED_TOKEN": " "})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="token file .*empty: empty"):
        resolve_token(tmp_path / "empty")
    with pytest.raises(ConfigError, match="token file .*missing: no such file"):
        resolve_token(tmp_path / "missing")
    with pytest.raises(ValueError):
        ApiAuth("")
    assert TOKEN not in repr(ApiAuth(TOKEN))  # a log line or traceback never shows it


def test_the_service_config_chooses_the_scope(tmp_path, monkeypatch):
    monkeypatch.delenv("DLSCHED_TOKEN", raising=False)
    assert ServiceConfig().api_auth() is None
    with pytest.raises(ConfigError, match="auth: all needs a token"):
        ServiceConfig(auth="all").api_auth()
    monkeypatch.setenv("DLSCHED_TOKEN", TOKEN)
    assert ServiceConfig(auth="all").api_auth() == ApiAuth(TOKEN, "all")


def test_the_exposure_warning_names_the_risk():
    assert exposure_warning("127.0.0.1", None) == "" and exposure_warning("::1", None) == ""
    loud = exposure_warning("0.0.0.0", None)
    assert "with no token: anyone who can reach this port can submit and cancel jobs" in loud
    assert "--token-file or DLSCHED_TOKEN" in loud
    assert "reads are open" in exposure_warning("10.0.0.5", ApiAuth(TOKEN))
    assert "TLS" in exposure_warning("10.0.0.5", ApiAuth(TOKEN, "all"))


def test_the_cli_sends_the_token_from_the_env_or_a_file(store, tmp_path):
    job_file = tmp_path / "job.yaml"
    job_file.write_text("model: mlp\nsteps: 5\n")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    runner = CliRunner()
    with app_server(create_app(store, FakeController(), auth=ApiAuth(TOKEN))) as url:
        r = runner.invoke(cli_app, ["submit", str(job_file), "--url", url], env={"DLSCHED_TOKEN": None})
        assert r.exit_code == 2 and "Traceback" not in r.output
        assert "this service needs a token" in r.output and "set DLSCHED_TOKEN or pass --token-file" in r.output
        r = runner.invoke(cli_app, ["submit", str(job_file), "--url", url], env={"DLSCHED_TOKEN": "wrong"})
        assert r.exit_code == 2 and "wrong token" in r.output and "the token was refused" in r.output
        r = runner.invoke(cli_app, ["submit", str(job_file), "--url", url], env={"DLSCHED_TOKEN": TOKEN})
        assert r.exit_code == 0 and "submitted job-000001" in r.output, r.output
        r = runner.invoke(cli_app, ["cancel", "job-000001", "--url", url, "--token-file", str(token_file)],
                          env={"DLSCHED_TOKEN": None})
        assert r.exit_code == 0 and "cancel requested for job-000001" in r.output, r.output
        r = runner.invoke(cli_app, ["status", "--url", url], env={"DLSCHED_TOKEN": None})
        assert r.exit_code == 0 and "job-000001" in r.output, r.output  # reads need no token


def test_serve_refuses_a_token_it_cannot_use_in_one_line(tmp_path):
    runner = CliRunner()
    for args, env, problem in (
        (["--auth", "all"], {"DLSCHED_TOKEN": None}, "auth: all needs a token"),
        (["--token-file", str(tmp_path / "nope")], {}, "no such file"),
        (["--auth", "some"], {}, "auth"),
    ):
        r = runner.invoke(cli_app, ["serve", "--backend", "dry", "--port", "0", "--work-dir", str(tmp_path / "w"),
                                    *args], env=env)
        assert r.exit_code == 2 and r.output.count("error:") == 1 and problem in r.output, r.output
        assert not (tmp_path / "w").exists()  # refused before anything was made
