"""Checkpoints that survive one bad file: the last two good ones are kept, each verified on load
(checksum in its name, torch.load without pickled code, the expected keys); a bad newest one
falls back to the previous one, and the runtime records it as an event with the steps lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dlsched.live.controller import Controller
from dlsched.live.backends.local import LocalBackend
from dlsched.live.backends.nodes import LocalNodes, VirtualNode
from dlsched.live.controller.retry import RetryConfig
from dlsched.live.spec import TrainJob
from dlsched.live.store import Store
from dlsched.policies.registry import make_policy
from dlsched.trainer import checkpoint
from dlsched.trainer.protocol import LEGACY_CHECKPOINT, list_checkpoints, parse_checkpoint_name
from tests.live_service import free_port

TIMEOUT = 90


def state(step: int) -> dict:
    return {"model": "mlp", "width": 8, "seed": 0, "step": step, "lr": 1e-3,
            "params": {"w": torch.full((4,), float(step))}, "opt": {}}


def corrupt(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "bitflip":  # silent bit rot in the tensor data: torch.load alone would accept it
        data[len(data) // 2] ^= 0x01
    elif how == "truncated":
        data = data[: len(data) // 2]
    elif how == "garbage":  # the case: a raw pickle error
        data = bytearray(b"\x00not a checkpoint" * 10)
    else:
        data = bytearray()
    path.write_bytes(bytes(data))


def test_only_the_two_newest_checkpoints_are_kept(tmp_path: Path) -> None:
    (tmp_path / LEGACY_CHECKPOINT).write_bytes(b"old")
    (tmp_path / ".checkpoint-000000001-0000000000000000.pt.tmp999999").write_bytes(b"killed writer")
    paths = [checkpoint.save(tmp_path, state(s)) for s in (10, 20, 30)]
    assert list_checkpoints(tmp_path) == [paths[2], paths[1]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths[1:])
    assert parse_checkpoint_name(paths[2].name)[0] == 30
    loaded = checkpoint.load(tmp_path)
    assert loaded.step == 30 and loaded.problems == [] and loaded.path == paths[2]


@pytest.mark.parametrize("how", ["bitflip", "truncated", "garbage", "empty"])
def test_a_bad_newest_checkpoint_falls_back_to_the_previous_one(tmp_path: Path, how: str) -> None:
    prev, newest = (checkpoint.save(tmp_path, state(s)) for s in (10, 20))
    corrupt(newest, how)
    loaded = checkpoint.load(tmp_path, quarantine=True)
    assert loaded.path == prev and loaded.step == 10 and torch.equal(loaded.state["params"]["w"], torch.full((4,), 10.0))
    assert len(loaded.problems) == 1 and loaded.problems[0].startswith(newest.name + ": ")
    assert "\n" not in loaded.problems[0]
    assert (tmp_path / (newest.name + ".bad")).exists() and list_checkpoints(tmp_path) == [prev]
    # the next save keeps the good previous one, not the bad file
    after = checkpoint.save(tmp_path, state(30))
    assert list_checkpoints(tmp_path) == [after, prev]


def test_both_bad_start_from_zero_saying_why(tmp_path: Path) -> None:
    prev, newest = (checkpoint.save(tmp_path, state(s)) for s in (10, 20))
    corrupt(newest, "garbage")
    corrupt(prev, "truncated")
    loaded = checkpoint.load(tmp_path)
    assert loaded.state is None and loaded.step == 0
    assert [p.split(":")[0] for p in loaded.problems] == [newest.name, prev.name]
    assert "checksum mismatch" in loaded.problems[0]


def test_a_checkpoint_that_would_run_pickled_code_is_refused(tmp_path: Path) -> None:
    """weights_only: a file in a job directory never executes code, even with a valid checksum."""
    import io

    buf = io.BytesIO()
    torch.save({**state(5), "format": 1, "evil": Path("/tmp")}, buf)
    path = tmp_path / checkpoint.checkpoint_name(5, checkpoint.digest(buf.getvalue()))
    path.write_bytes(buf.getvalue())
    loaded = checkpoint.load(tmp_path)
    assert loaded.state is None and "cannot be loaded" in loaded.problems[0]


def test_a_checkpoint_missing_keys_or_of_another_step_is_refused(tmp_path: Path) -> None:
    incomplete = {k: v for k, v in state(5).items() if k != "opt"}
    checkpoint.save(tmp_path, incomplete)
    assert "lacks opt" in checkpoint.load(tmp_path).problems[0]


# ---------------------------------------------------------------- a real trainer
def trainer(job_dir: Path, steps: int, run: str) -> subprocess.Popen:
    argv = ["--job-dir", str(job_dir), "--model", "mlp", "--steps", str(steps), "--seed", "1",
            "--checkpoint-every", "0.4", "--report-every", "0.2"]
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "DLSCHED_RUN_ID": run}
    return subprocess.Popen([sys.executable, "-m", "dlsched.trainer", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def records(job_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (job_dir / "progress.jsonl").read_text().splitlines()]


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
        return proc.returncode, out
    finally:
        if proc.poll() is None:  # only what this test started, by its handle
            proc.kill()
            proc.wait()


def wait_for_checkpoints(job_dir: Path, n: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + TIMEOUT
    while True:
        progress = job_dir / "progress.jsonl"
        recs = records(job_dir) if progress.exists() else []
        if sum(r["event"] == "checkpoint" for r in recs) >= n:
            return
        assert proc.poll() is None, "the trainer exited early"
        assert time.monotonic() < deadline, "no checkpoints"
        time.sleep(0.05)


def test_trainer_resumes_from_the_previous_checkpoint_when_the_newest_is_corrupt(tmp_path: Path) -> None:
    proc = trainer(tmp_path, 1_000_000, "first")
    try:
        wait_for_checkpoints(tmp_path, 2, proc)
        proc.send_signal(signal.SIGTERM)
    finally:
        assert finish(proc)[0] == 0
    saved = [r["step"] for r in records(tmp_path) if r["event"] == "checkpoint"]
    stop = next(r for r in records(tmp_path) if r["event"] == "stop")["step"]
    assert saved[-1] == stop and len(saved) >= 3  # periodic ones, then the stop's
    newest, prev = list_checkpoints(tmp_path)
    assert parse_checkpoint_name(prev.name)[0] == saved[-2]
    corrupt(newest, "bitflip")
    code, out = finish(trainer(tmp_path, stop + 30, "second"))
    assert code == 0, out
    resume = [r for r in records(tmp_path) if r["event"] == "resume"][-1]
    # steps lost: back to the last periodic checkpoint, i.e. at most one checkpoint interval
    assert resume["run"] == "second" and resume["step"] == saved[-2] and resume["checkpoint"] == prev.name
    assert resume["problems"][0].startswith(f"{newest.name}: checksum mismatch")
    assert "skipped bad checkpoint" in out
    assert records(tmp_path)[-1]["event"] == "done" and records(tmp_path)[-1]["step"] == stop + 30


def test_a_crashed_job_with_a_corrupt_checkpoint_resumes_from_the_previous_one_with_an_event(tmp_path: Path) -> None:
    """The issue's case at the runtime level: the trainer is killed, its newest checkpoint is
    garbage; the job resumes from the previous one (an event says so and how many steps were
    lost) instead of failing in a crash loop with a pickle traceback."""
    nodes = LocalNodes(nodes=[VirtualNode(name="a", gpus=1, cpus=1, mem_gb=4)])
    backend = LocalBackend(nodes=nodes, standby=0, log_dir=tmp_path / "standby")
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    ctl = Controller(store, backend, make_policy("fifo"), work_dir=tmp_path, tick=0.1,
                     retry=RetryConfig(backoff_initial=0.1, backoff_max=0.1))
    try:
        job = store.add(TrainJob(model="mlp", steps=1_000_000, checkpoint_every_s=0.4), now=time.time())
        job_dir = ctl.record.job_dir(job.id)

        def drive_until(cond) -> None:
            deadline = time.monotonic() + TIMEOUT
            while not cond():
                assert time.monotonic() < deadline
                ctl.step()
                time.sleep(0.1)

        drive_until(lambda: len(list_checkpoints(job_dir)) == 2 and store.get(job.id).steps_done > 0)
        newest, prev = list_checkpoints(job_dir)
        for pid in backend.pids(job.id):
            os.kill(pid, signal.SIGKILL)
        corrupt(newest, "garbage")
        drive_until(lambda: any(e.kind == "checkpoint-fallback" for e in store.events(job.id)))
        event = next(e for e in store.events(job.id) if e.kind == "checkpoint-fallback")
        prev_step = parse_checkpoint_name(prev.name)[0]
        assert event.data["checkpoint"] == prev.name and event.data["step"] == prev_step
        assert f"resumed from {prev.name} at step {prev_step}" in event.message and "steps lost" in event.message
        assert event.data["lost_steps"] >= parse_checkpoint_name(newest.name)[0] - prev_step
        drive_until(lambda: store.get(job.id).steps_done > prev_step)
        assert store.get(job.id).status == "running"
    finally:
        ctl.shutdown(stop_jobs=True)
        backend.close()
        store.close()

