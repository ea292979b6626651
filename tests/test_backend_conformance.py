"""One conformance suite every live backend passes: start, observe, a batched stop, a resize that
resumes from the checkpoint, a failed run, node loss, forget.

Each backend comes as a kit: how to make it on a small cluster, how much time a test waits (a
fake clock for dry, the wall clock for processes), how to crash a run and how to take a node
down and back. The tests speak only the `Backend` interface (`apply`, `observe`,
`node_events`, `forget`), so what the controller relies on is what is checked here, for dry,
local processes, Ray and Kubernetes alike (`tests/k8s_conformance_kit.py`).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.live.backends.base import Backend, Launch, Observation
from dlsched.live.spec import TrainJob
from tests.k8s_control_plane import control_plane  # noqa: F401  (the Kubernetes kit's session control plane)


class Kit:
    """How the suite drives one backend. Two nodes with two GPU slots each, at least."""

    name = "kit"

    def make(self, tmp_path: Path) -> Backend:
        raise NotImplementedError

    def job(self, steps: int, **kw) -> TrainJob:
        return TrainJob(model="mlp", steps=steps, **kw)

    def pass_time(self, seconds: float) -> None:
        time.sleep(seconds)

    def crash(self, backend: Backend, job_id: str) -> None:
        """Make the job's current run die without finishing (a rank killed)."""
        raise NotImplementedError

    def fail_node(self, backend: Backend, node: int) -> None:
        backend.fail_node(node)

    def join_node(self, backend: Backend, node: int) -> None:
        backend.join_node(node)

    def close(self) -> None:
        """Release what the kit holds for the whole module (a Ray cluster)."""


class DryKit(Kit):
    name = "dry"

    def make(self, tmp_path: Path) -> Backend:
        from dlsched.live.backends.dry import DryBackend, FakeClock

        self.clock = FakeClock()
        return DryBackend(Cluster.homogeneous("conformance", nodes=2, gpus=2, cpus=4, mem=8), self.clock,
                          rate_per_worker=10.0, startup=1.0)

    def pass_time(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def crash(self, backend, job_id: str) -> None:
        backend.crash(job_id, "rank 0 killed by SIGKILL")


class LocalKit(Kit):
    name = "local"

    def make(self, tmp_path: Path) -> Backend:
        from dlsched.live.backends.local import LocalBackend
        from tests.test_local_backend import FAKE_TRAINER, NODES

        fake = tmp_path / "fake_trainer.py"
        fake.write_text(FAKE_TRAINER.replace("__STANDBY__", "False"))
        return LocalBackend(nodes=NODES, trainer_cmd=[sys.executable, str(fake)], log_dir=tmp_path / "standby")

    def crash(self, backend, job_id: str) -> None:
        os.kill(backend.pids(job_id)[0], signal.SIGKILL)


class RayKit(Kit):
    """A three-raylet Ray cluster on 127.0.0.1 for the module; node loss is a raylet removed
    for real (its actors and trainers die) and started again with the same label."""

    name = "ray"

    def __init__(self, tmp: Path):
        pytest.importorskip("ray", reason="Ray is not installed")
        from tests.local_ray import LocalRayCluster
        from tests.test_ray_backend import FAKE_TRAINER

        self.fake = tmp / "fake_trainer.py"
        self.fake.write_text(FAKE_TRAINER)
        self.cluster = LocalRayCluster({"a": 2, "b": 2, "c": 2}, slot_resource="gpu_slot", cpus_per_node=2)
        self.pids: set[int] = set()
        self.backend = None

    def make(self, tmp_path: Path) -> Backend:
        from dlsched.live.backends.ray_backend import RayBackend

        if self.backend is None:  # one driver connection per module: Ray allows one per process
            self.backend = RayBackend(self.cluster.address, slot_resource="gpu_slot",
                                      trainer_cmd=[sys.executable, str(self.fake)], pg_timeout=20.0)
        return self.backend

    def job(self, steps: int, **kw) -> TrainJob:
        return TrainJob(model="mlp", steps=steps, mem_gb_per_worker=0.1, cpus_per_worker=0.5, **kw)

    def crash(self, backend, job_id: str) -> None:
        pid = backend.placements(job_id)[0]["pid"]
        os.kill(pid, signal.SIGKILL)

    def fail_node(self, backend, node: int) -> None:
        """Stop the raylet of `node` (c: the head cannot go)."""
        self.pids |= self.cluster.pids()
        name = backend.cluster().node_names[node]
        self.cluster.remove(name)

    def join_node(self, backend, node: int) -> None:
        self.cluster.add(backend.cluster().node_names[node])

    def close(self) -> None:
        pids = self.cluster.pids() | self.pids
        if self.backend is not None:
            self.backend.close()
        left = self.cluster.close(extra_pids=pids)
        assert not left, f"processes of the test Ray cluster still alive: {left}"


@pytest.fixture(scope="module", params=["dry", "local", "ray", pytest.param(
    "kubernetes", marks=[pytest.mark.k8s, pytest.mark.xdist_group("k8s")])])
def kit(request, tmp_path_factory):
    if request.param == "dry":
        k: Kit = DryKit()
    elif request.param == "local":
        k = LocalKit()
    elif request.param == "ray":
        k = RayKit(tmp_path_factory.mktemp("ray"))
    else:
        from tests.k8s_conformance_kit import kubernetes_kit

        k = kubernetes_kit(request)
    yield k
    k.close()


@pytest.fixture
def backend(kit, tmp_path):
    b = kit.make(tmp_path)
    yield b
    for jid in list(b.observe()):
        b.forget(jid)
    if not isinstance(kit, (RayKit,)) and not getattr(kit, "shared_backend", False):
        b.close()


def launch(tmp_path: Path, kit: Kit, job_id: str, placement: dict, steps: int, attempt: int = 0) -> Launch:
    workers = sum(w for w, _ in placement.values())
    job = kit.job(steps, workers=workers, min_workers=1, max_workers=max(workers, 2))
    return Launch(job_id, job, Allocation.of(placement), tmp_path / job_id, attempt)


def wait(kit: Kit, backend: Backend, job_id: str, cond, timeout: float = 60.0) -> Observation:
    """Observe until `cond` holds for the job (time passes by the kit's clock)."""
    deadline = time.monotonic() + timeout
    o = None
    while time.monotonic() < deadline:
        o = backend.observe().get(job_id)
        if o is not None and cond(o):
            return o
        kit.pass_time(0.1)
    raise AssertionError(f"{kit.name}: {job_id} timed out; last observation {o}")


def test_a_run_starts_reports_progress_and_finishes_with_its_completion_record(kit, backend, tmp_path):
    backend.apply([], [launch(tmp_path, kit, "one", {0: (1, 0)}, steps=20)])
    o = wait(kit, backend, "one", lambda o: o.state != "running" or o.step > 0)
    assert o.state in ("running", "done") and o.step > 0
    o = wait(kit, backend, "one", lambda o: o.state != "running")
    assert o.state == "done", o.message
    assert o.step == 20 and o.done is not None and o.done.get("steps", 20) == 20
    assert o.first_step_at is not None
    backend.forget("one")
    assert "one" not in backend.observe()


def test_one_batch_stops_two_runs_and_resizes_one_which_resumes_from_its_checkpoint(kit, backend, tmp_path):
    steps = 60
    backend.apply([], [launch(tmp_path, kit, "a", {0: (1, 0), 1: (1, 0)}, steps),
                       launch(tmp_path, kit, "b", {0: (1, 0)}, steps)])
    for jid in ("a", "b"):
        wait(kit, backend, jid, lambda o: o.step >= 3)
    # one decision: b is preempted, a is resized from 2 workers to 1 (a stop and a launch)
    backend.apply(["a", "b"], [launch(tmp_path, kit, "a", {1: (1, 0)}, steps, attempt=1)])
    seen = backend.observe()
    assert seen["b"].state == "stopped" and 3 <= seen["b"].step < steps and seen["b"].done is None
    stopped_at = seen["a"].step
    assert 3 <= stopped_at < steps
    backend.forget("b")
    o = wait(kit, backend, "a", lambda o: o.state != "running")
    assert o.state == "done", o.message
    assert o.step == steps
    if o.resume is not None:  # the trainer said where it resumed: not from scratch
        assert o.resume.get("step", stopped_at) >= stopped_at - 1


def test_a_run_that_dies_is_failed_with_a_message(kit, backend, tmp_path):
    backend.apply([], [launch(tmp_path, kit, "dies", {0: (1, 0), 1: (1, 0)}, steps=100_000)])
    wait(kit, backend, "dies", lambda o: o.step >= 1)
    kit.crash(backend, "dies")
    o = wait(kit, backend, "dies", lambda o: o.state != "running")
    assert o.state == "failed" and o.message and o.done is None


def test_a_node_lost_fails_its_runs_and_is_reported_then_comes_back(kit, backend, tmp_path):
    node = len(backend.cluster().node_names) - 1
    backend.apply([], [launch(tmp_path, kit, "lost", {node: (1, 0)}, steps=100_000),
                       launch(tmp_path, kit, "safe", {0: (1, 0)}, steps=100_000)])
    for jid in ("lost", "safe"):
        wait(kit, backend, jid, lambda o: o.step >= 1)
    backend.node_events()  # nothing before
    kit.fail_node(backend, node)
    o = wait(kit, backend, "lost", lambda o: o.state != "running", timeout=90)
    assert o.state == "failed"
    assert backend.observe()["safe"].state == "running"
    events: list = []
    deadline = time.monotonic() + 60
    while not any(e.kind == "fail" for e in events) and time.monotonic() < deadline:
        events += backend.node_events()
        kit.pass_time(0.2)
    assert [(e.node, e.kind) for e in events] == [(node, "fail")]
    kit.join_node(backend, node)
    events = []
    deadline = time.monotonic() + 60
    while not events and time.monotonic() < deadline:
        events += backend.node_events()
        kit.pass_time(0.2)
    assert [(e.node, e.kind) for e in events] == [(node, "join")]
    backend.apply(["safe"], [])
    assert backend.observe()["safe"].state == "stopped"
