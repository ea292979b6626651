"""Offered load (GPU-time demanded / GPU-time available while jobs arrive, and until the last job
could end), clusters sized to a chosen load in LOAD_RANGE, the CLI's offered-load line, its
low- and high-load warnings and its burst and roomy-cluster notes, and the per-trace ITP presets."""

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
from dlsched.traces import Workload, default_workload, load_trace, write_trace
from dlsched.traces.embedded import PRESET
from dlsched.traces.load import (HIGH_LOAD, LOAD_RANGE, LOW_LOAD, check_load, cluster_for_load, load_warning,
                                 offered_load, size_for_load)

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
    # until the last job could end: job 2 ends at 3600 + 250 s at the earliest
    assert (ol.horizon_seconds, ol.median_run_seconds, ol.peak_gpus) == (3850.0, 500.0, 4.0)
    assert ol.horizon_load == pytest.approx(3000 / (16 * 3850))
    assert "; 0.05 over the 1.1 h until the last job could end" in ol.describe()
    assert not ol.burst and ol.effective == ol.load and ol.burst_note() is None
    warning = load_warning(ol)
    assert warning and "below 0.3" in warning and "--load 0.8" in warning and "\n" not in warning


def test_no_warning_at_or_above_low_load(small_cluster):
    # 16 GPUs busy for the whole hour of arrivals: load exactly 1
    jobs = [rigid_job(0, 0.0, HOUR, 8), rigid_job(1, HOUR, HOUR, 8)]
    ol = offered_load(jobs, small_cluster)
    assert ol.load == pytest.approx(1.0) and load_warning(ol) is None
    half = [rigid_job(0, 0.0, LOW_LOAD * 2 * HOUR, 8), rigid_job(1, HOUR, 0.0001, 1)]
    assert load_warning(offered_load(half, small_cluster)) is None  # 0.3 itself is not low
    high = [rigid_job(i, i * HOUR, 2880.0, 16) for i in range(3)]  # 3 x 16 x 2880 GPU-s over 2 h on 16 GPUs
    assert offered_load(high, small_cluster).load == HIGH_LOAD
    assert load_warning(offered_load(high, small_cluster)) is None  # 1.2 itself is not overloaded


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


def test_all_at_once_has_no_arrival_window_but_a_horizon(small_cluster):
    jobs = [rigid_job(i, 5.0, 100.0, 2) for i in range(3)]
    ol = offered_load(jobs, small_cluster)
    assert ol.window_seconds == 0 and math.isnan(ol.load)
    assert "arrive at the same time" in ol.describe() and "no arrival window" in ol.describe()
    # a burst: the load until the last job could end (600 GPU-s over 100 s on 16 GPUs) is what counts
    assert ol.burst and ol.effective == ol.horizon_load == pytest.approx(600 / (16 * 100))
    assert "0.38 over the 1.7 min until the last job could end" in ol.describe()
    assert ol.burst_note().startswith("all 3 jobs arrive at once, while the median job runs 1.7 min")
    assert load_warning(ol) is None
    s = size_for_load(jobs, small_cluster, 0.8)  # sized on the horizon: 7.5 GPUs wanted, 2 nodes
    assert s.cluster.total_gpus == 8 and s.offered.effective == pytest.approx(0.75)
    assert "sized from whole nodes for load 0.8 until the last job could end" in s.notes()[0]


def test_empty_workload_and_bad_loads_are_config_errors(small_cluster):
    with pytest.raises(ConfigError, match="no jobs"):
        offered_load([], small_cluster)
    with pytest.raises(ConfigError, match="no jobs"):
        cluster_for_load([], small_cluster, 0.8)
    for bad in (0, -0.5, math.nan, math.inf, 0.04, 2.01, 5, True, "0.8"):
        with pytest.raises(ConfigError, match="load must be a number from 0.05 to 2 "):
            cluster_for_load(_many(20), small_cluster, bad)
    assert LOAD_RANGE == (0.05, 2.0) and check_load(0.05) == 0.05 and check_load(2) == 2.0  # both ends allowed


def test_a_burst_is_judged_until_the_last_job_could_end(small_cluster):
    """Ten 1-GPU jobs of an hour within a minute on 16 GPUs: 10 GPU-h over 60 s of arrivals is
    load 37.5, which says nothing (every job starts at once); until the last job could end it is
    10 / (16 x ~1 h): low, and the run says both why and that the cluster holds every job."""
    jobs = [rigid_job(i, 6.0 * i, HOUR, 1) for i in range(11)]
    ol = offered_load(jobs, small_cluster)
    assert ol.burst and ol.load > 30 and ol.effective == ol.horizon_load == pytest.approx(11 / (16 * (1 + 60 / HOUR)))
    note = ol.burst_note()
    assert note.startswith("the arrivals are a burst: 11 jobs within 1.0 min, while the median job runs 1.0 h")
    assert "(0.68)" in note and "\n" not in note
    assert load_warning(ol) is None  # 0.69 is neither low nor high, whatever 37.5 would say
    roomy = ol.roomy_note()
    assert roomy.startswith("the cluster's 16 GPUs are 1.5x the most the jobs ever ask at once (11 GPUs")
    # the same burst of 8-GPU jobs is overloaded even until the last could end
    big = offered_load([rigid_job(i, 6.0 * i, HOUR, 8) for i in range(11)], small_cluster)
    assert big.effective > HIGH_LOAD and big.roomy_note() is None
    warning = load_warning(big)
    assert warning.startswith(f"offered load {big.effective:.2f} until the last job could end is above 1.2: overloaded")
    # a steady stream is no burst: arrivals over 10 h, jobs of an hour
    steady = offered_load([rigid_job(i, i * HOUR, HOUR, 1) for i in range(11)], small_cluster)
    assert not steady.burst and steady.burst_note() is None and steady.effective == steady.load


def test_peak_counts_jobs_that_overlap_not_jobs_that_touch(small_cluster):
    # 0..10 (2 GPUs), 10..20 (3: starts when the first ends), 5..15 (4): peak 2 + 4 then 3 + 4 = 7
    jobs = [rigid_job(0, 0.0, 10.0, 2), rigid_job(1, 10.0, 10.0, 3), rigid_job(2, 5.0, 10.0, 4)]
    ol = offered_load(jobs, small_cluster)
    assert ol.peak_gpus == 7.0 and ol.roomy_note().startswith("the cluster's 16 GPUs are 2.3x the most the jobs ever ask")
    # a cluster smaller than the peak has no roomy note
    assert offered_load(jobs, Cluster.homogeneous("x", nodes=1, gpus=4, cpus=8, mem=64)).roomy_note() is None
    # unknown run times would make the peak too low: no note then
    fake_free = [*jobs, JobSpec("u", 1.0, iterations=5.0, model="unknown-model")]
    assert offered_load(fake_free, small_cluster).roomy_note() is None


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
    s = size_for_load(jobs, _base(), 2.0)
    assert s.cluster.total_gpus == 32 and s.offered.load < 2.0 * 0.95
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


@pytest.mark.parametrize("value", ["0", "-1", "nan", "0.01", "5"])
def test_cli_bad_load_is_one_line_exit_2(tmp_path, value):
    res = CliRunner().invoke(app, ["simulate", "--limit", "5", "-p", "fifo", f"--load={value}", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and "load must be a number from 0.05 to 2 " in res.stderr
    assert f"got {float(value)!r}" in res.stderr and "Traceback" not in res.output
    assert not (tmp_path / "r").exists()


def test_load_5_in_a_run_config_is_refused_too(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("policies: [fifo]\nlimit: 5\nload: 5\n")
    res = CliRunner().invoke(app, ["simulate", "--config", str(cfg), "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "load must be a number from 0.05 to 2 " in res.stderr, res.output


def _load_lines(output: str) -> list[str]:
    return [line[len("load     "):] for line in output.splitlines() if line.startswith("load     ")]


def test_cli_40_job_prefix_says_burst_and_roomy_and_low(tmp_path):
    """`--limit 40` of the embedded slice: 40 one-GPU jobs within two minutes, jobs of hours, on 128
    GPUs. The arrival-span load (22) explodes; the run says why it means nothing, judges the load
    until the last job could end (0.27: low) and that 128 GPUs hold all 40 jobs at once."""
    res = CliRunner().invoke(app, ["simulate", "--limit", "40", "-p", "fifo", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    line, *notes = _load_lines(res.stdout)
    assert line.startswith("offered load 22.02 (90 GPU-h demanded over 1.9 min of arrivals on 128 GPUs); "
                           "0.27 over the 2.6 h until the last job could end"), line
    assert notes[0].startswith("the arrivals are a burst: 40 jobs within 1.9 min, while the median job runs 2.5 h")
    assert notes[1].startswith("the cluster's 128 GPUs are 3.2x the most the jobs ever ask at once (40 GPUs")
    warnings = [line for line in res.stdout.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: offered load 0.27 until the last job could end is below 0.3: jobs will barely "
                        "wait, so policies will barely differ; size the cluster with --load 0.8"], warnings
    assert not any("rush hour" in line for line in res.stdout.splitlines())  # the demo note is the whole slice's
    page = (tmp_path / "r" / "index.html").read_text()
    assert "the arrivals are a burst" in page and "3.2x the most the jobs ever ask" in page


def test_load_08_on_the_40_job_prefix_builds_no_huge_cluster():
    """Sized over the arrival span, `--limit 40 --load 0.8` built 3,520 GPUs for 40 one-GPU jobs;
    sized until the last job could end it builds 40, and says that they hold every job at once."""
    jobs = default_workload(limit=40).jobs
    s = size_for_load(jobs, load_cluster(PRESET), 0.8)
    assert s.offered.burst and s.cluster.total_gpus == 40 and s.offered.effective == pytest.approx(0.8, rel=0.1)
    assert s.warning is None and s.offered.load > 50  # the arrival-span figure is still shown, and still huge
    assert any(n.startswith("the cluster's 40 GPUs are 1.0x the most the jobs ever ask at once") for n in s.notes())


def test_far_larger_cluster_than_the_jobs_use_is_said():
    jobs = _many()
    tiny = size_for_load(jobs, _base(), LOAD_RANGE[0])
    roomy = tiny.offered.roomy_note()
    assert roomy and tiny.cluster.total_gpus > 2 * tiny.offered.peak_gpus and roomy in tiny.notes()
    assert tiny.warning.startswith("offered load 0.05 is below 0.3")
    busy = size_for_load(jobs, _base(), 0.8)
    assert busy.offered.roomy_note() is None and busy.cluster.total_gpus < busy.offered.peak_gpus


def test_the_embedded_default_is_overloaded_and_says_it_is_on_purpose(tmp_path):
    whole = default_workload()
    ol = offered_load(whole.jobs, load_cluster(PRESET))
    assert not ol.burst and ol.load == pytest.approx(1.876, abs=0.005) and 0.9 < ol.horizon_load < 1
    assert any(n.startswith("the slice is a rush hour on purpose: on its own cluster (itp-small, 128 GPUs) its "
                            "12.2 h of arrivals offer load 1.88") for n in whole.notes)
    res = CliRunner().invoke(app, ["simulate", "-p", "fifo", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.stdout.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: offered load 1.88 is above 1.2: overloaded: the queue grows for the whole arrival "
                        "span (12.2 h), so waits measure the backlog more than the policy; --load 0.8 sizes a "
                        "cluster that keeps up"], warnings
    assert any(line.startswith("data     the slice is a rush hour on purpose") for line in res.stdout.splitlines())
    # in JSON the warning goes to stderr alone, and --load 0.8 silences it
    res = CliRunner().invoke(app, ["simulate", "-p", "fifo", "--load", "0.8", "-f", "json", "--out",
                                   str(tmp_path / "r"), "--overwrite"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)[0]["policy"] == "fifo" and "warning" not in res.stderr


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
