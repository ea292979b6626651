"""pytest fixtures: one real local Kubernetes control plane per test session, one namespace per test.

Use in a test module (tests marked `k8s` and grouped so that `pytest -n 2 --dist loadgroup` runs them
all on one worker, hence one control plane):

    from tests.k8s_control_plane import control_plane, k8s_client, k8s_namespace  # noqa: F401

    pytestmark = [pytest.mark.k8s, pytest.mark.xdist_group("k8s")]

The binaries come from `find_binaries()` (DLSCHED_K8S_BIN, or what deploy/k8s/bins.sh built); where
none are built but `go` is on PATH they are built once (20-40 min cold, under a lock, so two xdist
workers never build at the same time), so a plain `pytest` on a machine with Go runs these tests.
Without binaries the tests skip, or fail when DLSCHED_K8S_REQUIRED=1 (CI on a machine that should
have them: a green run cannot hide a missing build).

The session cluster: 8 kwok fake nodes `t-r{0,1}-n{0..3}`, 4 per rack, 2 racks, 8 nvidia.com/gpu
each, zone-a, pool `default`. Tests must leave nodes as they found them (a node they fail, they heal)
and never delete namespaces: without kube-controller-manager a deleted namespace stays Terminating.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from typing import Iterator

import pytest

#: The fixture cluster's shape, for tests that check it.
NODES, GPUS_PER_NODE, RACKS, NODE_PREFIX = 8, 8, 2, "t-"
#: Seconds a test waits for the API, kwok or a watch: they act within a second; the rest is
#: headroom for a busy 2-core machine.
WAIT = 20.0


def wait_until(what: str, fn, timeout: float = WAIT):
    """`fn()` once it is truthy, polled every 0.1 s; an AssertionError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")


def _unavailable(reason: str) -> None:
    if os.environ.get("DLSCHED_K8S_REQUIRED") == "1":
        pytest.fail(f"DLSCHED_K8S_REQUIRED=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def binaries_or_skip(log_dir=None):
    """The folder of the Kubernetes binaries (built once where `go` is on PATH); skips the test
    (fails it under DLSCHED_K8S_REQUIRED=1) where there are none, or lightkube is missing."""
    try:
        import lightkube  # noqa: F401
    except ImportError:
        _unavailable("lightkube is not installed (pip install -e '.[k8s]')")
    from dlsched.core.errors import DlschedError
    from dlsched.k8s.controlplane import build_binaries, find_binaries

    bins = find_binaries()
    if bins is None and shutil.which("go") is not None:
        try:
            bins = build_binaries(log=None if log_dir is None else log_dir / "bins.log")
        except DlschedError as exc:
            _unavailable(f"building the Kubernetes binaries failed: {exc}")
    if bins is None:
        _unavailable("no Kubernetes binaries (etcd, kube-apiserver, kwok, kube-scheduler) and no `go` to build "
                     "them: run `bash deploy/k8s/bins.sh` or set DLSCHED_K8S_BIN")
    return bins


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator["ControlPlane"]:  # noqa: F821
    """A started ControlPlane (etcd, kube-apiserver, kwok on 127.0.0.1) with NODES Ready fake nodes."""
    from dlsched.k8s.controlplane import ControlPlane

    bins = binaries_or_skip(tmp_path_factory.mktemp("k8s-build"))
    cp = ControlPlane(workdir=tmp_path_factory.mktemp("k8s"), bin_dir=bins)
    cp.start()
    try:
        cp.add_nodes(NODES, gpus_per_node=GPUS_PER_NODE, racks=RACKS, prefix=NODE_PREFIX)
        yield cp
    finally:
        cp.stop()


@pytest.fixture
def k8s_client(control_plane) -> Iterator["lightkube.Client"]:  # noqa: F821
    """An admin (system:masters) lightkube Client of the session control plane."""
    with control_plane.client() as client:
        yield client


@pytest.fixture
def k8s_namespace(control_plane) -> str:
    """A fresh namespace `dlsched-t-<uuid>` for one test (never deleted; see the module doc)."""
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace

    name = f"dlsched-t-{uuid.uuid4().hex[:12]}"
    with control_plane.client() as client:
        client.create(Namespace(metadata=ObjectMeta(name=name)))
    return name
