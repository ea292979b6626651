"""DL2's measured speed table: exact at measured points, DL2's linear-RBF surface in between."""

from __future__ import annotations

import json

import pytest

from dlsched.core import Cluster, JobSpec
from dlsched.core.allocation import Allocation
from dlsched.core.errors import ConfigError
from dlsched.paths import traces_dir
from dlsched.throughput.dl2_speed import DL2Speed, read_speed_records

CLUSTER = Cluster.homogeneous("t", nodes=8, gpus=2, cpus=8, mem=64)


def ps_job(model: str, workers: int = 1, ps: int = 1) -> JobSpec:
    return JobSpec(job_id="j", submit_time=0, iterations=1000, num_workers=workers, num_ps=ps, arch="ps", model=model)


def spread(workers: int, ps: int) -> Allocation:
    """One task per node: the measured model must not care about placement."""
    place = {i: (1, 0) for i in range(workers)}
    for k in range(ps):
        w, _ = place.get(k, (0, 0))
        place[k] = (w, 1)
    return Allocation.of(place)


@pytest.fixture(scope="module")
def dl2() -> DL2Speed:
    if traces_dir() is None or not (traces_dir() / "dl2" / "config_speed.txt").is_file():
        pytest.skip("shared DL2 speed records not available")
    return DL2Speed()


def test_measured_points_are_reproduced(dl2: DL2Speed) -> None:
    # values recorded in config_speed.txt (sums of the per-worker speeds)
    assert dl2.speed("resnet-50", 1, 1) == pytest.approx(15.783, abs=1e-6)
    assert dl2.speed("resnet-50", 4, 4) == pytest.approx(32.422, abs=1e-6)
    assert dl2.speed("resnet-50", 1, 4) == pytest.approx(12.324, abs=1e-6)
    assert dl2.rate(ps_job("dl2:resnet-50", 4, 4), spread(4, 4), CLUSTER) == pytest.approx(32.422, abs=1e-6)


def test_unmeasured_point_lies_within_its_measured_neighbours(dl2: DL2Speed) -> None:
    # inception-bn was measured at odd (p, w) only; (2, 2) is interpolated
    assert (2, 2) not in dl2.records["inception-bn"]
    neighbours = [dl2.records["inception-bn"][k] for k in [(1, 1), (1, 3), (3, 1), (3, 3)]]
    v = dl2.speed("inception-bn", 2, 2)
    assert min(neighbours) < v < max(neighbours)
    assert v not in neighbours


def test_placement_does_not_change_the_measured_speed(dl2: DL2Speed) -> None:
    job = ps_job("dl2:vgg-16", 2, 2)
    packed = Allocation.single_node(0, 2, 2)
    assert dl2.rate(job, packed, CLUSTER) == dl2.rate(job, spread(2, 2), CLUSTER)


def test_supports_only_known_dl2_models(dl2: DL2Speed) -> None:
    assert set(dl2.models) == {"resnet-50", "vgg-16", "resnext-110", "inception-bn", "seq2seq",
                               "cnn-text-classification", "dssm", "wlm"}
    assert dl2.supports(ps_job("dl2:wlm"))
    assert not dl2.supports(ps_job("dl2:alexnet"))
    assert not dl2.supports(ps_job("gavel:wlm"))


def test_synthetic_records_sum_field_six_and_clip_at_zero(tmp_path) -> None:
    f = tmp_path / "speed.txt"
    recs = [("m", "dist_sync", 32, p, w, [10.0 / w] * w if p == 1 else [1.0] * w, [1.0] * p, [0.5] * w)
            for p in (1, 2, 3) for w in (1, 2, 3)]
    f.write_text("\n".join(repr(r) for r in recs))
    assert read_speed_records(f)["m"][(2, 3)] == pytest.approx(3.0)
    model = DL2Speed(f)
    assert model.speed("m", 1, 3) == pytest.approx(10.0)
    assert model.speed("m", 3, 2) == pytest.approx(2.0)
    assert model.speed("m", 0, 3) == 0.0
    # far outside the grid the linear RBF surface would go negative; the model clips it
    assert model.speed("m", 40, 1) >= 0.0
    assert model.rate(ps_job("dl2:m", 2, 1), Allocation.single_node(0, 2, 0), CLUSTER) == 0.0  # no PS


def test_bad_or_missing_file_is_a_config_error(tmp_path, monkeypatch) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        DL2Speed(tmp_path / "nope.txt")
    bad = tmp_path / "bad.txt"
    bad.write_text(json.dumps({"not": "a record"}))
    with pytest.raises(ConfigError, match="not a DL2 speed record"):
        DL2Speed(bad)
    monkeypatch.setenv("DLSCHED_TRACES", str(tmp_path / "absent"))
    with pytest.raises(ConfigError, match="DLSCHED_TRACES"):
        DL2Speed()
