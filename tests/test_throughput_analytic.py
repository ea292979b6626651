"""Analytic PS and ring all-reduce models: hand-computed values and placement sensitivity."""

from __future__ import annotations

import pytest

from dlsched.core import Cluster, JobSpec
from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Network
from dlsched.core.errors import ConfigError
from dlsched.throughput.dl2_constants import DL2ModelConstants
from dlsched.throughput.parameter_server import ParameterServerModel
from dlsched.throughput.ring_allreduce import RingAllReduceModel

# 4 nodes, racks {0, 1} and {2, 3}; GB/s: intra 50, inter 10, inter-rack 5
CLUSTER = Cluster.homogeneous("t", nodes=4, gpus=4, cpus=32, mem=256, nodes_per_rack=2,
                              network=Network(50.0, 10.0, 5.0))
# made-up constants (not DL2's): compute 0.5 s, 100 MB, inter 100 MB/s, intra 400 MB/s
TOY = {"toy": DL2ModelConstants(compute_s=0.5, model_size_mb=100.0, inter_bw_mbs=100.0, intra_bw_mbs=400.0, epoch_size=10)}


def ps_job(model: str = "ps:x", workers: int = 2, ps: int = 1, **extra) -> JobSpec:
    return JobSpec(job_id="p", submit_time=0, iterations=100, num_workers=workers, num_ps=ps, arch="ps",
                   model=model, extra=extra)


def ring_job(model: str = "ring:x", workers: int = 4, **extra) -> JobSpec:
    return JobSpec(job_id="r", submit_time=0, iterations=100, num_workers=workers, model=model, extra=extra)


# ---------------------------------------------------------------- parameter server
def test_ps_hand_computed_single_node() -> None:
    m = ParameterServerModel(TOY)
    # 1 PS + 1 worker on one node: intra bw 400/max(1,1); transfer 2*100/1/400 = 0.5; no inter-node
    assert m.rate(ps_job("dl2:toy", 1, 1), Allocation.single_node(0, 1, 1), CLUSTER) == pytest.approx(1 / 1.0)
    # DL2's code always charges the inter-server transfer too: 2*100/100 = 2 s
    exact = ParameterServerModel(TOY, dl2_exact=True)
    assert exact.rate(ps_job("dl2:toy", 1, 1), Allocation.single_node(0, 1, 1), CLUSTER) == pytest.approx(1 / 2.5)


def test_ps_hand_computed_cross_node() -> None:
    m = ParameterServerModel(TOY)
    # 2 workers on node 0, the PS alone on node 1: the PS serves 2 remote workers -> 100/2 MB/s each
    a = Allocation.of({0: (2, 0), 1: (0, 1)})
    step = 0.5 + 2 * 100 / (100 / 2)
    assert m.rate(ps_job("dl2:toy", 2, 1), a, CLUSTER) == pytest.approx(2 / step)


def test_ps_cross_node_and_cross_rack_are_slower() -> None:
    m = ParameterServerModel()
    job = ps_job(workers=4, ps=2, compute_s=0.2, model_size_mb=400.0)
    one_node = m.rate(job, Allocation.single_node(0, 4, 2), CLUSTER)
    one_rack = m.rate(job, Allocation.of({0: (2, 1), 1: (2, 1)}), CLUSTER)
    two_racks = m.rate(job, Allocation.of({0: (2, 1), 2: (2, 1)}), CLUSTER)
    assert one_node > one_rack > two_racks > 0


def test_ps_more_servers_relieve_a_bandwidth_bottleneck() -> None:
    m = ParameterServerModel()
    job = ps_job(workers=4, ps=1, compute_s=0.05, model_size_mb=2000.0)
    one_ps = m.rate(job, Allocation.of({0: (4, 0), 1: (0, 1)}), CLUSTER)
    two_ps = m.rate(job, Allocation.of({0: (4, 0), 1: (0, 2)}), CLUSTER)
    assert two_ps > one_ps


def test_ps_needs_a_ps_and_parameters() -> None:
    m = ParameterServerModel()
    assert m.rate(ps_job(compute_s=1, model_size_mb=1), Allocation.single_node(0, 2, 0), CLUSTER) == 0.0
    assert not m.supports(ps_job("ps:x"))  # no extra parameters
    assert m.supports(ps_job("ps:x", compute_s=1, model_size_mb=1))
    assert not m.supports(ps_job("dl2:resnet-50"))  # no DL2 constants given
    assert ParameterServerModel(TOY).supports(ps_job("dl2:toy"))
    with pytest.raises(ConfigError, match="compute_s"):
        m.rate(ps_job("ps:x"), Allocation.single_node(0, 1, 1), CLUSTER)
    with pytest.raises(ConfigError, match="must be numbers"):
        m.rate(ps_job(compute_s="fast", model_size_mb=1), Allocation.single_node(0, 1, 1), CLUSTER)


# ---------------------------------------------------------------- ring all-reduce
def test_ring_hand_computed() -> None:
    m = RingAllReduceModel()
    job = ring_job(workers=4, compute_s=0.2, model_size_mb=100.0)
    # one node, fixed global batch: 0.2/4 compute + 2*3/4*100/50000 s
    expect = 1 / (0.05 + 1.5 * 100 / 50_000)
    assert m.rate(job, Allocation.single_node(0, 4), CLUSTER) == pytest.approx(expect)
    # fixed local batch: each worker computes 0.2 s, iterations count worker-steps
    local = ring_job(workers=4, compute_s=0.2, model_size_mb=100.0, batch="local")
    assert m.rate(local, Allocation.single_node(0, 4), CLUSTER) == pytest.approx(4 / (0.2 + 1.5 * 100 / 50_000))
    # one worker: both modes are the plain compute rate
    for j in (ring_job(workers=1, compute_s=0.2, model_size_mb=100.0),
              ring_job(workers=1, compute_s=0.2, model_size_mb=100.0, batch="local")):
        assert m.rate(j, Allocation.single_node(0, 1), CLUSTER) == pytest.approx(5.0)


def test_ring_one_node_beats_two_nodes_beats_two_racks() -> None:
    m = RingAllReduceModel()
    job = ring_job(workers=4, compute_s=0.2, model_size_mb=500.0)
    one_node = m.rate(job, Allocation.single_node(0, 4), CLUSTER)
    two_nodes = m.rate(job, Allocation.of({0: (2, 0), 1: (2, 0)}), CLUSTER)
    two_racks = m.rate(job, Allocation.of({0: (2, 0), 2: (2, 0)}), CLUSTER)
    assert one_node > two_nodes > two_racks


def test_ring_builtin_profiles_and_errors() -> None:
    m = RingAllReduceModel()
    gavel_key = ring_job("gavel:ResNet-50 (batch size 64)", workers=1)
    assert m.supports(gavel_key) and m.supports(ring_job("ring:ResNet-50 (batch size 64)"))
    # a 1-GPU Gavel job type runs at 1 / its V100 step time
    assert m.rate(gavel_key, Allocation.single_node(0, 1), CLUSTER) == pytest.approx(1 / 0.2275)
    assert not m.supports(ring_job("ring:unknown"))
    assert m.supports(ring_job("ring:unknown", compute_s=1, model_size_mb=1))
    assert not m.supports(ring_job("duration-only"))
    with pytest.raises(ConfigError, match="batch"):
        m.rate(ring_job(compute_s=1, model_size_mb=1, batch="huge"), Allocation.single_node(0, 1), CLUSTER)
    with pytest.raises(ConfigError, match="batch must be"):
        RingAllReduceModel(batch="huge")
    with_dl2 = RingAllReduceModel(TOY)
    assert with_dl2.rate(ring_job("ring:toy", workers=1), Allocation.single_node(0, 1), CLUSTER) == pytest.approx(2.0)
