"""default_throughput: measured tables first, analytic models next, works without shared traces."""

from __future__ import annotations

import pytest

from dlsched.core import JobSpec
from dlsched.core.allocation import Allocation
from dlsched.core.errors import ConfigError
from dlsched.paths import traces_dir
from dlsched.presets import load_cluster
from dlsched.throughput.registry import THROUGHPUT_MODELS, default_throughput


def spec(model: str, workers: int = 1, **kw) -> JobSpec:
    return JobSpec(job_id="j", submit_time=0, iterations=100, num_workers=workers, model=model, **kw)


def test_without_traces_only_shipped_curves_analytic_and_duration_only(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DLSCHED_TRACES", str(tmp_path / "absent"))
    assert traces_dir() is None
    router = default_throughput(traces_dir())
    assert [m.name for m in router.models] == [
        "elasticflow-curves", "parameter-server", "ring-allreduce", "duration-only"]
    assert router.model_for(spec("elasticflow:bert", batch_size=64)).name == "elasticflow-curves"
    c = load_cluster("itp-small")
    assert router.rate(spec("duration-only", 2, duration=100.0), Allocation.single_node(0, 2), c) == 1.0
    assert router.model_for(spec("gavel:ResNet-50 (batch size 64)")).name == "ring-allreduce"
    assert not router.supports(spec("dl2:resnet-50", arch="ps", num_ps=1))
    assert not router.supports(spec("pollux:cifar10"))
    assert default_throughput(traces_dir(), dl2="analytic").models[1].name == "parameter-server"


def test_model_names_match_the_help_table(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DLSCHED_TRACES", str(tmp_path / "absent"))
    names = {m.name for m in default_throughput(traces_dir()).models}
    assert names <= set(THROUGHPUT_MODELS)


def test_bad_dl2_mode() -> None:
    with pytest.raises(ConfigError, match="measured, analytic"):
        default_throughput(None, dl2="guess")


def test_with_traces_measured_tables_come_first() -> None:
    if traces_dir() is None:
        pytest.skip("shared traces not available")
    router = default_throughput(traces_dir())
    names = [m.name for m in router.models]
    assert names == ["elasticflow-curves", "gavel-matrix", "pollux-profile", "dl2-speed", "parameter-server",
                     "ring-allreduce", "duration-only"]
    ps = spec("dl2:resnet-50", arch="ps", num_ps=1)
    assert router.model_for(ps).name == "dl2-speed"
    assert router.model_for(spec("gavel:ResNet-50 (batch size 64)")).name == "gavel-matrix"
    assert router.model_for(spec("pollux:cifar10")).name == "pollux-profile"
    analytic = default_throughput(traces_dir(), dl2="analytic")
    assert "dl2-speed" not in [m.name for m in analytic.models]
    assert analytic.model_for(ps).name == "parameter-server"
    c = load_cluster("dl2")
    assert analytic.rate(ps, Allocation.single_node(0, 1, 1), c) > 0
