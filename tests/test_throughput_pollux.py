"""Pollux's measured profiles: placement-dependent step times at the job's batch size."""

from __future__ import annotations

import csv

import pytest

from dlsched.core import JobSpec
from dlsched.core.allocation import Allocation
from dlsched.core.errors import ConfigError
from dlsched.paths import traces_dir
from dlsched.presets import load_cluster
from dlsched.throughput.pollux_profile import PolluxProfile

CLUSTER = load_cluster("pollux")


@pytest.fixture(scope="module")
def pollux() -> PolluxProfile:
    root = traces_dir()
    if root is None or not (root / "pollux-profiles" / "traces").is_dir():
        pytest.skip("shared Pollux profiles not available")
    return PolluxProfile()


def job(app: str, replicas: int, batch: int | None) -> JobSpec:
    return JobSpec(job_id="p", submit_time=0, iterations=100, num_workers=replicas, model=f"pollux:{app}", batch_size=batch)


def alloc(*per_node: int) -> Allocation:
    return Allocation.of({i: (w, 0) for i, w in enumerate(per_node)})


def test_measured_placement_gives_the_measured_step_time(pollux: PolluxProfile) -> None:
    with open(traces_dir() / "pollux-profiles/traces/cifar10/placements.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["placement"] == "13" and r["local_bsz"] == "129")
    # 4 replicas x local batch 129 = global 516, no accumulation
    rate = pollux.rate(job("cifar10", 4, 4 * 129), alloc(1, 3), CLUSTER)
    assert rate == pytest.approx(1.0 / float(row["step_time"]))
    # the same placement rotated is the same placement (Pollux normalises it)
    assert pollux.rate(job("cifar10", 4, 4 * 129), alloc(3, 1), CLUSTER) == rate


def test_more_replicas_more_steps_where_the_data_says_so(pollux: PolluxProfile) -> None:
    rates = [pollux.rate(job("cifar10", sum(p), 2048), alloc(*p), CLUSTER) for p in [(1,), (4,), (4, 4)]]
    assert rates[0] < rates[1] < rates[2]
    one, four = (pollux.rate(job("imagenet", r, 3200), alloc(r), CLUSTER) for r in (1, 4))
    assert four > 3 * one


def test_packing_beats_spreading_for_a_comm_heavy_app(pollux: PolluxProfile) -> None:
    packed = pollux.rate(job("bert", 4, 384), alloc(4), CLUSTER)
    spread = pollux.rate(job("bert", 4, 384), alloc(1, 1, 1, 1), CLUSTER)
    assert spread < packed


def test_placements_outside_the_profiles_still_get_a_finite_rate(pollux: PolluxProfile) -> None:
    eight = pollux.rate(job("imagenet", 8, 3200), alloc(8), CLUSTER)  # 8 GPUs on a node: not profiled
    assert 0 < eight < float("inf")
    assert eight == pytest.approx(pollux.rate(job("imagenet", 8, 3200), alloc(4, 4), CLUSTER))
    big = pollux.rate(job("imagenet", 80, 6400), alloc(*[4] * 20), CLUSTER)
    assert 0 < big < float("inf")


def test_default_batch_and_support(pollux: PolluxProfile) -> None:
    assert set(pollux.apps) == {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
    assert pollux.supports(job("ncf", 1, None)) and not pollux.supports(job("gpt", 1, None))
    # no batch size: the app's smallest validated batch (cifar10: 128)
    assert pollux.rate(job("cifar10", 1, None), alloc(1), CLUSTER) == pollux.rate(job("cifar10", 1, 128), alloc(1), CLUSTER)
    with pytest.raises(ConfigError, match="unknown app"):
        pollux.step_time("gpt", (1,))
