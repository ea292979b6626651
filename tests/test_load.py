"""Offered load (GPU-time demanded / GPU-time available while jobs arrive), clusters sized to a
chosen load, the CLI's offered-load line and low-load warning, and the per-trace ITP presets."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest
from typer.testing import CliRunner

from dlsched.cli import app
from dlsched.core import Cluster, JobSpec
from dlsched.core.errors import ConfigError
from dlsched.framework.packing import pack
from dlsched.paths import traces_dir
from dlsched.presets import load_cluster
from dlsched.throughput.base import ThroughputModel
from dlsched.throughput.registry import default_throughput
from dlsched.traces import Workload, load_trace, write_trace
from dlsched.traces.load import LOW_LOAD, cluster_for_load, low_load_warning, offered_load, size_for_load

from tests.conftest import rigid_job

HOUR = 3600.0


def _base(nodes: int = 4) -> Cluster:
    return Cluster.homogeneous("b", nodes=nodes, gpus=8, cpus=64, mem=512, nodes_per_rack=4)


def _many(n: int = 600, seed: int = 1, span_h: float = 20.0) -> list[JobSpec]:
    """A workload large enough that whole 8-GPU nodes can reach a load within 5%."""
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.uniform(0, span_h * HOUR, n))
    gpus = rng.choice([1, 1, 1, 2, 4, 8], n)
    dur = rng.exponential(HOUR, n) + 60
    return [rigid_job(i, float(s), float(d), int(g)) for i, (s, d, g) in enumerate(zip(submit, dur, gpus))]


# --------------------------------------------------------------------------- offered load


def test_offered_load_by_hand(small_cluster):
    jobs = [rigid_job(0, 0.0, 1000.0, 1), rigid_job(1, 1800.0, 500.0, 2), rigid_job(2, 3600.0, 250.0, 4)]
    ol = offered_load(jobs, small_cluster)  # 16 GPUs
    assert (ol.gpu_seconds, ol.window_seconds, ol.cluster_gpus, ol.jobs, ol.left_out) == (3000.0, 3600.0, 16, 3, 0)
    assert ol.load == pytest.approx(3000 / (16 * 3600))
    assert ol.describe().startswith("offered load 0.05 (0.833 GPU-h demanded over 1.0 h of arrivals on 16 GPUs")
    warning = low_load_warning(ol)
    assert warning and "below 0.3" in warning and "--load 0.8" in warning and "\n" not in warning


def test_no_warning_at_or_above_low_load(small_cluster):
    # 16 GPUs busy for the whole hour of arrivals: load exactly 1
    jobs = [rigid_job(0, 0.0, HOUR, 8), rigid_job(1, HOUR, HOUR, 8)]
    ol = offered_load(jobs, small_cluster)
    assert ol.load == pytest.approx(1.0) and low_load_warning(ol) is None
    half = [rigid_job(0, 0.0, LOW_LOAD * 2 * HOUR, 8), rigid_job(1, HOUR, 0.0001, 1)]
    assert low_load_warning(offered_load(half, small_cluster)) is None  # 0.3 itself is not low


class Fake(ThroughputModel):
    """2 iterations/s per worker, for jobs whose model is "fake"; records the allocations asked."""

    name = "fake"

    def __init__(self) -> None:
        self.seen = []

    def supports(self, spec: JobSpec) -> bool:
        return spec.model == "fake"

    def rate(self, spec, alloc, cluster) -> float:
        self.seen.append(alloc)
        return 2.0 * alloc.num_workers


def test_job_without_duration_uses_the_throughput_model(small_cluster):
    jobs = [
        rigid_job(0, 0.0, 1000.0, 1),  # duration known: 1000 GPU-s
        JobSpec("a", 600.0, iterations=4000.0, num_workers=4, model="fake"),  # 4000 / (2 x 4) = 500 s x 4 GPUs
        JobSpec("b", 1200.0, iterations=100.0, model="unknown-model"),  # no duration, no model: left out
    ]
    fake = Fake()
    ol = offered_load(jobs, small_cluster, fake)
    assert (ol.gpu_seconds, ol.jobs, ol.left_out) == (1000.0 + 4 * 500.0, 2, 1)
    assert "1 job(s) left out" in ol.describe()
    # asked at its requested size, packed: 4 workers on one 4-GPU node
    assert [(a.num_workers, a.num_nodes) for a in fake.seen] == [(4, 1)]
    without = offered_load(jobs, small_cluster)  # no model at all: only the job with a duration counts
    assert (without.gpu_seconds, without.left_out) == (1000.0, 2)
    # the real duration-only model: one iteration per second at the requested size
    dur_only = JobSpec("c", 0.0, iterations=700.0, num_workers=2)
    assert offered_load([dur_only, rigid_job(1, 10.0, 1.0)], small_cluster, default_throughput(None)).gpu_seconds == 1401.0


def test_all_at_once_has_no_arrival_window(small_cluster):
    jobs = [rigid_job(i, 5.0, 100.0, 2) for i in range(3)]
    ol = offered_load(jobs, small_cluster)
    assert ol.window_seconds == 0 and math.isnan(ol.load)
    assert "arrive at the same time" in ol.describe() and "no arrival window" in ol.describe()
    assert low_load_warning(ol) is None
    with pytest.raises(ConfigError, match="arrive at the same time"):
        cluster_for_load(jobs, small_cluster, 0.8)


def test_empty_workload_and_bad_loads_are_config_errors(small_cluster):
    with pytest.raises(ConfigError, match="no jobs"):
        offered_load([], small_cluster)
    with pytest.raises(ConfigError, match="no jobs"):
        cluster_for_load([], small_cluster, 0.8)
    for bad in (0, -0.5, math.nan, math.inf):
        with pytest.raises(ConfigError, match="finite number > 0"):
            cluster_for_load(_many(20), small_cluster, bad)


# --------------------------------------------------------------------------- sizing


@pytest.mark.parametrize("load", [0.3, 0.8, 1.5])
def test_cluster_for_load_gives_the_asked_load(load):
    jobs = _many()
    c = cluster_for_load(jobs, _base(), load)
    got = offered_load(jobs, c).load
    assert got == pytest.approx(load, rel=0.05)
    assert c.name == f"b@load{load:g}"
    assert (c.capacity == _base().capacity[0]).all() and c.num_nodes > 1  # the base's node shape, whole nodes
    assert Counter(c.rack.tolist()).most_common(1)[0][1] == 4  # 4 nodes per rack kept
    # as close as whole nodes allow: one node more or fewer is further from the target
    for n in (c.num_nodes - 1, c.num_nodes + 1):
        assert abs(offered_load(jobs, _base(n)).load - load) >= abs(got - load)


def test_never_smaller_than_the_largest_job():
    jobs = _many(50) + [rigid_job(999, HOUR, 60.0, 32)]  # 32 GPUs = 4 nodes, whatever the load
    s = size_for_load(jobs, _base(), 50.0)
    assert s.cluster.total_gpus == 32 and s.offered.load < 50.0 * 0.95
    assert "largest job (32 GPUs)" in s.note and s.note in s.notes()
    big = jobs[-1]
    assert pack(s.cluster, s.cluster.capacity, big, big.num_workers, big.num_ps) is not None


def test_several_node_groups_keep_their_proportions():
    gavel = load_cluster("gavel")  # 9 nodes of 4 GPUs per type, one rack per type
    jobs = _many()
    s = size_for_load(jobs, gavel, 0.8)
    types = Counter(s.cluster.gpu_type.tolist())
    assert len(set(types.values())) == 1 and set(types) == set(gavel.gpu_types)
    assert (s.cluster.capacity[:, 0] == 4).all()
    racks = Counter(s.cluster.rack.tolist())  # racks of at most 9 nodes, as the base's, one type each
    assert max(racks.values()) <= 9 and all(len(set(s.cluster.gpu_type[s.cluster.rack == r])) == 1 for r in racks)
    assert s.offered.load == pytest.approx(0.8, rel=0.05)


# --------------------------------------------------------------------------- CLI


def _trace(tmp_path, jobs: list[JobSpec]) -> str:
    p = tmp_path / "t.csv"
    write_trace(Workload("t", jobs, "test", cluster="itp"), p)
    return str(p)


def test_cli_prints_the_offered_load_and_warns_when_low(tmp_path):
    trace = _trace(tmp_path, _many(40, span_h=2.0))
    res = CliRunner().invoke(app, ["simulate", "--trace", trace, "-p", "fifo", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("cluster "))
    assert lines[at + 1].startswith("load     offered load 0.0") and "on 768 GPUs" in lines[at + 1]
    assert any(line.startswith("warning: offered load") and "--load 0.8" in line for line in lines)
    page = (tmp_path / "r" / "index.html").read_text()
    assert "offered load 0.0" in page and "size the cluster with --load 0.8" in page
    # sized: the load it was asked for, no warning; JSON keeps stdout clean and warns on stderr only
    res = CliRunner().invoke(app, ["compare", "--trace", trace, "-p", "fifo", "--load", "0.8", "--out", str(tmp_path / "r"), "--overwrite"])
    assert res.exit_code == 0, res.output
    assert "itp@load0.8" in res.stdout and "offered load 0." in res.stdout and "warning" not in res.output
    res = CliRunner().invoke(app, ["simulate", "--trace", trace, "-p", "fifo", "-f", "json", "--out", str(tmp_path / "r"), "--overwrite"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)[0]["policy"] == "fifo"
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("warning: offered load")


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_cli_bad_load_is_one_line_exit_2(tmp_path, value):
    res = CliRunner().invoke(app, ["simulate", "--limit", "5", "-p", "fifo", f"--load={value}", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and "load must be a finite number > 0" in res.stderr
    assert "Traceback" not in res.output


def test_run_config_load(tmp_path):
    trace = _trace(tmp_path, _many(40, span_h=2.0))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"trace: {trace}\npolicies: [fifo]\nload: 1.2\n")
    res = CliRunner().invoke(app, ["simulate", "--config", str(cfg), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert "itp@load1.2" in res.stdout
    cfg.write_text(f"trace: {trace}\npolicies: [fifo]\nload: 0\n")
    res = CliRunner().invoke(app, ["simulate", "--config", str(cfg), "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "load" in res.stderr and "Traceback" not in res.output


# --------------------------------------------------------------------------- per-trace ITP presets

ITP = ("01", "02", "03", "04", "05", "09", "10")


@pytest.mark.slow
@pytest.mark.parametrize("nn", ITP)
def test_itp_presets_give_their_trace_load_08(nn):
    """Each itp-clusterNN preset loads its deadline trace to 0.8 within 5%, or as near as whole
    8-GPU nodes allow: cluster01/10 hold a 64-/16-GPU job and are lighter than 0.8 at their smallest,
    cluster05 (8 GPUs per node, 12.6 GPUs wanted) gets 1.26 on one node or 0.63 on two."""
    root = traces_dir()
    if root is None:
        pytest.skip("shared traces not available")
    jobs = load_trace(root / f"elasticflow-itp/elasticflow/cluster{nn}.csv", "itp-deadline").jobs
    preset = load_cluster(f"itp-cluster{nn}")
    got = offered_load(jobs, preset).load
    assert (preset.capacity == load_cluster("itp").capacity[0]).all()
    assert preset.num_nodes == cluster_for_load(jobs, load_cluster("itp"), 0.8).num_nodes
    if abs(got - 0.8) <= 0.05 * 0.8:
        return
    assert nn in ("01", "05", "10")  # the documented exceptions, each for its reason:
    fewer = Cluster.homogeneous("x", preset.num_nodes - 1, 8, 48, 384) if preset.num_nodes > 1 else None
    biggest = max(jobs, key=lambda j: j.gpus_requested)
    if got < 0.8 and (fewer is None or pack(fewer, fewer.capacity, biggest, biggest.num_workers, 0) is None):
        return  # one node fewer cannot hold the largest job
    assert abs(offered_load(jobs, fewer).load - 0.8) > abs(got - 0.8)  # one node fewer is further off
    more = Cluster.homogeneous("x", preset.num_nodes + 1, 8, 48, 384)
    assert abs(offered_load(jobs, more).load - 0.8) > abs(got - 0.8)
