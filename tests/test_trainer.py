"""The trainer contract: runs to completion at world 1/2 (ddp) and with parameter servers,
SIGTERM + resume at another world size loses no step, standby interpreters, bad arguments."""

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

from dlsched.trainer import checkpoint
from dlsched.trainer.protocol import ProgressReader, is_done
from tests.live_service import free_port

TIMEOUT = 90


def trainer_argv(job_dir: Path, model: str = "mlp", mode: str = "ddp", steps: int = 60, num_ps: int = 0,
                 batch: int = 32, extra: tuple[str, ...] = ()) -> list[str]:
    return ["--job-dir", str(job_dir), "--model", model, "--mode", mode, "--steps", str(steps),
            "--batch-size", str(batch), "--seed", "3", "--num-ps", str(num_ps), "--checkpoint-every", "60",
            "--report-every", "0.2", *extra]


def env_for(rank: int, world: int, port: int, run: str) -> dict[str, str]:
    return {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port), "DLSCHED_RUN_ID": run, "DLSCHED_COMM_TIMEOUT": "30"}


def launch(argv: list[str], world: int, run: str) -> list[subprocess.Popen]:
    port = free_port()
    return [subprocess.Popen([sys.executable, "-m", "dlsched.trainer", *argv], env=env_for(r, world, port, run),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for r in range(world)]


def wait_all(procs: list[subprocess.Popen]) -> list[int]:
    try:
        return [p.wait(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:  # only what this test started, by its handle
            if p.poll() is None:
                p.kill()
                p.wait()


def newest(job_dir: Path) -> dict:
    """The checkpoint a run would resume from."""
    loaded = checkpoint.load(job_dir)
    assert loaded.state is not None and not loaded.problems, loaded.problems
    return loaded.state


def records(job_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (job_dir / "progress.jsonl").read_text().splitlines()]


def losses(job_dir: Path) -> list[float]:
    return [r["loss"] for r in records(job_dir) if "loss" in r]


def wait_for_step(job_dir: Path, step: int, procs: list[subprocess.Popen]) -> None:
    reader = ProgressReader(job_dir)
    deadline = time.monotonic() + TIMEOUT
    while reader.step < step:
        reader.poll()
        assert all(p.poll() is None for p in procs), "a rank exited early"
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.05)


def test_ddp_one_and_two_workers_complete_and_agree(tmp_path: Path) -> None:
    """The global batch is fixed, so 1 and 2 workers train (nearly) the same parameters."""
    for world in (1, 2):
        job = tmp_path / str(world)
        assert wait_all(launch(trainer_argv(job, steps=80), world, "r1")) == [0] * world
        assert is_done(job)
        recs = records(job)
        assert recs[0] == {**recs[0], "event": "resume", "step": 0, "checkpoint": None, "problems": [], "run": "r1"}
        assert recs[1]["event"] == "start" and recs[1]["resumed_from"] == 0 and recs[1]["workers"] == world
        assert recs[-1]["event"] == "done" and recs[-1]["step"] == 80 and recs[-1]["run"] == "r1"
        assert json.loads((job / "done.json").read_text())["step"] == 80
        ls = losses(job)
        assert ls[-1] < 0.5 * ls[0]
    pa, pb = (newest(tmp_path / w)["params"] for w in "12")
    for name in pa:
        assert torch.allclose(pa[name], pb[name], atol=1e-4), name


def sigterm_and_resume(tmp_path: Path, mode: str, before: int, after: int, num_ps: int, model: str = "mlp",
                       steps: int = 400) -> Path:
    job = tmp_path / "job"
    procs = launch(trainer_argv(job, model=model, mode=mode, steps=steps, num_ps=num_ps), before + num_ps, "first")
    wait_for_step(job, 20, procs)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    assert wait_all(procs) == [0] * len(procs)
    recs = records(job)
    stop = [r for r in recs if r["event"] == "stop"]
    assert len(stop) == 1 and 20 <= stop[0]["step"] < steps
    assert newest(job)["step"] == stop[0]["step"]
    assert not is_done(job)
    assert wait_all(launch(trainer_argv(job, model=model, mode=mode, steps=steps, num_ps=num_ps),
                           after + num_ps, "second")) == [0] * (after + num_ps)
    recs = records(job)
    starts = [r for r in recs if r["event"] == "start"]
    assert [s["run"] for s in starts] == ["first", "second"]
    assert starts[1]["resumed_from"] == stop[0]["step"] and starts[1]["workers"] == after
    assert recs[-1]["event"] == "done" and recs[-1]["step"] == steps
    assert json.loads((job / "done.json").read_text())["step"] == steps
    return job


def test_ddp_sigterm_resume_at_other_size_is_lossless(tmp_path: Path) -> None:
    job = sigterm_and_resume(tmp_path, "ddp", before=2, after=1, num_ps=0, steps=800)
    ls = losses(job)
    assert ls[-1] < 0.5 * ls[0]


def test_ddp_resume_same_size_reproduces_uninterrupted_run(tmp_path: Path) -> None:
    job = sigterm_and_resume(tmp_path, "ddp", before=1, after=1, num_ps=0, steps=800)
    straight = tmp_path / "straight"
    assert wait_all(launch(trainer_argv(straight, steps=800), 1, "s")) == [0]
    pa = newest(job)["params"]
    pb = newest(straight)["params"]
    for name in pa:  # same data, restored Adam state: only float reordering could differ
        assert torch.allclose(pa[name], pb[name], atol=1e-5), name


def test_ps_completes_learns_and_matches_ddp(tmp_path: Path) -> None:
    """2 PS + 2 workers: synchronous PS is the same SGD as all-reduce on one worker."""
    a, b = tmp_path / "ddp", tmp_path / "ps"
    assert wait_all(launch(trainer_argv(a, steps=40), 1, "a")) == [0]
    assert wait_all(launch(trainer_argv(b, mode="ps", num_ps=2, steps=40), 4, "ps")) == [0] * 4
    assert is_done(b)
    recs = records(b)
    assert recs[0]["event"] == "resume" and recs[1]["event"] == "start" and recs[1]["ps"] == 2 and recs[1]["workers"] == 2
    assert recs[-1]["event"] == "done" and recs[-1]["step"] == 40
    ls = losses(b)
    assert ls[-1] < 0.5 * ls[0]
    pa, pb = (newest(d)["params"] for d in (a, b))
    for name in pa:
        assert torch.allclose(pa[name], pb[name], atol=1e-4), name


def test_ps_sigterm_resume_with_other_workers_and_servers(tmp_path: Path) -> None:
    """1 PS + 1 worker, SIGTERM, then 2 PS + 2 workers: the checkpoint is re-sharded."""
    job = tmp_path / "job"
    procs = launch(trainer_argv(job, mode="ps", steps=600, num_ps=1), 2, "first")
    wait_for_step(job, 20, procs)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    assert wait_all(procs) == [0, 0]
    stop = [r for r in records(job) if r["event"] == "stop"]
    assert len(stop) == 1 and 20 <= stop[0]["step"] < 600
    assert wait_all(launch(trainer_argv(job, mode="ps", steps=600, num_ps=2), 4, "second")) == [0] * 4
    recs = records(job)
    starts = [r for r in recs if r["event"] == "start"]
    assert [(s["run"], s["ps"], s["workers"]) for s in starts] == [("first", 1, 1), ("second", 2, 2)]
    assert starts[1]["resumed_from"] == stop[0]["step"]
    assert recs[-1]["event"] == "done" and recs[-1]["step"] == 600 and is_done(job)
    ls = losses(job)
    assert ls[-1] < 0.5 * ls[0]


def test_killed_rank_does_not_hang_the_others(tmp_path: Path) -> None:
    port = free_port()
    argv = trainer_argv(tmp_path, steps=100000)
    procs = [subprocess.Popen([sys.executable, "-m", "dlsched.trainer", *argv],
                              env={**env_for(r, 2, port, "k"), "DLSCHED_COMM_TIMEOUT": "10"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(2)]
    wait_for_step(tmp_path, 5, procs)
    procs[1].kill()
    codes = wait_all(procs)
    assert codes[0] != 0


def test_standby_runs_the_request(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "dlsched.trainer", "--standby"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        req = {"argv": trainer_argv(tmp_path, model="transformer", steps=10),
               "env": {"RANK": "0", "WORLD_SIZE": "1", "DLSCHED_RUN_ID": "warm"}}
        proc.stdin.write(json.dumps(req) + "\n")
        proc.stdin.flush()
        assert proc.wait(timeout=TIMEOUT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert is_done(tmp_path)
    assert records(tmp_path)[0]["run"] == "warm"


@pytest.mark.parametrize("argv", [
    ["--model", "mlp", "--steps", "10"],  # no --job-dir
    ["--job-dir", "X", "--model", "resnet", "--steps", "10"],
    ["--job-dir", "X", "--model", "mlp", "--steps", "0"],
    ["--job-dir", "X", "--model", "mlp", "--steps", "10", "--mode", "ps", "--num-ps", "0"],
    ["--job-dir", "X", "--model", "mlp", "--steps", "10", "--checkpoint-every", "-1"],
])
def test_bad_arguments_exit_2(tmp_path: Path, argv: list[str]) -> None:
    argv = [str(tmp_path / a) if a == "X" else a for a in argv]
    out = subprocess.run([sys.executable, "-m", "dlsched.trainer", *argv], capture_output=True, text=True,
                         timeout=TIMEOUT, env={**os.environ, "RANK": "0", "WORLD_SIZE": "1"})
    assert out.returncode == 2
    assert "dlsched.trainer: error:" in out.stderr


def test_checkpoint_of_another_model_is_refused(tmp_path: Path) -> None:
    checkpoint.save(tmp_path, {"model": "mlp", "width": 128, "seed": 3, "step": 5, "params": {}, "opt": {}})
    out = subprocess.run([sys.executable, "-m", "dlsched.trainer", *trainer_argv(tmp_path, model="cnn", steps=10)],
                         capture_output=True, text=True, timeout=TIMEOUT, env=env_for(0, 1, free_port(), "b"))
    assert out.returncode != 0 and "checkpoint is for" in out.stderr
    assert not is_done(tmp_path)
