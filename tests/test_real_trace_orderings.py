"""Known orderings on real traces: the simulator and baselines must reproduce what every DL
scheduling paper takes for granted. Slices keep the suite fast; each cluster is sized so the
slice queues (Philly's first 2,000 jobs average ~246 busy GPUs: 320 GPUs is ~77% load; ITP
cluster01 averages ~28 busy GPUs with 64-GPU jobs: 64 GPUs)."""

from __future__ import annotations

import pytest

from dlsched.core import Cluster
from dlsched.paths import traces_dir
from dlsched.policies.registry import make_policy
from dlsched.sim.engine import simulate
from dlsched.throughput.duration_only import DurationOnly
from dlsched.traces import load_trace

CASES = {
    "philly": ("philly-pollux/philly.csv", "philly", 2000, Cluster.homogeneous("philly-320", 40, 8, 48, 384, nodes_per_rack=20)),
    "itp-cluster01": ("elasticflow-itp/raw/cluster01.csv", "itp", None, Cluster.homogeneous("itp-64", 8, 8, 48, 384, nodes_per_rack=4)),
}


@pytest.fixture(scope="module", params=list(CASES))
def runs(request):
    root = traces_dir()
    if root is None:
        pytest.skip("needs ../shared/traces")
    path, fmt, limit, cluster = CASES[request.param]
    jobs = load_trace(root / path, fmt, limit=limit).jobs
    return {p: simulate(jobs, cluster, make_policy(p), DurationOnly()) for p in ("fifo", "srtf", "tiresias", "kube-default")}


def test_all_jobs_finish(runs):
    for name, r in runs.items():
        assert r.summary["unfinished"] == 0, name
        assert r.summary["finished"] + r.summary["rejected"] == r.summary["jobs"], name


def test_srtf_and_tiresias_beat_fifo_on_mean_jct(runs):
    fifo = runs["fifo"].summary["mean_jct"]
    assert runs["srtf"].summary["mean_jct"] < fifo
    assert runs["tiresias"].summary["mean_jct"] < fifo


def test_no_gang_wastes_gpu_time_that_gang_fifo_does_not(runs):
    assert runs["kube-default"].summary["held_gpu_hours"] > 0
    assert runs["fifo"].summary["held_gpu_hours"] == 0
