"""Gavel's measured matrix: exact at measured keys, consolidation and GPU type respected."""

from __future__ import annotations

import json

import pytest

from dlsched.core import JobSpec
from dlsched.core.allocation import Allocation
from dlsched.core.errors import ConfigError
from dlsched.paths import traces_dir
from dlsched.presets import load_cluster
from dlsched.throughput.gavel_matrix import GavelMatrix

RN50 = "ResNet-50 (batch size 64)"


@pytest.fixture(scope="module")
def raw() -> dict:
    root = traces_dir()
    f = root / "gavel-philly-derived" / "simulation_throughputs.json" if root else None
    if f is None or not f.is_file():
        pytest.skip("shared Gavel throughput matrix not available")
    return json.loads(f.read_text())


@pytest.fixture(scope="module")
def gavel(raw) -> GavelMatrix:
    return GavelMatrix()


def job(job_type: str, gpus: int) -> JobSpec:
    return JobSpec(job_id="g", submit_time=0, iterations=100, num_workers=gpus, model=f"gavel:{job_type}")


def test_measured_key_returns_the_json_number(gavel: GavelMatrix, raw: dict) -> None:
    c = load_cluster("gavel")  # nodes 0-8 V100, 9-17 P100, 18-26 K80, 4 GPUs each
    key = f"('{RN50}', 2)"
    assert gavel.rate(job(RN50, 2), Allocation.single_node(0, 2), c) == raw["v100"][key]["null"]
    spread = Allocation.of({0: (1, 0), 1: (1, 0)})
    assert gavel.rate(job(RN50, 2), spread, c) == raw["v100_unconsolidated"][key]["null"]
    assert gavel.rate(job(RN50, 1), Allocation.single_node(9, 1), c) == raw["p100"][f"('{RN50}', 1)"]["null"]


def test_k80_is_slower_than_v100(gavel: GavelMatrix) -> None:
    c = load_cluster("gavel")
    for jt in (RN50, "Transformer (batch size 64)", "LM (batch size 20)"):
        v100 = gavel.rate(job(jt, 4), Allocation.single_node(0, 4), c)
        k80 = gavel.rate(job(jt, 4), Allocation.single_node(18, 4), c)
        assert 0 < k80 < v100


def test_mixed_types_run_at_the_slowest(gavel: GavelMatrix) -> None:
    c = load_cluster("gavel")
    mixed = Allocation.of({0: (1, 0), 18: (1, 0)})  # one V100 node, one K80 node
    assert gavel.rate(job(RN50, 2), mixed, c) == gavel.throughput(RN50, 2, "k80", consolidated=False)


def test_spread_comm_heavy_job_is_slower(gavel: GavelMatrix) -> None:
    c = load_cluster("gavel")
    lm = "LM (batch size 20)"
    packed = gavel.rate(job(lm, 4), Allocation.single_node(0, 4), c)
    spread = gavel.rate(job(lm, 4), Allocation.of({i: (1, 0) for i in range(4)}), c)
    assert spread < packed / 2


def test_unmeasured_gpu_counts(gavel: GavelMatrix, raw: dict) -> None:
    t = {s: raw["v100"][f"('{RN50}', {s})"]["null"] for s in (2, 4, 8)}
    t3 = gavel.throughput(RN50, 3, "v100")
    assert t[2] < t3 < t[4]
    t16 = gavel.throughput(RN50, 16, "v100")
    assert t[8] <= t16 <= 2 * t[8]  # power law with exponent in [0, 1]
    # A3C was measured on one GPU only: it scales with the column's median exponent, never above linear
    a1 = raw["v100"]["('A3C', 1)"]["null"]
    assert a1 < gavel.throughput("A3C", 4, "v100") <= 4 * a1
    # K80 ResNet-50 batch 128 did not run on 2+ GPUs (measured 0): it stays 0
    assert gavel.throughput("ResNet-50 (batch size 128)", 4, "k80") == 0.0
    assert gavel.throughput("ResNet-50 (batch size 128)", 16, "k80") == 0.0


def test_gpu_type_names(gavel: GavelMatrix) -> None:
    assert gavel.column_for("V100") == "v100"
    assert gavel.column_for("Tesla-P100-PCIE") == "p100"
    assert gavel.column_for("V100M32") == "v100"
    assert gavel.column_for("T4") == "v100"  # no T4 column: default_type
    strict = GavelMatrix(default_type=None)
    with pytest.raises(ConfigError, match="no measurements for GPU type 'T4'"):
        strict.column_for("T4")
    assert gavel.supports(job(RN50, 1)) and not gavel.supports(job("ResNet-51", 1))


def test_missing_file_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        GavelMatrix(tmp_path / "x.json")
