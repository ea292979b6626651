"""The DL2 Alibaba-pattern generator and the synthetic generator."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter

import numpy as np
import pytest

from dlsched.core.errors import ConfigError, TraceError
from dlsched.paths import traces_dir
from dlsched.traces import dl2_workload, load_trace, synthetic_workload, validate_trace


def _fields(spec) -> dict:
    """A JobSpec's fields by name (JobSpec is slotted: no __dict__)."""
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}


@pytest.fixture
def constants():
    root = traces_dir()
    if root is None:
        pytest.skip("shared traces not available")
    return json.loads((root / "dl2" / "workload_constants.json").read_text())


def _slots(w, slot=1200.0):
    return Counter(int(j.submit_time // slot) for j in w.jobs)


def test_dl2_is_deterministic_per_seed(constants):
    a, b = dl2_workload(seed=3), dl2_workload(seed=3)
    assert [_fields(j) for j in a.jobs] == [_fields(j) for j in b.jobs]
    c = dl2_workload(seed=4)
    assert [(j.model, j.submit_time) for j in a.jobs] != [(j.model, j.submit_time) for j in c.jobs]


@pytest.mark.parametrize("cap,n", [(3, 60), (10, 200), (1, 100)])
def test_dl2_arrivals_follow_the_scaled_pattern_and_cap(constants, cap, n):
    w = dl2_workload(num_jobs=n, max_arrivals_per_slot=cap, seed=7)
    assert len(w.jobs) == n
    raw = constants["ali_trace"]["arrival_count_per_hour_slot_72"]
    scaled = [math.ceil(a / (max(raw) / cap)) for a in raw]
    per_slot = _slots(w)
    last = max(per_slot)
    assert all(per_slot[s] <= cap for s in per_slot)
    assert all(j.submit_time % 1200.0 == 0 for j in w.jobs)  # jobs arrive at slot starts
    # some start offset in 0..4 explains every full slot (the last may be cut at num_jobs)
    fits = [
        o for o in range(5)
        if all(per_slot.get(s, 0) == min(cap, scaled[(s + o) % len(scaled)]) for s in range(last))
    ]  # fmt: skip
    assert fits, per_slot


def test_dl2_class_to_model_epochs_and_demands(constants):
    w = dl2_workload(num_jobs=300, seed=1)
    ali = constants["ali_trace"]
    names = constants["model_names_index_order"]
    steps = constants["per_model_constants"]["epoch_size_steps_per_epoch"]
    for j in w.jobs:
        k = j.extra["length_class"]
        m = ali["job_length_class_to_model_index"][k]
        assert j.model == "dl2:" + names[m]
        epochs = int(ali["job_length_class_mean_minutes"][k] / 1155.0 * 30000)
        assert j.extra["epochs"] == epochs and j.iterations == epochs * steps[m]
        assert j.arch.value == "ps" and (j.num_workers, j.num_ps) == (1, 1)
        assert (j.min_workers, j.max_workers, j.max_ps) == (1, 16, 16) and j.work_known
        gpu = 0.0 if names[m] in ("cnn-text-classification", "dssm") else 1.0
        assert j.worker_demand == (gpu, 2.0, 4.0) and j.ps_demand == (0.0, 2.0, 4.0)
    # class 0 (35 min, p = 0.68) is dssm: the most frequent model by far
    counts = Counter(j.model for j in w.jobs)
    assert counts.most_common(1)[0][0] == "dl2:dssm"
    assert 0.6 < counts["dl2:dssm"] / 300 < 0.76


def test_dl2_via_load_trace_and_google_pattern(constants):
    w = load_trace("dl2-ali", limit=30, seed=2)
    assert (len(w.jobs), w.cluster) == (30, "dl2")
    g = dl2_workload(num_jobs=40, max_arrivals_per_slot=5, pattern="google")
    assert max(_slots(g).values()) <= 5
    with pytest.raises(ConfigError, match="Google pattern"):
        dl2_workload(max_arrivals_per_slot=7, pattern="google")


def test_dl2_without_traces_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DLSCHED_TRACES", str(tmp_path / "absent"))
    with pytest.raises(TraceError, match="no license"):
        dl2_workload()
    assert validate_trace("dl2-ali") and "DLSCHED_TRACES" in validate_trace("dl2-ali")[0]


def test_synthetic_poisson_rate_and_determinism():
    w = synthetic_workload(4000, rate=0.01, seed=5)
    t = np.array([j.submit_time for j in w.jobs])
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert abs(gaps.mean() - 100.0) < 5.0  # mean gap 1/rate; std error 100/sqrt(4000) = 1.6
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.08  # exponential: coefficient of variation 1
    again = synthetic_workload(4000, rate=0.01, seed=5)
    assert [_fields(j) for j in w.jobs] == [_fields(j) for j in again.jobs]
    other = synthetic_workload(4000, rate=0.01, seed=6)
    assert [j.submit_time for j in other.jobs] != list(t)


def test_synthetic_pattern_gpu_mix_and_durations():
    w = synthetic_workload(25, pattern=[3, 0, 2], slot_seconds=600.0, gpu_mix={1: 1.0, 8: 1.0}, seed=1)
    per_slot = Counter(int(j.submit_time // 600) for j in w.jobs)
    assert [per_slot.get(s, 0) for s in range(15)] == [3, 0, 2] * 5
    assert {j.num_workers for j in w.jobs} <= {1, 8}
    assert all(j.iterations == j.duration and 60 <= j.duration <= 7 * 86400 for j in w.jobs)
    big = synthetic_workload(3000, rate=1.0, gpu_mix={1: 0.75, 8: 0.25}, seed=2)
    share = np.mean([j.num_workers == 8 for j in big.jobs])
    assert 0.22 < share < 0.28
    med = np.median([j.duration for j in big.jobs])
    assert 3000 < med < 4300  # log-normal with a 1 h median


def test_synthetic_rejects_bad_parameters():
    with pytest.raises(ConfigError):
        synthetic_workload(10, rate=1.0, pattern=[1])
    with pytest.raises(ConfigError):
        synthetic_workload(10, rate=-1.0)
    with pytest.raises(ConfigError):
        synthetic_workload(10, pattern=[0, 0])
    with pytest.raises(ConfigError):
        synthetic_workload(10, gpu_mix={0.5: 1.0})
