"""The Kubernetes backend's kit for the backend conformance suite (tests/test_backend_conformance.py).

It runs `KubernetesBackend` in sim mode on the session's real control plane (tests/k8s_control_plane.py:
kube-apiserver, etcd and kwok with 8 fake GPU nodes), each backend in a fresh namespace. Time is the
wall clock. A crash is kwok failing one pod of the run (annotation `dlsched.io/sim-fail-at` = now:
the pod turns Failed with exit code 1, as a dead trainer would); node loss is the label
`dlsched.test/node-down=true`, which kwok's stage turns into Ready=False, and removing it heals the
node. `close` removes any such label left behind and closes the backends it made.

    from tests.k8s_conformance_kit import kubernetes_kit
    kit = kubernetes_kit(request)       # request: any pytest fixture request (module scope is fine)
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from pathlib import Path

import pytest

from dlsched.live.spec import TrainJob

DOWN_LABEL = "dlsched.test/node-down"


def kubernetes_kit(request) -> "KubernetesKit":
    """A kit on the session control plane. The fixture `control_plane` comes from
    tests/k8s_control_plane.py; when the requesting module did not import it, that module is
    registered as a pytest plugin here so the fixture (session scoped: one control plane) resolves."""
    try:
        cp = request.getfixturevalue("control_plane")
    except pytest.FixtureLookupError:
        import tests.k8s_control_plane as fixtures

        pm = request.config.pluginmanager
        if not pm.is_registered(fixtures):
            pm.register(fixtures, "dlsched-k8s-control-plane")
        cp = request.getfixturevalue("control_plane")
    return KubernetesKit(cp)


class KubernetesKit:
    """Kit protocol: name, make(tmp_path), job(steps, **kw), pass_time(s), crash(backend, job_id),
    fail_node(backend, node), join_node(backend, node), close()."""

    name = "kubernetes"
    shared_backend = False
    rate_per_worker = 10.0
    startup = 0.5

    def __init__(self, control_plane):
        self.cp = control_plane
        self.client = control_plane.client()
        self.backends: list = []
        self.downed: set[str] = set()

    # ------------------------------------------------------------------ the protocol
    def make(self, tmp_path: Path):
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Namespace

        from dlsched.live.backends.kubernetes import KubernetesBackend

        ns = f"dlsched-k-{uuid.uuid4().hex[:10]}"
        self.client.create(Namespace(metadata=ObjectMeta(name=ns)))
        b = KubernetesBackend(kubeconfig=self.cp.kubeconfig(), namespace=ns, mode="sim",
                              rate_per_worker=self.rate_per_worker, startup=self.startup, leader_election=True)
        self.backends.append(b)
        return b

    def job(self, steps: int, **kw) -> TrainJob:
        return TrainJob(model="mlp", steps=steps, **kw)

    def pass_time(self, seconds: float) -> None:
        time.sleep(seconds)

    def crash(self, backend, job_id: str) -> None:
        """kwok fails the run's first pod now (exit code 1), as if its trainer died."""
        from lightkube.resources.core_v1 import Pod

        pod = sorted(backend.pods_of(job_id))[0]
        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        self.client.patch(Pod, pod, {"metadata": {"annotations": {"dlsched.io/sim-fail-at": now}}},
                          namespace=backend.namespace)

    def fail_node(self, backend, node: int) -> None:
        name = backend.cluster().node_names[node]
        self.downed.add(name)
        self._label(name, "true")

    def join_node(self, backend, node: int) -> None:
        name = backend.cluster().node_names[node]
        self._label(name, None)
        self.downed.discard(name)
        self.wait_ready(name)

    def close(self) -> None:
        for name in list(self.downed):
            self._label(name, None)
            self.wait_ready(name)
        self.downed.clear()
        for b in self.backends:
            b.close()
        self.backends.clear()
        self.client.close()

    # ------------------------------------------------------------------ helpers
    def _label(self, node: str, value: str | None) -> None:
        from lightkube.resources.core_v1 import Node

        self.client.patch(Node, node, {"metadata": {"labels": {DOWN_LABEL: value}}})

    def wait_ready(self, node: str, timeout: float = 30.0) -> None:
        from lightkube.resources.core_v1 import Node

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            n = self.client.get(Node, node)
            if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or [])):
                return
            time.sleep(0.1)
        raise AssertionError(f"node {node} not Ready {timeout:.0f} s after its down label was removed")
