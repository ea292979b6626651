"""The local Kubernetes control plane (dlsched.k8s) and kwok's stages, against the real thing.

Everything here runs on one session control plane (tests/k8s_control_plane.py): etcd,
kube-apiserver and kwok on 127.0.0.1, 8 fake GPU nodes. Each behaviour the Kubernetes backend will
rely on is exercised for real: loopback-only listeners, node readiness and labels, a node failing
and healing, pods bound through the Binding subresource running, completing at their
`dlsched.io/sim-end` instant, failing at `dlsched.io/sim-fail-at`, being deleted without a kubelet,
RBAC refusing and then allowing the restricted token, and every process gone after stop.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any, Callable

import psutil
import pytest

from tests.k8s_control_plane import GPUS_PER_NODE, NODE_PREFIX, NODES, control_plane, k8s_client, k8s_namespace  # noqa: F401

pytestmark = [pytest.mark.k8s, pytest.mark.xdist_group("k8s")]

WAIT = 20.0  # seconds; kwok acts within a second, the rest is headroom for a busy 2-core machine


def wait_for(what: str, fn: Callable[[], Any], timeout: float = WAIT) -> Any:
    """Poll `fn` until it returns something truthy; fail naming `what` (and the last value)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def ready_status(node) -> str | None:
    return next((c.status for c in (node.status.conditions or []) if c.type == "Ready"), None)


def rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_pod(name: str, annotations: dict[str, str] | None = None):
    from lightkube.models.core_v1 import Container, PodSpec
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Pod

    return Pod(
        metadata=ObjectMeta(name=name, labels={"app.kubernetes.io/managed-by": "dlsched"}, annotations=annotations),
        spec=PodSpec(schedulerName="dlsched", restartPolicy="Never",
                     containers=[Container(name="worker", image="dlsched/worker:fake",
                                           resources={"limits": {"nvidia.com/gpu": "1"}})]),
    )


def bind(client, ns: str, pod: str, node: str) -> None:
    """Bind as dlsched will: POST pods/{pod}/binding (what a scheduler does; no spec.nodeName)."""
    from dlsched.k8s import bind_pod

    bind_pod(client, ns, pod, node)


def pod_phase(client, ns: str, name: str) -> str | None:
    from lightkube import ApiError
    from lightkube.resources.core_v1 import Pod

    try:
        return client.get(Pod, name, namespace=ns).status.phase
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise


# --------------------------------------------------------------------------- the control plane itself


def test_listens_on_loopback_only(control_plane):
    """Every listening socket of every component is on 127.0.0.1, and every connection they hold
    is to 127.0.0.1: nothing on this machine's other addresses, no traffic off it. kwok serves
    nothing at all."""
    listening: dict[str, set[int]] = {}
    for name, pid in control_plane.pids().items():
        conns = psutil.Process(pid).net_connections(kind="inet")
        listens = [c for c in conns if c.status == psutil.CONN_LISTEN]
        assert all(c.laddr.ip == "127.0.0.1" for c in listens), (name, listens)
        remote = [c for c in conns if c.raddr]
        assert all(c.raddr.ip == "127.0.0.1" for c in remote), (name, remote)
        listening[name] = {c.laddr.port for c in listens}
    ports = control_plane.ports
    assert {ports["etcd"], ports["etcd-peer"]} <= listening["etcd"]
    assert ports["apiserver"] in listening["kube-apiserver"]
    assert listening["kwok"] == set()
    assert control_plane.server == f"https://127.0.0.1:{ports['apiserver']}"
    assert set(control_plane.start_seconds) >= {"etcd", "kube-apiserver", "kwok", "add_nodes"}


def test_nodes_ready_with_gpus_and_labels(k8s_client):
    from lightkube.resources.core_v1 import Node

    nodes = [n for n in k8s_client.list(Node, labels={"type": "kwok"}) if n.metadata.name.startswith(NODE_PREFIX)]
    assert len(nodes) == NODES
    racks: dict[str, int] = {}
    for n in nodes:
        labels = n.metadata.labels
        assert ready_status(n) == "True", n.metadata.name
        assert n.status.allocatable["nvidia.com/gpu"] == str(GPUS_PER_NODE)
        assert n.status.capacity["nvidia.com/gpu"] == str(GPUS_PER_NODE)
        assert labels["kubernetes.io/hostname"] == n.metadata.name
        assert labels["topology.kubernetes.io/zone"] == "zone-a"
        assert labels["dlsched.io/pool"] == "default"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
        assert n.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
        assert [(t.key, t.value, t.effect) for t in n.spec.taints] == [("kwok.x-k8s.io/node", "fake", "NoSchedule")]
        # loopback, never a 10.x: an accidental logs/exec call would dial this machine only
        assert [a.address for a in n.status.addresses if a.type == "InternalIP"] == ["127.0.0.1"]
        racks[labels["dlsched.io/rack"]] = racks.get(labels["dlsched.io/rack"], 0) + 1
    assert racks == {f"{NODE_PREFIX}r0": 4, f"{NODE_PREFIX}r1": 4}


def test_node_down_label_flips_ready_and_back(k8s_client):
    from lightkube.resources.core_v1 import Node
    from lightkube.types import PatchType

    name = f"{NODE_PREFIX}r1-n3"
    label = "dlsched.test/node-down"
    k8s_client.patch(Node, name, {"metadata": {"labels": {label: "true"}}}, patch_type=PatchType.MERGE)
    try:
        node = wait_for("the node to turn NotReady", lambda: (lambda n: n if ready_status(n) == "False" else None)(
            k8s_client.get(Node, name)))
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        assert ready.reason == "NodeDown"
        # only Ready changed: the other conditions stay as the kubelet (kwok) reported them
        assert {c.type for c in node.status.conditions} >= {"MemoryPressure", "DiskPressure", "PIDPressure"}
    finally:
        k8s_client.patch(Node, name, {"metadata": {"labels": {label: None}}}, patch_type=PatchType.MERGE)
    wait_for("the node to be Ready again", lambda: ready_status(k8s_client.get(Node, name)) == "True")


# --------------------------------------------------------------------------- pods


def test_bound_pod_runs_then_succeeds_at_sim_end(k8s_client, k8s_namespace):
    from lightkube.resources.core_v1 import Pod

    ns, name = k8s_namespace, "worker-0"
    end = time.time() + 5.0
    k8s_client.create(make_pod(name, {"dlsched.io/sim-end": rfc3339(end)}), namespace=ns)
    time.sleep(0.5)
    assert pod_phase(k8s_client, ns, name) == "Pending"  # not bound: kwok leaves it alone
    bind(k8s_client, ns, name, f"{NODE_PREFIX}r0-n0")
    wait_for("the bound pod to run", lambda: pod_phase(k8s_client, ns, name) == "Running")
    pod = k8s_client.get(Pod, name, namespace=ns)
    assert pod.spec.nodeName == f"{NODE_PREFIX}r0-n0"
    assert pod.status.containerStatuses[0].state.running is not None
    assert pod.status.hostIP == "127.0.0.1"
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"
    assert time.time() < end, "too slow to see Running before sim-end; the check below would mean nothing"
    wait_for("the pod to succeed", lambda: pod_phase(k8s_client, ns, name) == "Succeeded", timeout=WAIT + 4)
    seen = time.time()
    # the annotation holds whole seconds, so the stage fires at floor(end); never a second early
    assert seen >= int(end) - 0.05, (seen, end)
    assert seen <= end + 5.0, (seen, end)
    term = k8s_client.get(Pod, name, namespace=ns).status.containerStatuses[0].state.terminated
    assert (term.exitCode, term.reason) == (0, "Completed")


def test_pod_fails_at_sim_fail_at(k8s_client, k8s_namespace):
    from lightkube.resources.core_v1 import Pod

    ns, name = k8s_namespace, "worker-fail"
    fail_at = time.time() + 2.0
    k8s_client.create(make_pod(name, {"dlsched.io/sim-fail-at": rfc3339(fail_at)}), namespace=ns)
    bind(k8s_client, ns, name, f"{NODE_PREFIX}r0-n1")
    wait_for("the pod to run", lambda: pod_phase(k8s_client, ns, name) in ("Running", "Failed"))
    wait_for("the pod to fail", lambda: pod_phase(k8s_client, ns, name) == "Failed")
    assert time.time() >= int(fail_at) - 0.05
    term = k8s_client.get(Pod, name, namespace=ns).status.containerStatuses[0].state.terminated
    assert term.exitCode == 1 and term.reason == "Error"


def test_pod_without_sim_end_keeps_running_and_is_deleted_after_binding(k8s_client, k8s_namespace):
    """A bound pod's deletion is graceful (deletionTimestamp, then the kubelet confirms); kwok's
    delete stage plays that kubelet, so the pod disappears."""
    from lightkube.resources.core_v1 import Pod

    ns, name = k8s_namespace, "worker-del"
    k8s_client.create(make_pod(name), namespace=ns)
    bind(k8s_client, ns, name, f"{NODE_PREFIX}r1-n0")
    wait_for("the pod to run", lambda: pod_phase(k8s_client, ns, name) == "Running")
    time.sleep(1.5)
    assert pod_phase(k8s_client, ns, name) == "Running"  # no sim-end: it runs until deleted
    k8s_client.delete(Pod, name, namespace=ns)
    wait_for("the deleted pod to disappear", lambda: pod_phase(k8s_client, ns, name) is None)


# --------------------------------------------------------------------------- RBAC


def test_restricted_token_is_refused_until_a_role_is_bound(control_plane, k8s_client, k8s_namespace):
    from lightkube import ApiError
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
    from lightkube.resources.core_v1 import Pod
    from lightkube.resources.rbac_authorization_v1 import ClusterRole, RoleBinding

    from dlsched.k8s import RESTRICTED_USER

    ns = k8s_namespace
    with control_plane.client(RESTRICTED_USER) as restricted:
        with pytest.raises(ApiError) as refused:
            list(restricted.list(Pod, namespace=ns))
        assert refused.value.status.code == 403

        role = f"dlsched-t-pods-{uuid.uuid4().hex[:8]}"  # cluster-scoped, left behind like the namespaces
        k8s_client.create(ClusterRole(metadata=ObjectMeta(name=role),
                                      rules=[PolicyRule(apiGroups=[""], resources=["pods"], verbs=["get", "list", "watch"])]))
        # the subject as production will write it: the dlsched service account
        k8s_client.create(RoleBinding(metadata=ObjectMeta(name="dlsched", namespace=ns),
                                      roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name=role),
                                      subjects=[Subject(kind="ServiceAccount", name="dlsched", namespace="dlsched")]),
                          namespace=ns)

        def allowed() -> bool:
            try:
                list(restricted.list(Pod, namespace=ns))
                return True
            except ApiError as exc:
                assert exc.status.code == 403
                return False

        wait_for("the RoleBinding to take effect", allowed, timeout=10)
        with pytest.raises(ApiError) as elsewhere:  # bound in one namespace only
            list(restricted.list(Pod, namespace="default"))
        assert elsewhere.value.status.code == 403
        with pytest.raises(ApiError) as no_create:  # and read-only there
            restricted.create(make_pod("not-allowed"), namespace=ns)
        assert no_create.value.status.code == 403


# --------------------------------------------------------------------------- stop


def test_stop_leaves_no_process(control_plane, tmp_path):
    """A second control plane, with kube-scheduler this time: its listeners are on loopback, its
    PIDs are recorded in state.json, and after stop() every PID is gone."""
    from dlsched.k8s import ControlPlane
    from dlsched.k8s.controlplane import read_state

    cp = ControlPlane(workdir=tmp_path / "cp", bin_dir=control_plane.bin_dir, with_scheduler=True)
    cp.start()
    try:
        pids = cp.pids()
        assert set(pids) == {"etcd", "kube-apiserver", "kube-scheduler", "kwok"}
        sched = psutil.Process(pids["kube-scheduler"]).net_connections(kind="inet")
        assert [c.laddr.ip for c in sched if c.status == psutil.CONN_LISTEN] == ["127.0.0.1"]
        assert {p["name"]: p["pid"] for p in read_state(cp.dir)["processes"]} == pids
        # its queue lengths are readable (what a replay waits on), all empty with no pod yet
        queue = cp.scheduler_queue()
        assert {"active", "backoff", "unschedulable"} <= set(queue) and not any(queue.values()), queue
        assert control_plane.scheduler_queue() == {}  # the session's control plane runs no kube-scheduler
    finally:
        outcome = cp.stop()
    assert outcome == {"kwok": "stopped", "kube-scheduler": "stopped", "kube-apiserver": "stopped", "etcd": "stopped"}
    assert [pid for pid in pids.values() if psutil.pid_exists(pid)] == []
    assert read_state(cp.dir) is None


def test_cli_up_detach_then_down(control_plane, tmp_path):
    """`dlsched k8s up --detach` leaves it running with PIDs recorded; `down` stops each of them."""
    from typer.testing import CliRunner

    from dlsched.cli_k8s import k8s_app
    from dlsched.k8s.controlplane import read_state

    folder = tmp_path / "cli"
    runner = CliRunner()
    env = {"DLSCHED_K8S_BIN": str(control_plane.bin_dir)}
    res = runner.invoke(k8s_app, ["up", "--nodes", "2", "--dir", str(folder), "--detach"], env=env)
    state = read_state(folder)
    pids = {p["name"]: p["pid"] for p in (state or {}).get("processes", [])}
    try:
        assert res.exit_code == 0, res.output
        assert f"export KUBECONFIG={folder}" in res.output.replace("\n", "")
        assert set(pids) == {"etcd", "kube-apiserver", "kwok"} and all(psutil.pid_exists(p) for p in pids.values())
        again = runner.invoke(k8s_app, ["up", "--dir", str(folder)], env=env)
        assert again.exit_code == 2 and "still running" in again.output
        from lightkube import Client, KubeConfig
        from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

        with Client(config=KubeConfig.from_file(folder / "kubeconfig-dlsched-admin"), trust_env=False) as c:
            crd = c.get(CustomResourceDefinition, "dljobs.dlsched.io")  # the DLJob door, ready for kubectl
            assert any(x.type == "Established" and x.status == "True" for x in crd.status.conditions)
    finally:
        res = runner.invoke(k8s_app, ["down", "--dir", str(folder)])
    assert res.exit_code == 0, res.output
    assert "etcd stopped" in res.output
    assert [pid for pid in pids.values() if psutil.pid_exists(pid)
            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE] == []
    res = runner.invoke(k8s_app, ["down", "--dir", str(folder)])
    assert res.exit_code == 2 and "no control plane recorded" in res.output
