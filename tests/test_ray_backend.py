"""RayBackend on a local multi-node Ray cluster (three raylets on 127.0.0.1, labelled a, b, c).

The jobs run a tiny fake trainer that obeys the trainer contract (progress.jsonl, a JSON step
counter as checkpoint, SIGTERM → checkpoint + exit 0, done.json) and records, per rank, the node
it was told it is on and its torch.distributed environment; when the real trainer is importable
one more test trains the mlp with it. Every process the cluster started is checked dead by PID at
the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: the Ray backend cannot be tested")
psutil = pytest.importorskip("psutil")

from dlsched.core.allocation import Allocation  # noqa: E402
from dlsched.core.errors import ConfigError  # noqa: E402
from dlsched.live.backends.base import Launch  # noqa: E402
from dlsched.trainer.protocol import ProgressReader, is_done  # noqa: E402
from dlsched.live.backends.ray_backend import RayBackend  # noqa: E402
from tests.local_ray import LocalRayCluster  # noqa: E402
from dlsched.live.spec import TrainJob  # noqa: E402

SLOT = "gpu_slot"

FAKE_TRAINER = textwrap.dedent('''
    """A stand-in for `python -m dlsched.trainer` that obeys its contract without torch."""
    import argparse, json, os, signal, socket, sys, time
    p = argparse.ArgumentParser()
    for a in ("--job-dir", "--model", "--mode", "--lr"):
        p.add_argument(a)
    for a in ("--steps", "--batch-size", "--seed", "--num-ps"):
        p.add_argument(a, type=int)
    p.add_argument("--checkpoint-every", type=float)
    args = p.parse_args()
    d = args.job_dir
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    run = os.environ["DLSCHED_RUN_ID"]
    os.makedirs(os.path.join(d, "ranks"), exist_ok=True)
    with open(os.path.join(d, "ranks", f"{run}-{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": world, "node": os.environ.get("DLSCHED_NODE"),
                   "role": os.environ.get("DLSCHED_ROLE"), "pid": os.getpid(),
                   "master": [os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]]}, f)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    if rank == 0:  # the rendezvous port must really be free on the master's address
        srv = socket.socket(); srv.bind((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
    if args.seed == 13 and rank == world - 1:
        print("fake failure on purpose", flush=True)
        sys.exit(3)
    if rank != args.num_ps:  # not the reporting rank: live until done or stopped
        while not stop and not os.path.exists(os.path.join(d, "done.json")):
            time.sleep(0.05)
        sys.exit(0)
    workers = world - args.num_ps
    ck = os.path.join(d, "checkpoint.pt")
    step = json.load(open(ck))["step"] if os.path.exists(ck) else 0
    def log(event, **kw):
        with open(os.path.join(d, "progress.jsonl"), "a") as f:
            f.write(json.dumps({"time": time.time(), "event": event, "step": step, "run": run,
                                "workers": workers, "ps": args.num_ps, **kw}) + "\\n")
    def checkpoint():
        with open(ck + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(ck + ".tmp", ck)
    first, last = True, time.time()
    while step < args.steps and not stop:
        time.sleep(float(os.environ.get("FAKE_STEP_S", "0.05")))
        step += 1
        if first:
            log("start", loss=1.0 / step)
            first = False
        elif time.time() - last > 0.2:
            log("progress", loss=1.0 / step, steps_per_s=20.0)
            last = time.time()
    checkpoint()
    if stop:
        log("stop")
        sys.exit(0)
    log("done", loss=1.0 / step)
    with open(os.path.join(d, "done.json.tmp"), "w") as f:
        json.dump({"steps": step, "loss": 1.0 / step}, f)
    os.replace(os.path.join(d, "done.json.tmp"), os.path.join(d, "done.json"))
''')


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    if ray.is_initialized():
        pytest.skip("this process is already connected to Ray")
    cluster = LocalRayCluster({"a": 2, "b": 2, "c": 2}, slot_resource=SLOT, cpus_per_node=2)
    cluster.trainer_pids = set()
    backend = None
    try:
        fake = tmp_path_factory.mktemp("fake") / "fake_trainer.py"
        fake.write_text(FAKE_TRAINER)
        backend = RayBackend(cluster.address, slot_resource=SLOT, trainer_cmd=[sys.executable, str(fake)],
                             pg_timeout=20.0)
        yield cluster, backend
    finally:
        pids = cluster.pids()  # before close: the actors, pools and standbys are children of raylets
        if backend is not None:
            backend.close()
        left = cluster.close(extra_pids=pids | cluster.trainer_pids)
        assert not left, f"processes of the test Ray cluster still alive: {left}"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait(backend, job_id, states, timeout=40.0, cond=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        obs = backend.observe().get(job_id)
        if obs is not None and obs.state in states and (cond is None or cond(obs)):
            return obs
        time.sleep(0.1)
    raise AssertionError(f"{job_id} never reached {states}: {backend.observe().get(job_id)}")


def _launch(tmp_path, job_id, alloc, attempt=0, **job):
    spec = TrainJob(model="mlp", steps=job.pop("steps", 20), mem_gb_per_worker=0.1, mem_gb_per_ps=0.1,
                    cpus_per_worker=0.5, cpus_per_ps=0.5, **job)
    return Launch(job_id, spec, alloc, tmp_path / job_id, attempt=attempt)


def _ranks(job_dir: Path, run: str) -> dict[int, dict]:
    return {json.loads(p.read_text())["rank"]: json.loads(p.read_text())
            for p in (job_dir / "ranks").glob(f"{run}-*.json")}


def _remember(cluster, backend, job_id):
    cluster.trainer_pids |= {p["pid"] for p in backend.placements(job_id) if p["pid"]}


def test_cluster_lists_the_labelled_nodes(ray_cluster):
    _, backend = ray_cluster
    c = backend.cluster()
    assert c.node_names == ("a", "b", "c")
    assert {n.ip for n in backend.nodes} == {"127.0.0.1"}
    assert c.capacity[:, 0].tolist() == [2.0, 2.0, 2.0]
    assert c.capacity[:, 1].tolist() == [2.0, 2.0, 2.0]
    assert (c.capacity[:, 2] > 0).all()


def test_two_workers_on_two_nodes_run_to_done(ray_cluster, tmp_path):
    cluster, backend = ray_cluster
    launch = _launch(tmp_path, "j2", Allocation.of({1: (1, 0), 2: (1, 0)}), workers=2, steps=20)
    backend.start(launch)
    obs = _wait(backend, "j2", {"done", "failed"})
    _remember(cluster, backend, "j2")
    assert obs.state == "done", obs.message
    assert obs.step == 20 and obs.first_step_at is not None and obs.samples
    places = backend.placements("j2")
    assert [(p["rank"], p["role"], p["node"], p["ray_node"]) for p in places] == [
        (0, "worker", "b", "b"), (1, "worker", "c", "c")]
    ranks = _ranks(launch.job_dir, places[0]["run"])
    assert {r: v["node"] for r, v in ranks.items()} == {0: "b", 1: "c"}
    assert all(v["world"] == 2 and v["master"][0] == "127.0.0.1" for v in ranks.values())
    backend.forget("j2")
    assert "j2" not in backend.observe()


def test_ps_ranks_come_first(ray_cluster, tmp_path):
    cluster, backend = ray_cluster
    launch = _launch(tmp_path, "jps", Allocation.of({0: (0, 1), 1: (1, 0), 2: (1, 0)}),
                     mode="ps", ps=1, workers=2, steps=5)
    backend.start(launch)
    obs = _wait(backend, "jps", {"done", "failed"})
    _remember(cluster, backend, "jps")
    assert obs.state == "done", obs.message
    assert [(p["role"], p["node"], p["ray_node"]) for p in backend.placements("jps")] == [
        ("ps", "a", "a"), ("worker", "b", "b"), ("worker", "c", "c")]
    backend.forget("jps")


def test_stop_then_start_at_another_size_resumes(ray_cluster, tmp_path):
    cluster, backend = ray_cluster
    # far more steps than can run before the stop lands, however slow the machine (80 steps, 4 s,
    # once finished before a stop on a loaded CI machine); the second run is given a short rest
    first = _launch(tmp_path, "jr", Allocation.of({0: (1, 0), 1: (1, 0)}), workers=2, max_workers=2,
                    min_workers=1, steps=100_000)
    backend.start(first)
    _wait(backend, "jr", {"running"}, cond=lambda o: o.step >= 5)
    _remember(cluster, backend, "jr")
    backend.stop("jr", timeout=10)
    obs = backend.observe()["jr"]
    assert obs.state == "stopped", obs.message
    saved = json.loads((first.job_dir / "checkpoint.pt").read_text())["step"]
    assert 5 <= saved < 100_000
    rest = first.job.model_copy(update={"steps": saved + 20})
    second = Launch("jr", rest, Allocation.single_node(2, 1), first.job_dir, attempt=1)
    backend.start(second)
    obs = _wait(backend, "jr", {"done", "failed"})
    _remember(cluster, backend, "jr")
    assert obs.state == "done", obs.message
    starts = ProgressReader(first.job_dir)
    starts.poll()
    assert [s["step"] for s in starts.starts] == [1, saved + 1]  # resumed where it stopped
    assert starts.starts[1]["workers"] == 1
    assert [p["ray_node"] for p in backend.placements("jr")] == ["c"]
    backend.forget("jr")


def test_failed_rank_fails_the_run_and_kills_the_rest(ray_cluster, tmp_path):
    cluster, backend = ray_cluster
    launch = _launch(tmp_path, "jf", Allocation.of({0: (1, 0), 2: (1, 0)}), workers=2, steps=500, seed=13)
    backend.start(launch)
    obs = _wait(backend, "jf", {"failed", "done"})
    assert obs.state == "failed"
    assert "rank 1" in obs.message and "code 3" in obs.message and "fake failure" in obs.message
    run = backend.placements("jf")[0]["run"]
    pids = [v["pid"] for v in _ranks(launch.job_dir, run).values()]
    assert len(pids) == 2
    time.sleep(0.5)
    assert not [p for p in pids if _alive(p)]
    assert not is_done(launch.job_dir)
    backend.forget("jf")


def test_a_dead_actor_fails_the_run_and_takes_its_trainer_along(ray_cluster, tmp_path):
    cluster, backend = ray_cluster
    launch = _launch(tmp_path, "jd", Allocation.of({0: (1, 0), 1: (1, 0)}), workers=2, steps=10_000)
    backend.start(launch)
    _wait(backend, "jd", {"running"}, cond=lambda o: o.step >= 1)
    # a rank's pid is known once the backend has polled its actor, which may lag the first step
    _wait(backend, "jd", {"running"}, cond=lambda o: all(p["pid"] for p in backend.placements("jd")))
    _remember(cluster, backend, "jd")
    pids = [p["pid"] for p in backend.placements("jd")]
    ray.kill(backend.jobs["jd"].run.ranks[1].actor)  # as if its node or worker process died
    obs = _wait(backend, "jd", {"failed"})
    assert "rank 1" in obs.message and "actor died" in obs.message
    deadline = time.time() + 10
    while any(_alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)]
    backend.forget("jd")


def test_infeasible_placement_is_reported_not_hung(ray_cluster, tmp_path):
    _, backend = ray_cluster
    launch = _launch(tmp_path, "jbig", Allocation.single_node(0, 3), workers=3)
    t0 = time.time()
    backend.start(launch)
    obs = backend.observe()["jbig"]
    assert obs.state == "failed"
    assert "infeasible" in obs.message and "node a" in obs.message and "gpu_slot" in obs.message
    assert time.time() - t0 < 10
    backend.forget("jbig")
    with pytest.raises(ConfigError, match="node index 7"):
        backend.start(_launch(tmp_path, "jbad", Allocation.single_node(7, 1)))


def test_busy_nodes_time_out_with_a_clear_message(ray_cluster, tmp_path):
    cluster, backend = ray_cluster
    hog = _launch(tmp_path, "hog", Allocation.single_node(1, 2), workers=2, steps=10_000)
    backend.start(hog)
    _wait(backend, "hog", {"running"}, cond=lambda o: o.step >= 1)
    _remember(cluster, backend, "hog")
    old = backend.pg_timeout
    backend.pg_timeout = 1.0
    try:
        backend.start(_launch(tmp_path, "late", Allocation.single_node(1, 1)))
    finally:
        backend.pg_timeout = old
    obs = backend.observe()["late"]
    assert obs.state == "failed" and "not granted within 1 s" in obs.message and "'b'" in obs.message
    backend.forget("late")
    backend.stop("hog", timeout=10)
    assert backend.observe()["hog"].state == "stopped"
    backend.forget("hog")
    # the hog's reservation is gone: the same request now fits
    backend.start(_launch(tmp_path, "late2", Allocation.single_node(1, 2), workers=2, steps=3))
    assert _wait(backend, "late2", {"done", "failed"}).state == "done"
    _remember(cluster, backend, "late2")
    backend.forget("late2")


def _real_trainer_available() -> bool:
    try:
        r = subprocess.run([sys.executable, "-m", "dlsched.trainer", "--help"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


#: enough mlp steps (~100/s on one core) that the job is still running when it gets resized
STEPS_REAL = 1000


def test_real_trainer_ddp_two_nodes_then_resized_to_one(ray_cluster, tmp_path):
    if not _real_trainer_available():
        pytest.skip("python -m dlsched.trainer is not available yet")
    cluster, backend = ray_cluster
    saved_cmd, backend.trainer_cmd = backend.trainer_cmd, None
    backend.standby = 1
    backend.warm([0])  # a warm interpreter on node a, for the resize (the first run starts cold)
    backend.standby = 0
    try:
        job = TrainJob(model="mlp", mode="ddp", steps=STEPS_REAL, batch_size=16, workers=2, min_workers=1,
                       cpus_per_worker=0.5, mem_gb_per_worker=0.5, checkpoint_every_s=5)
        first = Launch("real", job, Allocation.of({1: (1, 0), 2: (1, 0)}), tmp_path / "real")
        backend.start(first)
        obs = _wait(backend, "real", {"running", "done", "failed"}, timeout=90,
                    cond=lambda o: o.state != "running" or o.first_step_at is not None)
        _remember(cluster, backend, "real")
        assert obs.state == "running", obs.message or "finished before it could be resized: raise STEPS_REAL"
        assert [(p["ray_node"], p["warm"]) for p in backend.placements("real")] == [("b", False), ("c", False)]
        backend.standby = 1
        pool = backend._pool(0)
        deadline = time.time() + 60
        while ray.get(pool.ready_count.remote()) < 1 and time.time() < deadline:
            time.sleep(0.1)
        backend.apply(["real"], [Launch("real", job, Allocation.single_node(0, 1), first.job_dir, attempt=1)], timeout=20)
        obs = _wait(backend, "real", {"done", "failed"}, timeout=120)
        _remember(cluster, backend, "real")
        assert obs.state == "done", obs.message
        assert is_done(first.job_dir) and obs.step == STEPS_REAL
        assert [(p["ray_node"], p["warm"]) for p in backend.placements("real")] == [("a", True)]
        log = ProgressReader(first.job_dir)
        events = log.poll()
        runs = [p["run"] for p in backend.placements("real")]
        assert any(e["event"] == "stop" for e in events)  # the 2-worker run checkpointed on SIGTERM
        second = [s for s in log.starts if s["run"] == runs[0]]
        assert len(second) == 1 and second[0]["workers"] == 1 and second[0]["step"] > 1  # resumed
        backend.forget("real")
    finally:
        backend.trainer_cmd = saved_cmd
        backend.standby = 0


OWN_RAY = textwrap.dedent('''
    import json, psutil, ray
    from dlsched.live.backends.ray_backend import RayBackend
    b = RayBackend(local_num_cpus=1)
    c = b.cluster()
    head = b._local_ray.head_node
    pids = [p.process.pid for ps in head.all_processes.values() for p in ps]
    for pid in list(pids):
        try:
            pids += [k.pid for k in psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    listening = sorted({c.laddr.ip for c in psutil.net_connections("inet")
                        if c.status == psutil.CONN_LISTEN and c.pid in pids})
    print(json.dumps({"names": c.node_names, "cap": c.capacity.tolist(), "slot": b.slot_resource,
                      "ip": [n["NodeManagerAddress"] for n in ray.nodes()], "listening": listening,
                      "pids": pids}), flush=True)
    b.close()
    print(json.dumps({"initialized": ray.is_initialized()}))
''')


def test_without_address_the_backend_owns_a_loopback_ray(tmp_path):
    """address=None: a private one-node Ray on 127.0.0.1, gone after close() (own process, so
    it does not disturb the module's cluster connection)."""
    script = tmp_path / "own_ray.py"
    script.write_text(OWN_RAY)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env=env)
    lines = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
    assert out.returncode == 0 and len(lines) == 2, out.stderr[-2000:]
    info, after = lines
    assert info["names"] == ["local"] and info["slot"] == "gpu_slot" and info["ip"] == ["127.0.0.1"]
    assert info["listening"] and set(info["listening"]) <= {"127.0.0.1", "::ffff:127.0.0.1"}
    assert info["cap"][0][0] == 1.0 and info["cap"][0][1] == 1.0
    assert after["initialized"] is False
    deadline = time.time() + 15
    alive = info["pids"]
    while alive and time.time() < deadline:
        alive = [p for p in alive if _alive(p)]
        time.sleep(0.2)
    assert not alive, f"processes of the backend's own Ray left running: {alive}"


def _fake_node(node_id, ip, **res):
    return {"NodeID": node_id, "Alive": True, "NodeManagerAddress": ip, "Resources": {"CPU": 4.0, **res}}


def _bare_backend(monkeypatch, nodes) -> RayBackend:
    """A backend whose node discovery reads `nodes` instead of a live cluster."""
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    b = RayBackend.__new__(RayBackend)
    b.prefix, b.slot_resource, b.cluster_name, b.jobs = "dlsched_node_", "GPU", "ray", {}
    return b


def test_node_names_and_pins_without_a_cluster(monkeypatch, tmp_path):
    b = _bare_backend(monkeypatch, [
        _fake_node("ff01", "10.0.0.9", GPU=8.0),  # unlabelled, own IP: pinned by node:<ip>
        _fake_node("ee02", "10.0.0.2", GPU=4.0, dlsched_node_zeta=1.0),
        _fake_node("dd03", "10.0.0.1", dlsched_node_alpha=1.0, **{"accelerator_type:A100": 1.0, "GPU": 2.0}),
        {"NodeID": "cc04", "Alive": False, "NodeManagerAddress": "10.0.0.4", "Resources": {"GPU": 1.0}},
    ])
    nodes = b.refresh_nodes()
    assert [(n.name, n.pin) for n in nodes] == [
        ("alpha", "dlsched_node_alpha"), ("zeta", "dlsched_node_zeta"), ("ray-ff01", "node:10.0.0.9")]
    c = b.cluster()
    assert c.capacity[:, 0].tolist() == [2.0, 4.0, 8.0] and list(c.gpu_type) == ["A100", "generic", "generic"]

    b = _bare_backend(monkeypatch, [_fake_node("aa01", "127.0.0.1"), _fake_node("aa02", "127.0.0.1")])
    b.refresh_nodes()
    with pytest.raises(ConfigError, match="cannot be targeted"):
        b.start(_launch(tmp_path, "x", Allocation.single_node(0, 1), gpus_per_worker=0))

    b = _bare_backend(monkeypatch, [_fake_node("aa01", "10.0.0.1", dlsched_node_a=1.0),
                                    _fake_node("aa02", "10.0.0.2", dlsched_node_a=1.0)])
    with pytest.raises(ConfigError, match="labels must be unique"):
        b.refresh_nodes()
