"""ElasticFlow's measured curves as a throughput model, and how trace jobs get them (--profiles)."""

from __future__ import annotations

from collections import Counter

import pytest

from dlsched.core import JobSpec
from dlsched.core.allocation import Allocation
from dlsched.core.errors import ConfigError
from dlsched.policies.registry import make_policy
from dlsched.presets import load_cluster
from dlsched.sim.engine import simulate
from dlsched.throughput.elasticflow import MODEL_SIZE_MB, MeasuredCurves, shipped_curves
from dlsched.throughput.registry import default_throughput
from dlsched.traces.profiles import apply_profiles

# bert at global batch 64, as in data/elasticflow/A100/bert.csv (it/s on 1, 2, 4, 8 GPUs)
BERT64 = (6.030661553957379, 8.643477263279834, 10.356284859349557, 11.0601732061343)


def job(model="elasticflow:bert", batch=64, workers=8, duration=3600.0, **kw) -> JobSpec:
    return JobSpec(job_id="j", submit_time=0.0, iterations=duration, duration=duration, num_workers=workers,
                   model=model, batch_size=batch, **kw)


def test_curve_lookup_matches_the_file_by_hand():
    c = shipped_curves()[("bert", 64)]
    assert [c.at(w) for w in (1, 2, 4, 8)] == list(BERT64)
    assert c.at(3) == pytest.approx((BERT64[1] + BERT64[2]) / 2)  # linear between measured sizes
    assert c.at(6) == pytest.approx((BERT64[2] + BERT64[3]) / 2)
    assert c.peak() == 8  # 16 GPUs (10.99 it/s) are no faster than 8 (11.06)
    assert shipped_curves()[("deepspeech2", 32)].max_size == 32  # its 64-GPU cell is empty
    assert shipped_curves()[("deepspeech2", 32)].at(64) == shipped_curves()[("deepspeech2", 32)].at(32)


def test_rate_is_relative_to_the_requested_size():
    m, c = MeasuredCurves(), load_cluster("itp-small")
    spec = job(workers=8)
    assert m.rate(spec, Allocation.single_node(0, 8), c) == 1.0
    assert m.rate(spec, Allocation.single_node(0, 4), c) == pytest.approx(BERT64[2] / BERT64[3])
    assert m.rate(spec, Allocation.single_node(0, 1), c) == pytest.approx(BERT64[0] / BERT64[3])


def test_spreading_a_job_over_two_nodes_is_slower_than_packing_it():
    m, c = MeasuredCurves(), load_cluster("itp-small")
    spec = job(workers=8)
    packed = m.rate(spec, Allocation.single_node(0, 8), c)
    spread = m.rate(spec, Allocation.of({0: (4, 0), 1: (4, 0)}), c)  # one rack, two nodes
    racks = m.rate(spec, Allocation.of({0: (4, 0), 15: (4, 0)}), c)  # nodes 0 and 15 are in different racks
    net = c.network
    extra = 2 * 7 / 8 * MODEL_SIZE_MB["bert"] * (1 / (net.inter_node_gbps * 1000) - 1 / (net.intra_node_gbps * 1000))
    assert spread == pytest.approx((1 / (1 / BERT64[3] + extra)) / BERT64[3])
    assert racks < spread < packed == 1.0
    # a small model loses less by spreading than a large one
    small = job(model="elasticflow:resnet50", batch=64, workers=8)
    small_spread = m.rate(small, Allocation.of({0: (4, 0), 1: (4, 0)}), c)
    assert spread < small_spread < 1.0


def test_a_job_at_its_requested_size_finishes_in_its_trace_duration():
    c = load_cluster("itp-small")
    jobs = [job(workers=8, duration=5000.0), JobSpec(job_id="k", submit_time=10.0, iterations=700.0, duration=700.0,
                                                     num_workers=2, model="elasticflow:vgg16", batch_size=128)]
    r = simulate(jobs, c, make_policy("fifo"), default_throughput(None))
    got = r.jobs.set_index("job_id")
    assert got.loc["j", "jct"] == pytest.approx(5000.0) and got.loc["k", "jct"] == pytest.approx(700.0)
    assert set(got["throughput_model"]) == {"elasticflow-curves"}


def _trace_jobs():
    named = [JobSpec(job_id=f"n{i}", submit_time=float(i), iterations=100.0, duration=100.0, num_workers=w,
                     extra={"model_name": m, "batch_size": b})
             for i, (m, b, w) in enumerate([("bert", 64, 1), ("vgg16", 256, 16), ("nope", 1, 1)])]
    plain = [JobSpec(job_id=f"p{i}", submit_time=10.0 + i, iterations=50.0, duration=50.0, num_workers=w)
             for i, w in enumerate([1, 2, 8, 64, 128] * 4)]
    return named + plain


def test_auto_uses_the_curve_the_trace_names_and_is_elastic_within_it():
    out, notes = apply_profiles(_trace_jobs(), "auto")
    by = {j.job_id: j for j in out}
    assert (by["n0"].model, by["n0"].batch_size, by["n0"].min_workers, by["n0"].max_workers) == (
        "elasticflow:bert", 64, 1, 8)
    assert (by["n1"].min_workers, by["n1"].num_workers, by["n1"].max_workers) == (1, 16, 64)  # vgg16@256 grows to 64
    assert by["n2"].model == "duration-only"  # a model without a measured curve stays as the trace says
    assert all(by[f"p{i}"].model == "duration-only" for i in range(20))
    assert any("2 jobs run on the measured" in n for n in notes)
    rigid, _ = apply_profiles(_trace_jobs(), "auto", elastic=False)
    assert not any(j.elastic for j in rigid) and rigid[0].model == "elasticflow:bert"
    off, off_notes = apply_profiles(jobs := _trace_jobs(), "off")
    assert off is jobs and off_notes == []


def test_draw_is_seeded_recorded_and_fits_each_job():
    a, notes = apply_profiles(_trace_jobs(), "draw", seed=3)
    b, _ = apply_profiles(_trace_jobs(), "draw", seed=3)
    c, _ = apply_profiles(_trace_jobs(), "draw", seed=4)
    assert [(j.model, j.batch_size) for j in a] == [(j.model, j.batch_size) for j in b]
    assert [(j.model, j.batch_size) for j in a] != [(j.model, j.batch_size) for j in c]
    curves = shipped_curves()
    for j in a:
        if j.job_id.startswith("p") and j.num_workers <= 64:
            assert j.model.startswith("elasticflow:") and "drawn with seed 3" in j.extra["profile"]
            assert curves[(j.model.split(":")[1], j.batch_size)].max_size >= j.num_workers
    assert Counter(j.model for j in a if j.num_workers == 128) == {"duration-only": 4}
    assert any("4 jobs are larger than every measured curve" in n for n in notes)


def test_bad_profiles_mode():
    with pytest.raises(ConfigError, match="auto, draw, off"):
        apply_profiles([], "measured")
