"""LocalBackend: trainer processes on this machine, on virtual nodes.

Most tests run a tiny fake trainer (written into tmp_path) that obeys the trainer contract
without torch: progress.jsonl, a JSON step counter as checkpoint, SIGTERM -> checkpoint + "stop" +
exit 0, done.json at the end, and `--standby` (print `ready`, read one JSON line). Each rank also
records the environment it was given. When the real trainer is importable, one more test trains
the mlp with it through a 2 -> 1 worker resize. Every test checks by PID (with create time) that
the processes it started are gone.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from dlsched.core.allocation import Allocation
from dlsched.core.errors import ConfigError
from dlsched.live.backends.base import Launch
from dlsched.live.backends.local import LocalBackend
from dlsched.live.backends.nodes import LocalNodes, VirtualNode, default_local_nodes, load_nodes
from dlsched.trainer.protocol import ProgressReader, is_done
from dlsched.live.spec import TrainJob

FAKE_TRAINER = textwrap.dedent('''
    """A stand-in for `python -m dlsched.trainer` that obeys its contract without torch."""
    import argparse, json, os, signal, sys, time
    STANDBY = __STANDBY__
    p = argparse.ArgumentParser()
    for a in ("--job-dir", "--model", "--mode", "--lr"):
        p.add_argument(a)
    for a in ("--steps", "--batch-size", "--seed", "--num-ps"):
        p.add_argument(a, type=int)
    p.add_argument("--checkpoint-every", type=float)
    p.add_argument("--report-every", type=float, default=0.1)
    if STANDBY:
        p.add_argument("--standby", action="store_true")
    args = p.parse_args()
    if STANDBY and args.standby:
        time.sleep(0.2)  # "imports"
        print("ready", flush=True)
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        msg = json.loads(line)
        os.environ.update(msg["env"])
        args = p.parse_args(msg["argv"])
        args.warm = True
    else:
        args.warm = False
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    d = args.job_dir
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    run = os.environ["DLSCHED_RUN_ID"]
    os.makedirs(os.path.join(d, "ranks"), exist_ok=True)
    with open(os.path.join(d, "ranks", f"{run}-{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": world, "node": os.environ.get("DLSCHED_NODE"),
                   "role": os.environ.get("DLSCHED_ROLE"), "pid": os.getpid(), "warm": args.warm,
                   "master": [os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]]}, f)
    print(f"rank {rank} of {world} up", flush=True)
    step_s = float(os.environ.get("FAKE_STEP_S", "0.01"))
    done_path = os.path.join(d, "done.json")
    if rank != args.num_ps:  # not the reporting rank: wait for the end or a SIGTERM
        while not stop and not os.path.exists(done_path):
            time.sleep(0.02)
        sys.exit(0)

    def log(event, step, **kw):
        rec = dict(time=time.time(), event=event, step=step, loss=1.0 / (1 + step), run=run,
                   workers=world - args.num_ps, ps=args.num_ps, **kw)
        with open(os.path.join(d, "progress.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\\n")

    def checkpoint(step):
        tmp = os.path.join(d, "checkpoint.pt.tmp")
        with open(tmp, "w") as f:
            json.dump({"step": step}, f)
        os.replace(tmp, os.path.join(d, "checkpoint.pt"))

    try:
        with open(os.path.join(d, "checkpoint.pt")) as f:
            step = json.load(f)["step"]
    except FileNotFoundError:
        step = 0
    last = time.time()
    first = True
    while step < args.steps:
        if stop:
            checkpoint(step)
            log("stop", step)
            sys.exit(0)
        time.sleep(step_s)
        step += 1
        if first:
            log("start", step)
            first = False
        elif time.time() - last >= args.report_every:
            log("progress", step, steps_per_s=1.0 / step_s)
            last = time.time()
    checkpoint(step)
    log("done", step)
    tmp = done_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"steps": step}, f)
    os.replace(tmp, done_path)
    sys.exit(0)
''')

NODES = LocalNodes(nodes=[VirtualNode(name="a", gpus=2, cpus=2, mem_gb=4),
                          VirtualNode(name="b", gpus=2, cpus=2, mem_gb=4, rack=1)])


@pytest.fixture
def fake(tmp_path: Path) -> list[str]:
    path = tmp_path / "fake_trainer.py"
    path.write_text(FAKE_TRAINER.replace("__STANDBY__", "True"))
    return [sys.executable, str(path)]


@pytest.fixture
def fake_no_standby(tmp_path: Path) -> list[str]:
    path = tmp_path / "fake_trainer_cold.py"
    path.write_text(FAKE_TRAINER.replace("__STANDBY__", "False"))
    return [sys.executable, str(path)]


@pytest.fixture
def backends():
    """Backends made by a test; closed at the end even when the test fails."""
    made: list[LocalBackend] = []
    yield made
    for b in made:
        b.close()


def make(backends: list, cmd: list[str], **kw) -> LocalBackend:
    b = LocalBackend(nodes=NODES, trainer_cmd=cmd, log_dir=kw.pop("log_dir", None), **kw)
    backends.append(b)
    return b


def launch(tmp_path: Path, job_id: str, placement: dict, attempt: int = 0, **job) -> Launch:
    job.setdefault("model", "mlp")
    job.setdefault("steps", 50)
    return Launch(job_id, TrainJob(**job), Allocation.of(placement), tmp_path / job_id, attempt)


def wait_for(backend: LocalBackend, job_id: str, cond, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        o = backend.observe()[job_id]
        if cond(o):
            return o
        time.sleep(0.02)
    raise AssertionError(f"timed out; last observation {o}")


def alive(pid: int, create_time: float) -> bool:
    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - create_time) < 0.05 and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def recorded(job_dir: Path) -> list[tuple[int, float]]:
    info = json.loads((job_dir / "pids.json").read_text())
    return [(r["pid"], r["create_time"]) for r in info["ranks"]]


def rank_records(job_dir: Path, run: str) -> list[dict]:
    return sorted((json.loads(p.read_text()) for p in (job_dir / "ranks").glob(f"{run}-*.json")),
                  key=lambda r: r["rank"])


# ------------------------------------------------------------------------------------ nodes
def test_default_nodes_describe_this_machine():
    nodes = default_local_nodes()
    cl = nodes.to_cluster()
    assert cl.num_nodes == 2 and cl.total_gpus == 4
    assert set(cl.gpu_type.tolist()) == {"cpu-slot"}
    assert cl.total[1] == pytest.approx(psutil.cpu_count(), rel=0.01)


def test_load_nodes_yaml(tmp_path: Path):
    p = tmp_path / "nodes.yaml"
    p.write_text("name: lab\nnodes:\n  - {name: x, gpus: 1, cpus: 2, mem_gb: 3}\n"
                 "  - {name: y, gpus: 4, cpus: 8, mem_gb: 16, rack: 2}\n")
    cl = load_nodes(p).to_cluster()
    assert cl.node_names == ("x", "y")
    assert cl.capacity.tolist() == [[1, 2, 3], [4, 8, 16]]
    assert cl.rack.tolist() == [0, 2]
    p.write_text("- {name: only, gpus: 1, cpus: 1, mem_gb: 1}\n")  # a bare list works too
    assert load_nodes(p).names == ("only",)


@pytest.mark.parametrize("text, needle", [
    ("nodes: []", "nodes"),
    ("nodes:\n  - {name: x, gpus: 1, cpus: 1, mem_gb: 1}\n  - {name: x, gpus: 1, cpus: 1, mem_gb: 1}", "duplicate"),
    ("nodes:\n  - {name: x, gpus: -1, cpus: 1, mem_gb: 1}", "nodes.0.gpus"),
    ("nodes:\n  - {name: x, gpus: 1, cpus: 1, mem_gb: 1, gpu: 2}", "nodes.0.gpu"),
    ("nodes:\n  - {name: 'bad name', gpus: 1, cpus: 1, mem_gb: 1}", "nodes.0.name"),
    ("nodes: [unclosed", "not valid YAML"),
    ("42", "expected a mapping"),
])
def test_bad_nodes_file(tmp_path: Path, text: str, needle: str):
    p = tmp_path / "nodes.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=needle) as e:
        load_nodes(p)
    assert str(p) in str(e.value)


def test_missing_nodes_file(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read"):
        LocalBackend(nodes=tmp_path / "nope.yaml")


# ------------------------------------------------------------------------------------ runs
def test_start_observe_done_ps_rank_order(tmp_path, fake_no_standby, backends):
    b = make(backends, fake_no_standby)
    ln = launch(tmp_path, "j1", {0: (1, 1), 1: (1, 0)}, mode="ps", ps=1, steps=40)
    launched = time.time()
    b.start(ln)
    o = wait_for(b, "j1", lambda o: o.state != "running")
    assert o.state == "done", o.message
    assert o.step == 40 and is_done(ln.job_dir) and o.done is not None and o.done["steps"] == 40
    assert o.samples and o.samples[-1][0] == 40
    assert o.first_step_at is not None and o.first_step_at >= launched
    info = json.loads((ln.job_dir / "pids.json").read_text())
    ranks = rank_records(ln.job_dir, info["run"])
    # parameter servers first, then workers in node order; one rendezvous on loopback
    assert [(r["rank"], r["role"], r["node"]) for r in ranks] == [(0, "ps", "a"), (1, "worker", "a"), (2, "worker", "b")]
    assert {r["world"] for r in ranks} == {3}
    assert {tuple(r["master"]) for r in ranks} == {("127.0.0.1", str(info["master_port"]))}
    assert all((ln.job_dir / "logs" / f"run0-rank{r}.log").read_text().strip().endswith(f"rank {r} of 3 up")
               for r in range(3))
    assert not any(alive(*pc) for pc in recorded(ln.job_dir))


def test_stop_then_resume_at_another_size(tmp_path, fake_no_standby, backends):
    b = make(backends, fake_no_standby)
    ln = launch(tmp_path, "j2", {0: (1, 0), 1: (1, 0)}, steps=150)
    b.start(ln)
    wait_for(b, "j2", lambda o: o.step >= 20)
    first_pids = recorded(ln.job_dir)
    asked = time.time()
    b.stop("j2", timeout=10)
    assert not any(alive(*pc) for pc in first_pids)
    o = b.observe()["j2"]
    assert o.state == "stopped" and o.done is None
    ckpt = json.loads((ln.job_dir / "checkpoint.pt").read_text())["step"]
    assert 20 <= ckpt < 150
    b.start(launch(tmp_path, "j2", {1: (1, 0)}, attempt=1, steps=150))
    o = wait_for(b, "j2", lambda o: o.state != "running")
    assert o.state == "done", o.message
    reader = ProgressReader(ln.job_dir)
    reader.poll()
    assert [s["step"] for s in reader.starts] == [1, ckpt + 1]  # resumed, nothing redone
    assert o.first_step_at == reader.starts[-1]["time"] > asked
    assert (ln.job_dir / "logs" / "run1-rank0.log").is_file()
    # steps of both runs are in the samples
    assert min(s for s, _ in o.samples) < ckpt < max(s for s, _ in o.samples)


def test_killed_rank_fails_the_run_and_kills_the_rest(tmp_path, fake_no_standby, backends):
    b = make(backends, fake_no_standby)
    ln = launch(tmp_path, "j3", {0: (2, 0), 1: (1, 0)}, steps=100_000)
    b.start(ln)
    wait_for(b, "j3", lambda o: o.first_step_at is not None)
    pcs = recorded(ln.job_dir)
    log2 = ln.job_dir / "logs" / "run0-rank2.log"
    deadline = time.monotonic() + 10
    while "up" not in log2.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(pcs[2][0], signal.SIGKILL)  # a non-reporting worker dies
    o = wait_for(b, "j3", lambda o: o.state != "running")
    assert o.state == "failed"
    assert "rank 2" in o.message and "SIGKILL" in o.message and "rank 2 of 3 up" in o.message
    assert not any(alive(*pc) for pc in pcs)


def test_crash_exit_code_reported(tmp_path, fake_no_standby, backends):
    b = make(backends, fake_no_standby)
    ln = launch(tmp_path, "j4", {0: (1, 0)}, steps=10)
    (ln.job_dir).mkdir(parents=True)
    (ln.job_dir / "checkpoint.pt").write_text("not json")  # the trainer dies reading it
    b.start(ln)
    o = wait_for(b, "j4", lambda o: o.state != "running")
    assert o.state == "failed" and "exited with code 1" in o.message and "JSONDecodeError" in o.message


def test_adopt_from_a_fresh_backend(tmp_path, fake_no_standby, backends):
    first = make(backends, fake_no_standby)
    ln = launch(tmp_path, "j5", {0: (1, 0), 1: (1, 0)}, steps=120)
    assert not first.adopt(ln)  # nothing recorded yet
    first.start(ln)
    wait_for(first, "j5", lambda o: o.first_step_at is not None)
    second = make(backends, fake_no_standby)
    assert second.adopt(ln)
    assert sorted(second.pids("j5")) == sorted(first.pids("j5"))
    o = wait_for(second, "j5", lambda o: o.state != "running")
    assert o.state == "done", o.message
    assert o.samples[0][0] == 1  # the whole log was read
    assert not make(backends, fake_no_standby).adopt(ln)  # finished: nothing to adopt


def test_adopted_run_can_be_stopped(tmp_path, fake_no_standby, backends):
    first = make(backends, fake_no_standby)
    ln = launch(tmp_path, "j6", {0: (1, 0), 1: (1, 0)}, steps=100_000)
    first.start(ln)
    wait_for(first, "j6", lambda o: o.first_step_at is not None)
    second = make(backends, fake_no_standby)
    assert second.adopt(ln)
    second.stop("j6", timeout=10)
    assert second.observe()["j6"].state == "stopped"
    assert not any(alive(*pc) for pc in recorded(ln.job_dir))
    assert json.loads((ln.job_dir / "checkpoint.pt").read_text())["step"] >= 1


def test_close_leaves_no_process(tmp_path, fake, backends):
    b = make(backends, fake, standby=2)
    assert b.pool is not None and b.pool.wait_ready(2, timeout=20)
    standby = [w.proc.pid for w in b.pool._pool]
    lns = [launch(tmp_path, f"c{i}", {i: (2, 0)}, steps=100_000) for i in range(2)]
    for ln in lns:
        b.start(ln)
    for ln in lns:
        wait_for(b, ln.job_id, lambda o: o.first_step_at is not None)
    pcs = [pc for ln in lns for pc in recorded(ln.job_dir)]
    b.close()
    assert not any(alive(*pc) for pc in pcs)
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in standby)
    for ln in lns:  # stopped cleanly: each checkpointed
        assert json.loads((ln.job_dir / "checkpoint.pt").read_text())["step"] >= 1


def test_standby_pool_hands_off_warm_interpreters(tmp_path, fake, backends):
    b = make(backends, fake, standby=2, log_dir=tmp_path / "pool")
    assert b.pool.wait_ready(2, timeout=20) and b.pool.supported
    ln = launch(tmp_path, "w1", {0: (1, 0), 1: (1, 0)}, steps=30)
    b.start(ln)
    assert [p["warm"] for p in b.placements("w1")] == [True, True]
    o = wait_for(b, "w1", lambda o: o.state != "running")
    assert o.state == "done", o.message
    info = json.loads((ln.job_dir / "pids.json").read_text())
    ranks = rank_records(ln.job_dir, info["run"])
    assert [r["warm"] for r in ranks] == [True, True]  # the trainer really ran in the standby
    assert [r["node"] for r in ranks] == ["a", "b"]
    log0 = (ln.job_dir / "logs" / "run0-rank0.log").read_text()  # the log moved into the job dir
    assert log0.startswith("ready") and "rank 0 of 2 up" in log0
    assert b.pool.wait_ready(2, timeout=20)  # refilled


def test_trainer_without_standby_falls_back_to_cold_start(tmp_path, fake_no_standby, backends):
    b = make(backends, fake_no_standby, standby=1)
    deadline = time.monotonic() + 20
    while b.pool.supported is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b.pool.supported is False
    ln = launch(tmp_path, "cold", {0: (1, 0)}, steps=10)
    b.start(ln)
    assert [p["warm"] for p in b.placements("cold")] == [False]
    assert wait_for(b, "cold", lambda o: o.state != "running").state == "done"


def test_bad_launches(tmp_path, fake_no_standby, backends):
    b = make(backends, fake_no_standby)
    with pytest.raises(ConfigError, match="node 5"):
        b.start(launch(tmp_path, "x", {5: (1, 0)}))
    with pytest.raises(ConfigError, match="ddp"):
        b.start(launch(tmp_path, "x", {0: (1, 1)}))
    with pytest.raises(ConfigError, match="parameter server"):
        b.start(launch(tmp_path, "x", {0: (1, 0)}, mode="ps"))
    assert b.observe() == {}
    b.start(ln := launch(tmp_path, "y", {0: (1, 0)}, steps=100_000))
    with pytest.raises(RuntimeError, match="still running"):
        b.start(ln)
    b.stop("y", timeout=10)
    b.stop("unknown")  # no-op


# ------------------------------------------------------------------------------------ real trainer
def _real_trainer_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("dlsched.trainer") is not None


@pytest.mark.skipif(not _real_trainer_available(), reason="dlsched.trainer not written yet")
@pytest.mark.parametrize("mode", ["ddp", "ps"])
def test_real_trainer_resize_2_to_1(tmp_path, backends, mode):
    """The mlp trains at 2 workers, is stopped (checkpoint), resumes at 1 worker and finishes."""
    b = make(backends, None, standby=1 if mode == "ddp" else 0)
    ps = {"mode": mode, "ps": 1} if mode == "ps" else {}
    total = 3000 if mode == "ddp" else 400  # a few seconds at 1 worker (ps steps are RPC round trips)
    job = dict(steps=total, batch_size=16, checkpoint_every_s=60, **ps)
    p = 1 if mode == "ps" else 0
    ln = launch(tmp_path, "real", {0: (1, p), 1: (1, 0)}, **job)
    b.start(ln)
    o = wait_for(b, "real", lambda o: o.state != "running" or o.first_step_at is not None, timeout=120)
    assert o.state == "running", o.message
    asked = time.time()
    b.stop("real", timeout=30)
    assert b.observe()["real"].state == "stopped"
    first = ProgressReader(ln.job_dir)
    first.poll()
    stopped_at = first.last["step"]
    assert first.last["event"] == "stop" and 1 <= stopped_at < total
    b.start(launch(tmp_path, "real", {1: (1, p)}, attempt=1, **job))
    o = wait_for(b, "real", lambda o: o.state != "running", timeout=180)
    assert o.state == "done", o.message
    assert is_done(ln.job_dir) and o.step == total
    reader = ProgressReader(ln.job_dir)
    reader.poll()
    assert [(s["step"], s["workers"], s["ps"]) for s in reader.starts] == [(1, 2, p), (stopped_at + 1, 1, p)]
    assert o.first_step_at == reader.starts[1]["time"] > asked
    assert not any(alive(*pc) for pc in recorded(ln.job_dir))
