"""End to end on the local backend: real PyTorch jobs submitted through the REST API of a real
`dlsched serve` process, scheduled, resized while running, killed and recovered."""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest

from tests.databases import db_url  # noqa: F401 - the fixture: SQLite, and PostgreSQL when configured
from tests.live_service import Service, all_ended, progress_records

NODES = [{"name": "n0", "gpus": 2, "cpus": 4, "mem_gb": 8}]
JOB = {"model": "mlp", "batch_size": 32, "workers": 1, "min_workers": 1, "max_workers": 2, "checkpoint_every_s": 2}


@pytest.fixture
def service(tmp_path):
    services: list[Service] = []

    def make(policy: str, **extra) -> Service:
        s = Service(tmp_path / f"svc{len(services)}", policy, NODES, **extra)
        services.append(s)
        return s

    yield make
    for s in services:
        s.stop()


def _check_finished(svc: Service, jobs: list[dict], expected: dict[str, int]) -> None:
    for j in jobs:
        assert j["status"] == "done", j
        assert j["steps_done"] == expected[j["id"]]
        recs = progress_records(svc.job_dir(j["id"]))
        losses = [r["loss"] for r in recs if r.get("loss") is not None]
        assert losses[-1] < losses[0], f"{j['id']}: loss did not go down ({losses[0]} -> {losses[-1]})"
        assert sum(r.get("event") == "done" for r in recs) == 1  # trained to completion exactly once


@pytest.mark.parametrize("policy", ["fifo", pytest.param("drf", marks=pytest.mark.long)])
def test_jobs_submitted_through_the_api_run_to_completion(service, policy):
    svc = service(policy).start()
    steps = {}
    n_first = 1500 if policy == "drf" else 300  # DRF's must still run when it is shrunk for the others
    first = svc.submit(name="a", steps=n_first, seed=1, **JOB)
    steps[first["id"]] = n_first
    if policy == "drf":  # the first job fills the node, then must shrink for the next ones
        svc.wait(lambda js: any(j["workers"] == 2 for j in js), 60, "the first job to run on both slots")
    # the small transformer trains ~20 steps/s (its loss halves within ~20 steps): 100 steps show it learns
    for i, (model, n) in enumerate((("cnn", 150), ("transformer", 100))):
        job = {**JOB, "model": model}
        steps[svc.submit(name=f"b{i}", steps=n, seed=i, **job)["id"]] = n
    jobs = svc.wait(all_ended, 240, "all jobs to end")
    _check_finished(svc, jobs, steps)
    if policy == "drf":
        kinds = [e["kind"] for e in svc.events(first["id"])]
        assert "resized" in kinds, kinds  # resized while running, and still finished every step
    else:  # FIFO at the requested size: one worker each, never resized
        assert all("resized" not in [e["kind"] for e in svc.events(j["id"])] for j in jobs)


@pytest.mark.long
def test_a_killed_worker_resumes_from_its_checkpoint(service):
    svc = service("fifo").start()
    # 1200 steps: the kill comes past step 300 and a first checkpoint, leaving ~900 steps (10 s unloaded,
    # 30 s under the suite's load) for the kill to land while the job still runs
    job = svc.submit(name="k", steps=1200, seed=3, **{**JOB, "workers": 2})
    jd = svc.job_dir(job["id"])
    svc.wait(lambda js: js[0]["steps_done"] > 300 and _checkpointed(jd), 90, "progress past the first checkpoint")
    pids = json.loads((jd / "pids.json").read_text())
    victim = _a_worker_pid(pids)
    os.kill(victim, signal.SIGKILL)
    jobs = svc.wait(all_ended, 240, "the job to end")
    _check_finished(svc, jobs, {job["id"]: 1200})
    kinds = [e["kind"] for e in svc.events(job["id"])]
    assert "failed-run" in kinds and kinds[-1] == "done"
    starts = [r for r in progress_records(jd) if r.get("event") == "start"]
    assert starts[-1]["step"] > 0  # the rerun resumed from a checkpoint, not from step 0


@pytest.mark.long
def test_killing_the_service_loses_no_job_and_runs_none_twice(service, db_url):
    on_postgres = {"db_url": db_url} if db_url.startswith("postgresql") else {}  # SQLite: the work dir's default
    svc = service("fifo", stop_jobs_on_exit=True, **on_postgres)
    svc.start()
    ids = {svc.submit(name=f"s{i}", steps=s, seed=i, **JOB)["id"]: s for i, s in enumerate((2500, 400, 400))}
    svc.wait(lambda js: any(j["steps_done"] > 100 for j in js), 90, "some progress")
    svc.kill()  # SIGKILL: no cleanup at all
    time.sleep(1.0)
    svc.start()
    jobs = svc.wait(all_ended, 300, "all jobs to end after the restart")
    assert {j["id"] for j in jobs} == set(ids)
    _check_finished(svc, jobs, ids)
    kinds = {j["id"]: [e["kind"] for e in svc.events(j["id"])] for j in jobs}
    for k in kinds.values():
        assert k.count("done") == 1
    # the job running at the crash was taken back: re-attached, or resumed from its checkpoint
    assert any("adopted" in k or "recovered" in k for k in kinds.values()), kinds


def _checkpointed(job_dir) -> bool:
    """The job has written a periodic checkpoint (so a rerun has something to resume from)."""
    return (job_dir / "progress.jsonl").exists() and any(r.get("event") == "checkpoint"
                                                         for r in progress_records(job_dir))


def _a_worker_pid(pids: dict) -> int:
    """A live trainer process of the job (not rank 0 when there is a choice)."""
    from tests.live_service import _pids

    alive = [p for p in _pids(pids) if psutil.pid_exists(p)]
    assert alive, pids
    return alive[-1]
