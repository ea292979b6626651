"""The Kubernetes backend, on a real control plane (kube-apiserver, etcd, kwok fake GPU nodes).

The first tests need no cluster: names, manifests, quantities, the made-up arithmetic, and that
the backend's source never calls pods/log, exec, attach, portforward or proxy. The rest (marked
`k8s`, one xdist group: one control plane for the session, tests/k8s_control_plane.py) drive
`KubernetesBackend` in sim mode against the real API: the cluster read from nodes, gangs bound all
or nothing, pods where the plan says, a resize, completion at `dlsched.io/sim-end`, a node going
NotReady and back, a pod deleted behind dlsched's back, adoption by a fresh backend, leader
election, and the backend under deploy/k8s/rbac.yaml's rights only. Each runs in its own namespace
and leaves the session's nodes as it found them.
"""

from __future__ import annotations

import ast
import datetime as dt
import math
import threading
import time
import uuid
from pathlib import Path

import pytest

from dlsched.core.allocation import Allocation
from dlsched.live.backends import k8s_pods as kp
from dlsched.live.backends.base import Launch
from dlsched.live.backends.dry import made_up_finish, made_up_rate, made_up_step
from dlsched.live.spec import TrainJob
from tests.k8s_control_plane import (GPUS_PER_NODE, NODES, WAIT, control_plane, k8s_client,  # noqa: F401
                                     k8s_namespace, wait_until)

k8s = [pytest.mark.k8s, pytest.mark.xdist_group("k8s")]
SRC = Path(__file__).resolve().parents[1] / "src" / "dlsched" / "live" / "backends"


def on_k8s(fn):
    for m in k8s:
        fn = m(fn)
    return fn


def job(steps: int, workers: int, **kw) -> TrainJob:
    return TrainJob(model="mlp", steps=steps, workers=workers, min_workers=1, max_workers=max(workers, 8), **kw)


def launch(tmp_path: Path, jid: str, placement: dict, steps: int = 100_000, attempt: int = 0, **kw) -> Launch:
    workers = sum(w for w, _ in placement.values())
    d = tmp_path / jid
    d.mkdir(parents=True, exist_ok=True)
    return Launch(jid, job(steps, workers, **kw), Allocation.of(placement), d, attempt)


# ====================================================================== without a cluster


def test_names_are_dns_labels_and_distinct():
    for jid in ("job-000001", "J_1", "1abc", "x" * 80, "a.b", "Job-000001"):
        base = kp.dns_base(jid)
        name = kp.pod_name(jid, 12, "worker", 255)
        assert len(kp.service_name(jid, 12)) <= 63 and len(name) <= 63
        assert base[0].isalpha() and all(c.isalnum() or c == "-" for c in name) and name == name.lower()
    assert kp.dns_base("job-000001") == "job-000001"
    assert kp.dns_base("Job-000001") != kp.dns_base("job-000001")
    assert kp.pod_name("job-000001", 2, "ps", 0) == "job-000001-a2-ps0"
    assert kp.job_label("J_1") == "J_1" and kp.job_label("x" * 80) == kp.dns_base("x" * 80)


def test_quantities_and_pod_requests():
    assert kp.parse_quantity("1Ti") / 2**30 == 1024 and kp.parse_quantity("500m") == 0.5
    assert kp.parse_quantity("2.5Gi") == 2.5 * 2**30 and kp.parse_quantity("1e3") == 1000
    with pytest.raises(ValueError):
        kp.parse_quantity("8 GPUs")
    spec = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"cpu": "1500m", "memory": "1Gi"}}},
                           {"resources": {"requests": {"cpu": "500m"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "4", "memory": "512Mi"}}}]}
    assert kp.pod_request(spec, "nvidia.com/gpu") == (2.0, 4.0, 1.0)
    assert kp.cpu_quantity(1.5) == "1500m" and kp.mem_quantity(1.5) == "1536Mi"


def test_a_run_manifest_follows_the_launch_contract(tmp_path):
    ps_job = TrainJob(model="mlp", mode="ps", steps=10, workers=2, ps=1, gpus_per_worker=2, mem_gb_per_ps=3)
    ln = Launch("job-000007", ps_job, Allocation.of({0: (1, 1), 2: (1, 0)}), tmp_path / "job-000007", attempt=3)
    layout = [("ps", 0), ("worker", 0), ("worker", 2)]
    tpl = kp.PodTemplate(job_pvc="jobs", env={"EXTRA": "1"})
    m = kp.build_run(ln, layout, ["n0", "n1", "n2"], "ns", tpl, "job-000007-a3-abc", holder="me",
                     sim={kp.A_SIM_END: "2030-01-01T00:00:00.000Z"})
    assert m.master_addr == "ps0.job-000007-a3.ns.svc"
    assert m.service["spec"]["clusterIP"] == "None" and m.service["spec"]["publishNotReadyAddresses"]
    assert m.service["spec"]["selector"] == {kp.MANAGED_BY[0]: "dlsched", kp.L_JOB: "job-000007", kp.L_ATTEMPT: "3"}
    assert [(p["metadata"]["name"], n) for p, n in m.pods] == [
        ("job-000007-a3-ps0", "n0"), ("job-000007-a3-worker1", "n0"), ("job-000007-a3-worker2", "n2")]
    for r, (pod, _) in enumerate(m.pods):
        spec, c = pod["spec"], pod["spec"]["containers"][0]
        assert spec["schedulerName"] == "dlsched" and "nodeName" not in spec and spec["restartPolicy"] == "Never"
        assert spec["subdomain"] == "job-000007-a3" and spec["hostname"] == ("ps0" if r == 0 else f"worker{r}")
        assert kp.KWOK_TOLERATION in spec["tolerations"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["RANK"] == str(r) and env["WORLD_SIZE"] == "3" and env["DLSCHED_ATTEMPT"] == "3"
        assert env["MASTER_ADDR"] == m.master_addr and env["MASTER_PORT"] == "29500" and env["EXTRA"] == "1"
        assert env["LOCAL_RANK"] == "0" and env["LOCAL_WORLD_SIZE"] == "1"
        assert any(e["name"] == "DLSCHED_NODE_ADDR" and e["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
                   for e in c["env"])
        assert c["command"] == ["python", "-m", "dlsched.trainer"] and c["args"][:2] == ["--job-dir", str(ln.job_dir)]
        assert c["volumeMounts"] == [{"name": "dlsched-jobs", "mountPath": str(tmp_path)}]
        assert pod["metadata"]["labels"][kp.L_RANK] == str(r)
        assert pod["metadata"]["annotations"][kp.A_SIM_END] == "2030-01-01T00:00:00.000Z"
    ps_res, w_res = m.pods[0][0]["spec"]["containers"][0]["resources"], m.pods[1][0]["spec"]["containers"][0]["resources"]
    assert "limits" not in ps_res and ps_res["requests"] == {"cpu": "1000m", "memory": "3072Mi"}
    assert w_res["limits"] == {"nvidia.com/gpu": "2"}


def test_a_fractional_gpu_cannot_be_a_pod(tmp_path):
    ln = Launch("j", TrainJob(model="mlp", steps=10, gpus_per_worker=0.5), Allocation.of({0: (1, 0)}), tmp_path)
    with pytest.raises(ValueError, match="0.5 GPU per worker"):
        kp.build_run(ln, [("worker", 0)], ["n0"], "ns", kp.PodTemplate(), "run")


def test_made_up_arithmetic_is_the_dry_backends():
    rate = made_up_rate(10.0, 4, 0.8)
    assert rate == pytest.approx(10 * 4**0.8)
    end = made_up_finish(100, 2.0, rate, 500)
    assert made_up_step(100, end, 2.0, rate, 500) == 500 > made_up_step(100, end - 0.1, 2.0, rate, 500)
    assert made_up_step(100, 1.0, 2.0, rate, 500) == 100
    assert kp.rfc3339(0.25) == "1970-01-01T00:00:00.250Z"


def test_the_backend_never_reads_logs_execs_attaches_forwards_or_proxies():
    """No call to pods/log, exec, attach, portforward or proxy: an accidental one would make the
    API server dial a node. Checked on the code, not the comments: attribute and name uses, and
    string constants other than docstrings."""
    banned_attrs = {"log", "exec", "attach", "portforward", "proxy", "ws_request", "Log", "Exec", "Attach",
                    "Portforward", "Proxy"}
    banned_names = {"PodLog", "PodExec", "PodAttach", "PodPortforward", "PodProxy", "NodeProxy", "ServiceProxy"}
    banned_text = ("/log", "/exec", "/attach", "/portforward", "/proxy", "pods/log")
    files = [SRC / "kubernetes.py", *sorted(SRC.glob("k8s_*.py"))]
    assert len(files) >= 6
    for path in files:
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                assert node.attr not in banned_attrs, f"{path.name}:{node.lineno}: .{node.attr}"
            elif isinstance(node, ast.Name):
                assert node.id not in banned_names, f"{path.name}:{node.lineno}: {node.id}"
            elif isinstance(node, ast.alias):
                assert node.name not in banned_names, f"{path.name}: imports {node.name}"
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                assert not any(t in node.value for t in banned_text), f"{path.name}:{node.lineno}: {node.value!r}"


def test_the_registry_knows_the_backend_and_checks_its_options():
    from dlsched.core.errors import ConfigError
    from dlsched.live.backends.registry import BACKENDS, backend_options

    assert "kubernetes" in BACKENDS
    o = backend_options("kubernetes", {"namespace": "x", "mode": "sim", "stop_grace_s": 5})
    assert o.namespace == "x" and o.pool == "default" and o.leader_election
    with pytest.raises(ConfigError, match="nodeName"):
        backend_options("kubernetes", {"nodeName": "x"})
    assert o.bind == "binding" and backend_options("kubernetes", {"bind": "create"}).bind == "create"
    with pytest.raises(ConfigError, match="bind"):
        backend_options("kubernetes", {"bind": "nodeName"})


# ====================================================================== on the real API


@pytest.fixture
def make(control_plane, k8s_namespace):
    """make(**options) -> a KubernetesBackend in the test's namespace (closed afterwards)."""
    from dlsched.live.backends.kubernetes import KubernetesBackend

    made = []

    def _make(**kw):
        kw.setdefault("kubeconfig", control_plane.kubeconfig())
        kw.setdefault("namespace", k8s_namespace)
        kw.setdefault("rate_per_worker", 10.0)
        kw.setdefault("startup", 0.5)
        b = KubernetesBackend(**kw)
        made.append(b)
        return b

    yield _make
    for b in made:
        try:
            for jid in list(b.observe()):
                b.forget(jid)
        except Exception:  # noqa: BLE001 - a detached backend; the test failed already or meant it
            pass
        b.close()


def wait_obs(b, jid: str, pred, timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    o = None
    while time.monotonic() < deadline:
        o = b.observe().get(jid)
        if o is not None and pred(o):
            return o
        time.sleep(0.1)
    raise AssertionError(f"{jid}: timed out after {timeout:g} s; last observation {o}")



def api_pods(client, ns: str, jid: str, attempt: int | None = None) -> list:
    from lightkube.resources.core_v1 import Pod

    return sorted(client.list(Pod, namespace=ns, labels=kp.job_selector(jid, attempt)), key=lambda p: p.metadata.name)


def env_of(pod) -> dict:
    return {e.name: e.value for e in pod.spec.containers[0].env if e.value is not None}


def set_label(client, node: str, key: str, value: str | None) -> None:
    from lightkube.resources.core_v1 import Node

    client.patch(Node, node, {"metadata": {"labels": {key: value}}})


def node_ready(client, node: str) -> bool:
    from lightkube.resources.core_v1 import Node

    n = client.get(Node, node)
    return any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))


def foreign_pod(client, ns: str, name: str, node: str, gpus: int) -> None:
    """Another scheduler's pod, bound to `node` (by the admin, as that scheduler would)."""
    from lightkube.models.core_v1 import Container, PodSpec, Toleration
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Pod

    from dlsched.k8s.controlplane import bind_pod

    client.create(Pod(metadata=ObjectMeta(name=name, namespace=ns),
                      spec=PodSpec(schedulerName="someone-else", restartPolicy="Never",
                                   tolerations=[Toleration(key="kwok.x-k8s.io/node", operator="Exists")],
                                   containers=[Container(name="c", image="x",
                                                         resources={"limits": {"nvidia.com/gpu": str(gpus)}})])))
    bind_pod(client, ns, name, node)


@on_k8s
def test_cluster_is_read_from_the_pools_nodes(make):
    b = make()
    c = b.cluster()
    assert c.num_nodes == NODES and c.node_names == tuple(sorted(c.node_names))
    assert c.capacity[:, 0].tolist() == [GPUS_PER_NODE] * NODES
    assert c.capacity[:, 1].tolist() == [96.0] * NODES and c.capacity[:, 2].tolist() == [1024.0] * NODES
    assert c.rack.tolist() == [0] * (NODES // 2) + [1] * (NODES // 2)
    assert set(c.gpu_type.tolist()) == {"NVIDIA-A100-SXM4-80GB"}
    assert b.foreign_usage().shape == (NODES, 3)
    assert b.lease is not None and b.lease.leading
    from dlsched.core.errors import ConfigError

    with pytest.raises(ConfigError, match="namespace 'no-such-namespace' does not exist"):
        make(namespace="no-such-namespace")
    with pytest.raises(ConfigError, match="no node has the label dlsched.io/pool=nowhere"):
        make(pool="nowhere", leader_election=False)


@on_k8s
def test_a_gang_that_cannot_fit_binds_nothing(make, k8s_client, k8s_namespace, tmp_path):
    """Node 3 is full of another scheduler's pod: a 4-worker gang over nodes 0-3 starts no pod at
    all, and says which node could not hold its part. The API server would have bound it: it checks
    no capacity, so the backend must."""
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace, Pod

    b = make()
    other = f"{k8s_namespace}-other"
    k8s_client.create(Namespace(metadata=ObjectMeta(name=other)))
    full = b.cluster().node_names[3]
    foreign_pod(k8s_client, other, "hog", full, GPUS_PER_NODE)
    try:
        wait_until("the foreign pod counted", lambda: b.foreign_usage()[3][0] == GPUS_PER_NODE)
        b.apply([], [launch(tmp_path, "gang", {0: (1, 0), 1: (1, 0), 2: (1, 0), 3: (1, 0)})])
        o = b.observe()["gang"]
        assert o.state == "failed" and f"node {full} cannot hold its part" in o.message and "GPU 1 > 0 free" in o.message
        assert api_pods(k8s_client, k8s_namespace, "gang") == []
        # the same gang on four free nodes starts at once
        b.forget("gang")
        b.apply([], [launch(tmp_path, "gang", {4: (1, 0), 5: (1, 0), 6: (1, 0), 7: (1, 0)}, attempt=1)])
        assert b.observe()["gang"].state == "running"
        assert [p.spec.nodeName for p in api_pods(k8s_client, k8s_namespace, "gang", 1)] == list(b.cluster().node_names[4:])
    finally:
        k8s_client.delete(Pod, "hog", namespace=other, grace_period=0)


@on_k8s
def test_a_gang_whose_create_or_bind_fails_is_rolled_back_whole(make, k8s_client, k8s_namespace, tmp_path, monkeypatch):
    """Two real API refusals: a pod name already taken (create: 409), and a pod another scheduler
    bound first (bind: 409 'already assigned') after its siblings were bound and running. Either
    way no pod of the attempt survives, and a pod that is not the backend's is left alone."""
    from lightkube.models.core_v1 import Container, PodSpec
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Pod

    from dlsched.k8s.controlplane import bind_pod

    b = make()
    squat = kp.pod_name("taken", 0, "worker", 3)
    k8s_client.create(Pod(metadata=ObjectMeta(name=squat, namespace=k8s_namespace),
                          spec=PodSpec(schedulerName="someone-else", containers=[Container(name="c", image="x")])))
    b.apply([], [launch(tmp_path, "taken", {0: (2, 0), 1: (2, 0)})])
    o = b.observe()["taken"]
    assert o.state == "failed" and "409" in o.message and squat in o.message
    assert api_pods(k8s_client, k8s_namespace, "taken") == []
    assert k8s_client.get(Pod, squat, namespace=k8s_namespace).metadata.name == squat  # not ours: untouched

    real_bind = b.api.bind

    def racing_bind(name, uid, node):
        if name.endswith("worker3"):  # another scheduler gets there first
            time.sleep(0.3)  # the siblings are bound (and kwok runs them) meanwhile
            bind_pod(k8s_client, k8s_namespace, name, b.cluster().node_names[7])
        return real_bind(name, uid, node)

    monkeypatch.setattr(b.api, "bind", racing_bind)
    b.apply([], [launch(tmp_path, "raced", {2: (2, 0), 3: (2, 0)})])
    o = b.observe()["raced"]
    assert o.state == "failed" and "already assigned" in o.message and "all 4 pod(s) of attempt 0 deleted" in o.message
    assert api_pods(k8s_client, k8s_namespace, "raced") == []


@on_k8s
def test_bind_create_puts_each_pod_on_its_node_at_creation_without_a_binding(make, k8s_client, k8s_namespace,
                                                                              tmp_path, monkeypatch):
    b = make(bind="create")
    names = b.cluster().node_names
    binds = []
    monkeypatch.setattr(b.api, "bind", lambda *a: binds.append(a) or "")
    b.apply([], [launch(tmp_path, "direct", {1: (1, 0), 2: (2, 0)})])
    pods = api_pods(k8s_client, k8s_namespace, "direct")
    assert [(p.metadata.name, p.spec.nodeName) for p in pods] == [
        ("direct-a0-worker0", names[1]), ("direct-a0-worker1", names[2]), ("direct-a0-worker2", names[2])]
    assert binds == []  # one call a pod: placed by its create
    o = wait_obs(b, "direct", lambda o: o.step > 0)
    assert o.state == "running"
    b.apply(["direct"], [])
    assert b.observe()["direct"].state == "stopped" and api_pods(k8s_client, k8s_namespace, "direct") == []


@on_k8s
def test_pods_are_bound_where_the_plan_says_and_run(make, k8s_client, k8s_namespace, tmp_path):
    from lightkube.resources.core_v1 import Service

    b = make()
    names = b.cluster().node_names
    t0 = time.time()
    b.apply([], [launch(tmp_path, "placed", {0: (2, 0), 5: (1, 0), 6: (1, 0)})])
    pods = api_pods(k8s_client, k8s_namespace, "placed")
    assert [(p.metadata.name, p.spec.nodeName) for p in pods] == [
        ("placed-a0-worker0", names[0]), ("placed-a0-worker1", names[0]), ("placed-a0-worker2", names[5]),
        ("placed-a0-worker3", names[6])]
    assert b.pods_of("placed") == {p.metadata.name: p.spec.nodeName for p in pods}
    assert all(p.spec.schedulerName == "dlsched" for p in pods)
    svc = k8s_client.get(Service, "placed-a0", namespace=k8s_namespace)
    assert svc.spec.clusterIP == "None" and svc.spec.publishNotReadyAddresses
    assert env_of(pods[3])["MASTER_ADDR"] == f"worker0.placed-a0.{k8s_namespace}.svc"
    assert b.run_info("placed")["bound_at"] - t0 < 5
    wait_until("all pods Running (kwok)", lambda: all(p.status.phase == "Running"
                                                      for p in api_pods(k8s_client, k8s_namespace, "placed")))
    o = wait_obs(b, "placed", lambda o: o.step > 0)
    assert o.state == "running" and o.first_step_at is not None and o.steps_per_s == pytest.approx(10 * 4**0.8)
    b.apply(["placed"], [])
    assert b.observe()["placed"].state == "stopped"
    assert api_pods(k8s_client, k8s_namespace, "placed") == []
    with pytest.raises(Exception, match="not found"):
        k8s_client.get(Service, "placed-a0", namespace=k8s_namespace)


@on_k8s
def test_a_resize_replaces_the_pods_with_an_attempt_at_the_new_size(make, k8s_client, k8s_namespace, tmp_path):
    b = make()
    b.apply([], [launch(tmp_path, "grow", {0: (1, 0), 1: (1, 0)})])
    old = {p.metadata.uid for p in api_pods(k8s_client, k8s_namespace, "grow", 0)}
    assert len(old) == 2
    wait_obs(b, "grow", lambda o: o.step >= 5)
    b.apply(["grow"], [launch(tmp_path, "grow", {2: (2, 0), 3: (2, 0)}, attempt=1)])
    o = b.observe()["grow"]
    assert o.state == "running" and o.resume["step"] >= 5 and o.step == o.resume["step"]
    assert api_pods(k8s_client, k8s_namespace, "grow", 0) == []
    new = api_pods(k8s_client, k8s_namespace, "grow", 1)
    assert len(new) == 4 and not old & {p.metadata.uid for p in new}
    for r, p in enumerate(new):
        env = env_of(p)
        assert env["WORLD_SIZE"] == "4" and env["RANK"] == str(r) and env["DLSCHED_ATTEMPT"] == "1"
        assert p.metadata.labels[kp.L_ATTEMPT] == "1" and p.metadata.annotations[kp.A_SIM_BASE] == str(o.resume["step"])
    later = wait_obs(b, "grow", lambda o: o.step > o.resume["step"])
    assert later.steps_per_s == pytest.approx(10 * 4**0.8)


@on_k8s
def test_a_run_is_done_when_kwok_completes_its_pods_at_sim_end(make, k8s_client, k8s_namespace, tmp_path):
    b = make()
    b.apply([], [launch(tmp_path, "short", {0: (1, 0), 1: (1, 0)}, steps=20)])
    end = dt.datetime.fromisoformat(api_pods(k8s_client, k8s_namespace, "short")[0]
                                    .metadata.annotations[kp.A_SIM_END].replace("Z", "+00:00")).timestamp()
    o = wait_obs(b, "short", lambda o: o.state != "running")
    assert o.state == "done" and o.done["steps"] == 20 and o.step == 20
    assert o.done["time"] == pytest.approx(end, abs=0.002)  # its completion record says when (ms on the pod)
    assert time.time() >= end - 0.05  # never before the instant written on the pods
    assert all(p.status.phase == "Succeeded" for p in api_pods(k8s_client, k8s_namespace, "short"))
    b.forget("short")
    assert api_pods(k8s_client, k8s_namespace, "short") == []


@on_k8s
def test_a_node_that_goes_not_ready_fails_its_run_and_joins_again(make, k8s_client, k8s_namespace, tmp_path):
    b = make()
    idx = 2
    name = b.cluster().node_names[idx]
    b.apply([], [launch(tmp_path, "hit", {idx: (1, 0), 3: (1, 0)}), launch(tmp_path, "spared", {4: (1, 0)})])
    assert b.node_events() == []
    set_label(k8s_client, name, "dlsched.test/node-down", "true")
    try:
        events = wait_until("a fail event", lambda: b.node_events())
        assert [(e.node, e.kind) for e in events] == [(idx, "fail")]
        o = b.observe()["hit"]
        assert o.state == "failed" and f"node {name} failed" in o.message and "NotReady" in o.message
        wait_until("the run's pods gone", lambda: api_pods(k8s_client, k8s_namespace, "hit") == [])
        assert b.observe()["spared"].state == "running"
        b.apply([], [launch(tmp_path, "late", {idx: (1, 0)})])  # a launch onto the down node fails at once
        assert "cannot take pods" in b.observe()["late"].message
    finally:
        set_label(k8s_client, name, "dlsched.test/node-down", None)
    events = wait_until("a join event", lambda: b.node_events())
    assert [(e.node, e.kind) for e in events] == [(idx, "join")]
    wait_until("the node Ready", lambda: node_ready(k8s_client, name))


@on_k8s
def test_a_pod_deleted_or_failed_behind_dlscheds_back_fails_its_run(make, k8s_client, k8s_namespace, tmp_path):
    from lightkube.resources.core_v1 import Pod

    b = make()
    b.apply([], [launch(tmp_path, "victim", {0: (1, 0), 1: (1, 0)}), launch(tmp_path, "crash", {2: (1, 0), 3: (1, 0)})])
    k8s_client.delete(Pod, "victim-a0-worker1", namespace=k8s_namespace)
    o = wait_obs(b, "victim", lambda o: o.state != "running")
    assert o.state == "failed" and "victim-a0-worker1" in o.message and "behind dlsched's back" in o.message
    wait_until("the other pod deleted too", lambda: api_pods(k8s_client, k8s_namespace, "victim") == [])
    now = kp.rfc3339(time.time())
    k8s_client.patch(Pod, "crash-a0-worker0", {"metadata": {"annotations": {"dlsched.io/sim-fail-at": now}}},
                     namespace=k8s_namespace)
    o = wait_obs(b, "crash", lambda o: o.state != "running")
    assert o.state == "failed" and "crash-a0-worker0" in o.message and "exit code 1" in o.message
    wait_until("the gang's survivor deleted", lambda: api_pods(k8s_client, k8s_namespace, "crash") == [])


@on_k8s
def test_a_fresh_backend_adopts_running_pods_without_recreating_them(make, k8s_client, k8s_namespace, tmp_path):
    first = make()
    ln = launch(tmp_path, "kept", {0: (1, 0), 1: (1, 0)}, steps=60)
    first.apply([], [ln])
    seen = wait_obs(first, "kept", lambda o: o.step >= 5).step
    uids = [p.metadata.uid for p in api_pods(k8s_client, k8s_namespace, "kept")]
    first.detach()  # a controller that leaves its jobs running (or crashed)
    second = make()
    assert second.adopt(ln)
    assert [p.metadata.uid for p in api_pods(k8s_client, k8s_namespace, "kept")] == uids
    o = second.observe()["kept"]
    assert o.state == "running" and o.step >= seen and o.resume["run"] == first.run_info("kept")["run_id"]
    # a launch that does not match the pods (a store from another time) is refused, and its pods go
    other = launch(tmp_path, "moved", {4: (1, 0)}, steps=60)
    second.apply([], [other])
    second.detach()
    third = make()
    assert not third.adopt(launch(tmp_path, "moved", {5: (1, 0)}, steps=60))
    assert api_pods(k8s_client, k8s_namespace, "moved") == []
    assert third.adopt(ln)
    o = wait_obs(third, "kept", lambda o: o.state != "running", timeout=30)
    assert o.state == "done" and [p.metadata.uid for p in api_pods(k8s_client, k8s_namespace, "kept")] == uids


@on_k8s
def test_leader_election_takeover_and_loss(control_plane, k8s_namespace):
    from lightkube.resources.coordination_v1 import Lease

    from dlsched.live.backends.k8s_lease import LeaderLease

    quick = dict(lease_duration=3, renew_period=0.5, renew_deadline=2.0, retry_period=0.5)
    with control_plane.client() as c1, control_plane.client() as c2, control_plane.client() as admin:
        a, b = LeaderLease(c1, k8s_namespace, "le", "a", **quick), LeaderLease(c2, k8s_namespace, "le", "b", **quick)
        assert a.acquire(timeout=5)
        assert not b.acquire(timeout=1.0)  # a renews: b waits
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("ok", b.acquire(timeout=20)))
        t.start()
        time.sleep(0.7)
        killed = time.monotonic()
        a.stop_renewing()  # a "crashes": no release
        t.join(25)
        took = time.monotonic() - killed
        print(f"takeover {took:.2f} s (lease {quick['lease_duration']} s)")
        assert got.get("ok") and took <= quick["lease_duration"] + 0.5, took
        lease = admin.get(Lease, "le", namespace=k8s_namespace)
        assert lease.spec.holderIdentity == "b" and lease.spec.leaseTransitions == 1
        # someone else takes the Lease from b: b says so within a renew period or two
        lost = []
        b.on_lost.append(lost.append)
        lease.spec.holderIdentity = "intruder"
        lease.spec.renewTime = dt.datetime.now(dt.timezone.utc)
        lease.spec.leaseDurationSeconds = 60
        admin.replace(lease)
        wait_until("b to notice", lambda: b.lost, timeout=5)
        assert "intruder" in b.lost and lost == [b.lost] and not b.leading
        b.release()  # not ours any more: left as it is
        assert admin.get(Lease, "le", namespace=k8s_namespace).spec.holderIdentity == "intruder"


@on_k8s
def test_a_second_controller_waits_and_takes_over_within_the_lease_duration(make, k8s_client, k8s_namespace,
                                                                             tmp_path):
    """client-go's defaults (15 s lease, renew every 2 s): the second backend blocks in its
    constructor while the first leads, and leads 15 s at most after the first stops renewing."""
    from dlsched.core.errors import ConfigError

    first = make()
    with pytest.raises(ConfigError, match="another dlsched controller leads"):
        make(leader_wait_s=1.0)
    made = {}
    t = threading.Thread(target=lambda: made.setdefault("b", make(leader_wait_s=40)))
    t.start()
    time.sleep(1.0)
    assert "b" not in made
    killed = time.monotonic()
    first.lease.stop_renewing()
    t.join(45)
    took = time.monotonic() - killed
    print(f"takeover {took:.2f} s after the leader stopped renewing")
    assert "b" in made and made["b"].lease.leading and took <= 15.5, took
    # the first wakes up (a long GC pause, a partition healed): its next renewal finds the new
    # holder, it knows it lost, and from then on it creates and deletes nothing
    first.lease._stop.clear()
    threading.Thread(target=first.lease._renew_loop, daemon=True).start()
    wait_until("the first to notice", lambda: first.lease.lost, timeout=5)
    first.apply([], [launch(tmp_path, "late", {0: (1, 0)})])
    o = first.observe()["late"]
    assert o.state == "failed" and "lost leadership" in o.message
    assert api_pods(k8s_client, k8s_namespace, "late") == []
    first.detach()  # hands nothing over: the Lease is not its own any more


@on_k8s
def test_the_backend_works_with_the_rbac_rights_only_and_nothing_more(control_plane, k8s_client, k8s_namespace,
                                                                     tmp_path):
    """deploy/k8s/rbac.yaml applied (the Role and RoleBinding into the test's namespace), the backend
    runs under the service account's token: it reads nodes, binds a gang, stops it, elects itself,
    records an event. Calls outside those rules are refused with 403."""
    from lightkube import ApiError, codecs
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace, Node, Pod, Secret

    from dlsched.k8s.controlplane import RESTRICTED_USER
    from dlsched.live.backends.kubernetes import KubernetesBackend

    rbac = Path(__file__).resolve().parents[1] / "deploy" / "k8s" / "rbac.yaml"
    for obj in codecs.load_all_yaml(rbac.read_text()):
        if obj.kind in ("Role", "RoleBinding"):
            obj.metadata.namespace = k8s_namespace
        try:
            k8s_client.create(obj)
        except ApiError as exc:
            assert exc.status.code == 409, exc.status.message  # a cluster-wide object from an earlier run
    restricted = control_plane.kubeconfig_for(RESTRICTED_USER)
    b = KubernetesBackend(kubeconfig=restricted, namespace=k8s_namespace, rate_per_worker=10.0, startup=0.2)
    try:
        assert b.cluster().num_nodes == NODES and b.lease.leading
        b.apply([], [launch(tmp_path, "rbac", {0: (1, 0), 1: (1, 0)})])
        assert b.observe()["rbac"].state == "running"
        assert len(api_pods(k8s_client, k8s_namespace, "rbac")) == 2
        k8s_client.delete(Pod, "rbac-a0-worker0", namespace=k8s_namespace)  # makes it record a Warning event
        wait_obs(b, "rbac", lambda o: o.state == "failed")
        b.forget("rbac")
        b.apply([], [launch(tmp_path, "rbac", {2: (1, 0)}, attempt=1)])
        wait_obs(b, "rbac", lambda o: o.step > 0)
        b.apply(["rbac"], [])
        assert b.observe()["rbac"].state == "stopped" and api_pods(k8s_client, k8s_namespace, "rbac") == []
    finally:
        b.close()
    from lightkube.resources.core_v1 import Event

    assert any(e.reason == "RunFailed" for e in k8s_client.list(Event, namespace=k8s_namespace))
    elsewhere = f"{k8s_namespace}-x"
    k8s_client.create(Namespace(metadata=ObjectMeta(name=elsewhere)))
    with control_plane.client(RESTRICTED_USER) as c:
        for what, call in [("list secrets", lambda: list(c.list(Secret, namespace="*"))),
                           ("delete a node", lambda: c.delete(Node, b.cluster().node_names[0])),
                           ("create a pod in another namespace",
                            lambda: c.create(Pod.from_dict({"metadata": {"name": "p", "namespace": elsewhere},
                                                            "spec": {"containers": [{"name": "c", "image": "x"}]}}))),
                           ("delete a pod in another namespace", lambda: c.delete(Pod, "p", namespace=elsewhere))]:
            with pytest.raises(ApiError) as err:
                call()
            assert err.value.status.code == 403, f"{what}: {err.value.status.code} {err.value.status.message}"


@on_k8s
def test_the_live_controller_runs_jobs_on_kubernetes_and_a_restarted_one_adopts_them(make, k8s_client,
                                                                                    k8s_namespace, tmp_path):
    """The controller and the policy as `dlsched serve` runs them, on the real API: an elastic job
    is started, shrunk when a second arrives, both finish; a controller restarted while a job runs
    (leaving it up) adopts its pods, which are not recreated, and the job finishes."""
    from dlsched.live.controller import Controller
    from dlsched.live.store import Store
    from dlsched.policies.registry import make_policy

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")

    def drive(ctl, until, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ctl.step()
            if until():
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out; jobs: {[(v.id, v.status, v.steps_done) for v in store.list()]}")

    b = make(rate_per_worker=20.0, startup=0.2)
    ctl = Controller(store, b, make_policy("drf"), work_dir=tmp_path, tick=0.1)
    big = store.add(TrainJob(model="mlp", steps=600, workers=1, min_workers=1, max_workers=8, gpus_per_worker=8))
    drive(ctl, lambda: store.get(big.id).status == "running" and b.observe().get(big.id) is not None)
    assert len(api_pods(k8s_client, k8s_namespace, big.id)) == 8  # DRF gives it the whole cluster
    small = store.add(TrainJob(model="mlp", steps=40, workers=1, min_workers=1, max_workers=2))
    drive(ctl, lambda: store.get(small.id).status == "done")
    assert store.get(small.id).steps_done == 40
    assert "resized" in [e.kind for e in store.events(big.id)]
    uids = {p.metadata.uid for p in api_pods(k8s_client, k8s_namespace, big.id)}
    assert uids and api_pods(k8s_client, k8s_namespace, small.id) == []
    ctl.shutdown(stop_jobs=False)
    b.detach()  # the service leaves its jobs up for the next one

    b2 = make(rate_per_worker=20.0, startup=0.2)
    ctl2 = Controller(store, b2, make_policy("drf"), work_dir=tmp_path, tick=0.1)
    assert "adopted" in [e.kind for e in store.events(big.id)]
    assert {p.metadata.uid for p in api_pods(k8s_client, k8s_namespace, big.id)} == uids
    drive(ctl2, lambda: store.get(big.id).status == "done", timeout=60)
    assert store.get(big.id).steps_done == 600
    assert api_pods(k8s_client, k8s_namespace, big.id) == []
    ctl2.shutdown()
    store.close()


@on_k8s
def test_real_mode_reads_the_trainers_files_in_the_job_directory(make, k8s_client, k8s_namespace, tmp_path):
    """No kubelet runs containers here, so the trainer's part is played by hand: it writes its
    progress log and done.json into the job directory, as pods on a shared volume would. The pods
    are real (bound, Running under kwok); real mode reads progress and completion from the files
    and never from the pods' logs."""
    import json

    b = make(mode="real")
    ln = launch(tmp_path, "realjob", {0: (1, 0), 1: (1, 0)}, steps=50)
    b.apply([], [ln])
    pods = api_pods(k8s_client, k8s_namespace, "realjob")
    assert len(pods) == 2 and kp.A_SIM_END not in pods[0].metadata.annotations
    run = env_of(pods[0])["DLSCHED_RUN_ID"]
    assert pods[0].spec.containers[0].args[:2] == ["--job-dir", str(ln.job_dir)]
    o = b.observe()["realjob"]
    assert o.state == "running" and o.step == 0 and o.first_step_at is None
    t = time.time()
    with open(ln.job_dir / "progress.jsonl", "a") as f:
        f.write(json.dumps({"time": t, "event": "resume", "step": 0, "checkpoint": None, "problems": [], "run": run}) + "\n")
        f.write(json.dumps({"time": t, "event": "start", "step": 1, "loss": 2.0, "run": run}) + "\n")
        f.write(json.dumps({"time": t + 1, "event": "progress", "step": 30, "loss": 1.0, "steps_per_s": 29.0,
                            "run": run}) + "\n")
    o = b.observe()["realjob"]
    assert o.state == "running" and o.step == 30 and o.steps_per_s == 29.0 and o.first_step_at == t
    assert o.resume["run"] == run and o.samples[-1] == (30, 1.0)
    (ln.job_dir / "done.json").write_text(json.dumps({"steps": 50, "loss": 0.5}))
    o = b.observe()["realjob"]
    assert o.state == "done" and o.done == {"steps": 50, "loss": 0.5}
    b.forget("realjob")
    wait_until("the pods deleted (gracefully: kwok confirms)", lambda: api_pods(k8s_client, k8s_namespace, "realjob") == [])


@on_k8s
def test_a_dropped_watch_lists_again_and_misses_nothing(make, k8s_client, k8s_namespace, tmp_path):
    """The pod watch's connection breaks (its sockets shut, as a network failure would); a pod is
    deleted meanwhile. The reflector lists again, finds the pod gone, and the run fails as it
    should: a relist is diffed against the cache, so deletions in the gap are not lost."""
    from lightkube.resources.core_v1 import Pod

    b = make()
    b.apply([], [launch(tmp_path, "gap", {0: (1, 0), 1: (1, 0)})])
    r = b._pods
    before = r.relists
    r._transport._shutdown()  # the connection drops under the watch thread
    k8s_client.delete(Pod, "gap-a0-worker1", namespace=k8s_namespace, grace_period=0)
    o = wait_obs(b, "gap", lambda o: o.state != "running")
    assert o.state == "failed" and "behind dlsched's back" in o.message
    assert r.relists > before and r.synced.is_set()
    b.apply([], [launch(tmp_path, "after", {2: (1, 0)})])  # and it keeps watching
    wait_until("the new pod Running on the watch", lambda: b.pod_phases("after") == {"after-a0-worker0": "Running"})


@on_k8s
def test_a_deleted_node_fails_its_run_and_a_cordoned_one_is_left_to_a_graceful_stop(control_plane, make, k8s_client,
                                                                                    k8s_namespace, tmp_path):
    """On a pool of its own (two fresh kwok nodes): cordoning a node is a "fail" event but its pods
    are left running, for the controller's graceful stop (the node is healthy: the trainer can
    checkpoint); uncordoning it is a "join". Deleting a node fails its run at once (grace 0)."""
    from lightkube.resources.core_v1 import Node

    pool = f"p{uuid.uuid4().hex[:6]}"
    names = control_plane.add_nodes(2, gpus_per_node=4, racks=1, pool=pool, prefix=f"{pool}-")
    try:
        b = make(pool=pool)
        assert b.cluster().node_names == tuple(sorted(names))
        b.apply([], [launch(tmp_path, "cordoned", {0: (1, 0)}), launch(tmp_path, "deleted", {1: (1, 0)})])
        k8s_client.patch(Node, names[0], {"spec": {"unschedulable": True}})
        events = wait_until("a fail event", lambda: b.node_events())
        assert [(e.node, e.kind) for e in events] == [(0, "fail")]
        assert b.observe()["cordoned"].state == "running"
        assert "cannot take pods (cordoned" in (b.apply([], [launch(tmp_path, "more", {0: (1, 0)})])
                                               or b.observe()["more"].message)
        b.apply(["cordoned"], [])
        assert b.observe()["cordoned"].state == "stopped"
        k8s_client.patch(Node, names[0], {"spec": {"unschedulable": False}})
        assert [(e.node, e.kind) for e in wait_until("a join event", lambda: b.node_events())] == [(0, "join")]
        k8s_client.delete(Node, names[1])
        assert [(e.node, e.kind) for e in wait_until("a fail event", lambda: b.node_events())] == [(1, "fail")]
        o = b.observe()["deleted"]
        assert o.state == "failed" and f"node {names[1]} failed (deleted)" in o.message
    finally:
        for n in names:
            try:
                k8s_client.delete(Node, n)
            except Exception:  # noqa: BLE001 - already gone
                pass


@on_k8s
def test_a_node_going_not_ready_stops_its_job_and_the_policy_places_it_on_another(make, k8s_client,
                                                                                  k8s_namespace, tmp_path):
    """The node event reaches the core: the job's pods on the NotReady node go, the job waits again
    (not a failed run) and the policy binds it elsewhere; the node offers nothing until Ready."""
    from dlsched.live.controller import Controller
    from dlsched.live.store import Store
    from dlsched.policies.registry import make_policy

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    b = make(rate_per_worker=5.0, startup=0.2)
    ctl = Controller(store, b, make_policy("fifo"), work_dir=tmp_path, tick=0.1)
    j = store.add(TrainJob(model="mlp", steps=100_000, workers=1))

    def nodes_of() -> set[str]:
        return {p.spec.nodeName for p in api_pods(k8s_client, k8s_namespace, j.id)
                if p.metadata.deletionTimestamp is None}

    def step_until(what: str, cond):
        def once():
            ctl.step()
            return cond()
        return wait_until(what, once)

    step_until("the job bound", lambda: len(nodes_of()) == 1)
    (first,) = nodes_of()
    set_label(k8s_client, first, "dlsched.test/node-down", "true")
    try:
        step_until("the job bound on another node", lambda: nodes_of() not in (set(), {first}))
        kinds = [e.kind for e in store.events(j.id)]
        assert "node-failed" in kinds and "failed-run" not in kinds
        assert {n["name"]: n["up"] for n in ctl.cluster_view()["nodes"]}[first] is False
    finally:
        set_label(k8s_client, first, "dlsched.test/node-down", None)
    step_until("the node back", lambda: {n["name"]: n["up"] for n in ctl.cluster_view()["nodes"]}[first])
    ctl.shutdown()
    store.close()


@on_k8s
def test_when_the_leader_dies_the_next_controller_takes_over_and_adopts_its_pods_without_restarting_them(
        make, k8s_client, k8s_namespace, tmp_path):
    """Failover with a job running: the leader stops renewing (a crash: nothing deleted, nothing
    handed over), the waiting controller leads once the lease runs out and adopts the job's pods:
    the same pod UIDs, the run still running, nothing recreated. A 3 s lease keeps the test short
    (the 15 s default is timed by the test above)."""
    quick = {"lease_options": dict(lease_duration=3, renew_period=0.5, renew_deadline=2.0, retry_period=0.5)}
    first = make(**quick)
    ln = launch(tmp_path, "kept", {0: (1, 0), 1: (1, 0)})
    first.apply([], [ln])
    wait_obs(first, "kept", lambda o: o.first_step_at is not None)
    uids = {p.metadata.uid for p in api_pods(k8s_client, k8s_namespace, "kept")}
    assert len(uids) == 2
    made = {}
    t = threading.Thread(target=lambda: made.setdefault("b", make(leader_wait_s=20, **quick)))
    t.start()
    killed = time.monotonic()
    first.lease.stop_renewing()  # the leader dies
    t.join(25)
    took = time.monotonic() - killed
    assert "b" in made and made["b"].lease.leading and took <= 3.5, took
    second = made["b"]
    assert second.adopt(ln)
    assert second.observe()["kept"].state == "running"
    assert {p.metadata.uid for p in api_pods(k8s_client, k8s_namespace, "kept")} == uids


# ====================================================================== faults found by tests/test_k8s_chaos.py


def refused_while(away: dict, real):
    """`real`, refused with a connection error while time.monotonic() < away["until"] (the API
    server restarting, as the chaos test does to the whole control plane)."""
    import httpx2

    def call(*a, **kw):
        if time.monotonic() < away["until"]:
            raise httpx2.ConnectError("[Errno 111] Connection refused")
        return real(*a, **kw)

    return call


@on_k8s
def test_a_candidate_waiting_for_the_lease_keeps_waiting_while_the_api_server_is_away(control_plane, k8s_namespace):
    """A standby controller whose Lease reads fail (the API server restarting) keeps waiting and
    then leads; it used to die with the connection error's traceback."""
    from dlsched.live.backends.k8s_lease import LeaderLease

    quick = dict(lease_duration=3, renew_period=0.5, renew_deadline=2.0, retry_period=0.2)
    with control_plane.client() as c:
        away = {"until": time.monotonic() + 1.0}
        calls = []

        class Restarting:  # the client while the API server restarts
            def __getattr__(self, name):
                real = getattr(c, name)
                calls.append(name)
                return refused_while(away, real)

        lease = LeaderLease(Restarting(), k8s_namespace, "away", "b", **quick)
        assert lease.acquire(timeout=10) and lease.leading
        assert time.monotonic() >= away["until"] and len(calls) >= 3  # it was refused, and tried again
        lease.release()


@on_k8s
def test_deletes_the_api_server_did_not_take_are_sent_again_and_a_stop_does_not_wait_them_out(
        make, k8s_client, k8s_namespace, tmp_path, monkeypatch):
    """The API server away while dlsched deletes pods. A failed run's survivor and a stopped run's
    pods are deleted once it answers again (they used to run on until their job was launched
    again); a stop during the outage neither raises (listing what is left failed) nor waits out
    its timeout once the API server is back; and a run whose pods reached their sim-end before the
    delete reached them checkpoints its last step, not the step it was asked to stop at."""
    from lightkube.resources.core_v1 import Pod

    from dlsched.live.backends import kubernetes
    from dlsched.live.backends.k8s_runs import read_sim_checkpoint

    monkeypatch.setattr(kubernetes, "KILL_WAIT_S", 1.0)
    b = make()
    b.apply([], [launch(tmp_path, "failed", {0: (1, 0), 1: (1, 0)}), launch(tmp_path, "stopped", {2: (1, 0)})])
    wait_until("the pods Running", lambda: set(b.pod_phases("failed").values()) | set(b.pod_phases("stopped").values())
               == {"Running"})
    away = {"until": math.inf}
    monkeypatch.setattr(b.api.client, "delete", refused_while(away, b.api.client.delete))
    monkeypatch.setattr(b.api.client, "list", refused_while(away, b.api.client.list))
    k8s_client.delete(Pod, "failed-a0-worker0", namespace=k8s_namespace, grace_period=0)  # behind dlsched's back
    assert wait_obs(b, "failed", lambda o: o.state != "running").state == "failed"
    b.apply(["stopped"], [], timeout=1.0)  # nothing taken, nothing listed: no exception
    o = b.observe()["stopped"]
    assert o.state == "stopped" and "still there" in o.message
    assert [p.metadata.name for p in api_pods(k8s_client, k8s_namespace, "failed")] == ["failed-a0-worker1"]
    assert len(api_pods(k8s_client, k8s_namespace, "stopped")) == 1
    away["until"] = 0.0  # back: the next round sends the deletes again
    wait_until("the survivors deleted", lambda: b.observe() is not None and api_pods(k8s_client, k8s_namespace, "failed")
               == [] == api_pods(k8s_client, k8s_namespace, "stopped"))

    # away for 3 s from the stop on; the 10-step run reaches its sim-end (1.5 s) meanwhile
    b.apply([], [launch(tmp_path, "late", {3: (1, 0)}, steps=10)])
    away["until"] = time.monotonic() + 3.0
    t0 = time.monotonic()
    b.apply(["late"], [], timeout=20.0)
    took = time.monotonic() - t0
    o = b.observe()["late"]
    assert took < 8.0 and o.state == "stopped" and "force" not in o.message, (took, o)
    assert o.step == 10 and read_sim_checkpoint(tmp_path / "late") == 10
    assert api_pods(k8s_client, k8s_namespace, "late") == []


@on_k8s
def test_a_run_that_finished_before_its_node_failed_is_done_not_lost(make, k8s_client, tmp_path):
    """Its pods Succeeded, then the node went NotReady before the controller looked: the run is
    done (it used to be failed, and the job trained again from its last checkpoint), and the sim
    checkpoint is its last step, so a relaunch would only confirm the end."""
    from dlsched.live.backends.k8s_runs import read_sim_checkpoint

    b = make()
    idx = 5
    name = b.cluster().node_names[idx]
    b.apply([], [launch(tmp_path, "finished", {idx: (1, 0)}, steps=10)])
    wait_until("the pod Succeeded on the watch", lambda: b.pod_phases("finished") == {"finished-a0-worker0": "Succeeded"})
    set_label(k8s_client, name, "dlsched.test/node-down", "true")
    try:
        assert b.wait_for(lambda: idx in b._down, WAIT)
        o = b.observe()["finished"]
        assert o.state == "done" and o.done["steps"] == 10, o
        assert read_sim_checkpoint(tmp_path / "finished") == 10
    finally:
        set_label(k8s_client, name, "dlsched.test/node-down", None)
    wait_until("the node Ready", lambda: node_ready(k8s_client, name))


@on_k8s
def test_pods_that_reached_their_end_unseen_before_their_delete_was_taken_are_not_trained_again(
        make, k8s_client, k8s_namespace, tmp_path, monkeypatch):
    """The API server away from a stop (or a failure) on, past the run's sim-end, and the backend's
    pod watch away when kwok completed the pods (it lists again after an API server restart, and a
    Succeeded pod whose delete is then taken goes at once): the backend never sees them Succeeded.
    Their deletes were taken after their end, so they may have trained the job to the end: the next
    attempt resumes at the last step (it used to resume from the stop's checkpoint and train the
    job to the end a second time: tests/test_k8s_chaos.py, in CI)."""
    from lightkube.resources.core_v1 import Pod

    from dlsched.live.backends import kubernetes
    from dlsched.live.backends.k8s_runs import read_sim_checkpoint

    monkeypatch.setattr(kubernetes, "KILL_WAIT_S", 1.0)
    b = make()
    watch = b._pods
    seen_succeeded = []

    def blind(kind, uid, new, old):  # the watch away whenever a pod turned Succeeded
        if new is not None and new.phase == "Succeeded":
            seen_succeeded.append(uid)
            return
        real(kind, uid, new, old)

    real = watch.on_change
    monkeypatch.setattr(watch, "on_change", blind)
    b.apply([], [launch(tmp_path, "stopped", {0: (1, 0)}, steps=10),
                 launch(tmp_path, "failed", {1: (1, 0), 2: (1, 0)}, steps=10)])
    wait_until("the pods Running", lambda: set(b.pod_phases("stopped").values()) | set(b.pod_phases("failed").values())
               == {"Running"})
    end = dt.datetime.fromisoformat(api_pods(k8s_client, k8s_namespace, "stopped")[0]
                                    .metadata.annotations[kp.A_SIM_END].replace("Z", "+00:00")).timestamp()
    assert time.time() < end - 0.3  # (10 steps at 10/s after a 0.5 s start: about 1.5 s)
    away = {"until": time.monotonic() + (end - time.time()) + 2.0}  # the API server back 2 s after the end
    monkeypatch.setattr(b.api.client, "delete", refused_while(away, b.api.client.delete))
    k8s_client.delete(Pod, "failed-a0-worker1", namespace=k8s_namespace, grace_period=0)  # behind dlsched's back
    assert wait_obs(b, "failed", lambda o: o.state != "running").state == "failed"  # its survivor's delete refused
    b.apply(["stopped"], [], timeout=20.0)  # asked before the end, taken after it
    o = b.observe()["stopped"]
    assert time.time() > end and o.state == "stopped" and o.step == 10, o
    assert read_sim_checkpoint(tmp_path / "stopped") == 10
    wait_until("the failed run's survivor deleted", lambda: b.observe() is not None
               and api_pods(k8s_client, k8s_namespace, "failed") == [])
    assert seen_succeeded, "kwok never completed a pod: nothing was tested"
    b.apply([], [launch(tmp_path, "stopped", {0: (1, 0)}, steps=10, attempt=1),
                 launch(tmp_path, "failed", {1: (1, 0)}, steps=10, attempt=1)])
    for jid in ("stopped", "failed"):
        pod, = api_pods(k8s_client, k8s_namespace, jid, attempt=1)
        assert pod.metadata.annotations[kp.A_SIM_BASE] == "10", jid  # it only confirms the end
