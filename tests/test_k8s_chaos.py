"""The live controller on Kubernetes under compounded, seeded faults (small, for CI; the large run
is `benchmarks/k8s_faults.py`, its figures in BENCHMARKS.md and docs/KUBERNETES.md).

Fourteen small sim-mode jobs on four kwok nodes of their own pool, two controllers competing for
the Lease, while the injector (`tests/k8s_chaos.py`) kills the leader by SIGKILL, turns nodes
NotReady and back, deletes Running pods behind dlsched's back and restarts kube-apiserver. An API
server restart touches everything on its control plane, so this module starts a control plane of
its own instead of the session's (about 6 s).
"""

from __future__ import annotations

import json
from typing import Iterator

import pytest

from tests.k8s_chaos import KINDS, K8sChaosConfig, run_k8s_chaos

pytestmark = [pytest.mark.k8s, pytest.mark.chaos, pytest.mark.xdist_group("k8s")]


@pytest.fixture(scope="module")
def chaos_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator["ControlPlane"]:  # noqa: F821
    from dlsched.k8s.controlplane import ControlPlane
    from tests.k8s_control_plane import binaries_or_skip

    bins = binaries_or_skip(tmp_path_factory.mktemp("k8s-chaos-build"))
    cp = ControlPlane(workdir=tmp_path_factory.mktemp("k8s-chaos"), bin_dir=bins)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


def test_every_job_ends_once_on_kubernetes_under_faults(chaos_plane, tmp_path):
    """Every job finished exactly once (one "done" in the store, all its steps, at most one attempt
    that trained it to the end) or failed with a reason; no two attempts of a job had Running pods
    at once (from the harness's own watch of every pod); no pod of ours stayed bound to a NotReady
    node; nothing of ours runs at the end; every kind of fault was injected; the killed leader's
    successor took over."""
    cfg = K8sChaosConfig(jobs=14, faults=6, seed=28, steps=(200, 400), arrivals_s=12.0, timeout_s=240)
    report = run_k8s_chaos(chaos_plane, tmp_path, cfg)
    summary = report.summary()
    print(json.dumps(summary, indent=1))
    assert report.problems() == [], json.dumps(summary, indent=1)
    assert set(report.faults_by_kind) == set(KINDS), summary  # every kind was really injected
    assert len(report.finished_once) + len(report.failed) == cfg.jobs, summary
    assert all(reason.strip() for reason in report.failed.values()), summary
    assert report.run_twice == [] and report.overlaps == [], summary
    assert report.left_on_dead_nodes == [] and report.pods_left_running == [], summary
    assert len(report.leaders) >= 2 and report.candidate_exits["killed by the injector"] >= 1, summary
    # the API server is back and answering (nothing after this test finds it restarting)
    from lightkube.resources.core_v1 import Node

    with chaos_plane.client() as c:
        assert len(list(c.list(Node, labels={"type": "kwok"}))) == cfg.nodes


def test_the_api_server_restarts_on_its_port_with_its_certificates_and_data(chaos_plane):
    """`ControlPlane.restart_apiserver`: a new process on the same port, serving the same etcd
    with the same certificate, so a client made before the restart keeps working; the components
    keep their stop order (kwok, API server, etcd)."""
    import uuid

    from lightkube.resources.core_v1 import Namespace

    name = f"restart-{uuid.uuid4().hex[:8]}"
    chaos_plane.ensure_namespace(name)
    port, pid, order = chaos_plane.ports["apiserver"], chaos_plane.pids()["kube-apiserver"], list(chaos_plane.pids())
    with chaos_plane.client() as c:
        took = chaos_plane.restart_apiserver()
        assert chaos_plane.pids()["kube-apiserver"] != pid and chaos_plane.ports["apiserver"] == port
        assert list(chaos_plane.pids()) == order and all(chaos_plane.alive().values())
        assert c.get(Namespace, name).metadata.name == name
    print(f"API server restarted in {took:.2f} s")
    assert 0 < took < 30
