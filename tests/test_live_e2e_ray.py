"""End to end on Ray: a local multi-node Ray cluster (several raylets on this machine, named
nodes with GPU slots), `dlsched serve --backend ray` connected to it, real jobs through the API,
one of them resized across nodes while it runs."""

from __future__ import annotations

import pytest

from tests.live_service import Service, all_ended, progress_records

ray = pytest.importorskip("ray", reason="Ray is not installed")


@pytest.fixture(scope="module")
def ray_cluster():
    from tests.local_ray import LocalRayCluster

    cluster = LocalRayCluster({"a": 1, "b": 1}, slot_resource="gpu_slot", cpus_per_node=2)
    yield cluster
    left = cluster.close()
    assert not left, f"Ray processes left behind: {left}"


@pytest.mark.long
def test_jobs_run_resize_and_finish_on_a_multi_node_ray_cluster(tmp_path, ray_cluster):
    svc = Service(tmp_path, "drf", None, backend="ray", ray_address=ray_cluster.address)
    svc.start(timeout=120)
    try:
        job = {"model": "mlp", "batch_size": 32, "workers": 1, "min_workers": 1, "max_workers": 2,
               "checkpoint_every_s": 2}
        # 1000 steps: the second job comes as soon as the first is placed on both nodes, and the shrink
        # it causes lands within a tick or two, before the first job is far into its steps (measured:
        # before its first step); its steps are not what makes the resize happen
        first = svc.submit(name="spread", steps=1000, seed=1, **job)
        jobs = svc.wait(lambda js: js[0]["workers"] == 2, 120, "the first job on both Ray nodes")
        assert sorted(jobs[0]["nodes"]) == ["a", "b"]  # one worker on each raylet
        second = svc.submit(name="second", steps=150, seed=2, **{**job, "model": "cnn"})  # its loss falls 2.3 -> ~0.3
        jobs = svc.wait(all_ended, 300, "both jobs to end")
        steps = {first["id"]: 1000, second["id"]: 150}
        for j in jobs:
            assert j["status"] == "done" and j["steps_done"] == steps[j["id"]], j
            recs = progress_records(svc.job_dir(j["id"]))
            losses = [r["loss"] for r in recs if r.get("loss") is not None]
            assert losses[-1] < losses[0]
            assert sum(r.get("event") == "done" for r in recs) == 1
        assert "resized" in [e["kind"] for e in svc.events(first["id"])]
    finally:
        svc.stop()
