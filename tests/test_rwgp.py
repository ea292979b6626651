"""The RW-OU GP machine-speed estimate (estimators.rwgp) against hand-computed cases and a run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.policy import Policy
from dlsched.estimators.rwgp import RWOUGP, gp_posterior, random_walk_kernel, similarity_graph
from dlsched.policies.registry import make_policy
from dlsched.sim.engine import NodeEvent, simulate
from tests.test_engine_events import PerWorker


def test_random_walk_kernel_is_a_unit_diagonal_covariance_stronger_within_a_rack():
    types = np.array(["v100"] * 4 + ["k80"] * 2, dtype=object)
    racks = np.array([0, 0, 1, 1, 2, 2])
    k = random_walk_kernel(similarity_graph(types, racks))
    assert np.allclose(np.diag(k), 1.0) and np.allclose(k, k.T)
    assert np.linalg.eigvalsh(k).min() > -1e-9
    assert k[0, 1] > k[0, 2] > 0  # rack-mates more alike than same-type machines in another rack
    assert k[0, 4] == pytest.approx(0.0)  # another GPU type shares nothing


def test_posterior_mean_and_variance_match_a_hand_computed_two_machine_case():
    # two machines of one type and rack, a=3, p=1: aI - L = [[2, 1], [1, 2]] -> correlation 0.5
    gp = RWOUGP(sd_static=0.1, sd_noise=0.05, fluctuating=False, rw_a=3.0, rw_p=1, every_s=0.0)
    cluster = Cluster.homogeneous("two", nodes=2, gpus=1, cpus=8, mem=32)
    y = math.log(0.8)
    gp.log_speeds(0.0, cluster)
    gp.update(0.0, {0: 0.8})
    mu, sd = gp.log_speeds(0.0, cluster)
    # mean = k/(k+s2) y with k = 0.01, s2 = 0.0025: 0.8 y at the machine, 0.5 * 0.8 y at its mate
    assert mu == pytest.approx([0.8 * y, 0.4 * y])
    # var = 0.01 - 0.01^2/0.0125 = 0.002 at the machine; 0.01 - 0.25 * 0.008 = 0.008 at its mate
    assert sd ** 2 == pytest.approx([0.002, 0.008])


def test_the_kalman_filter_equals_the_batch_gp_posterior_on_a_static_problem():
    cluster = Cluster(name="c", capacity=np.tile([4.0, 32, 256], (6, 1)),
                      gpu_type=np.array(["a", "a", "a", "b", "b", "b"], dtype=object),
                      rack=np.array([0, 0, 1, 1, 2, 2]), speed=np.ones(6),
                      node_names=tuple(f"n{i}" for i in range(6)))
    gp = RWOUGP(sd_static=0.1, sd_noise=0.03, fluctuating=False, every_s=0.0)
    gp.log_speeds(0.0, cluster)
    obs = [(0, 0.9), (4, 1.1), (0, 0.85)]
    for node, f in obs:
        gp.update(0.0, {node: f})
    mu, sd = gp.log_speeds(0.0, cluster)
    order = np.lexsort((np.arange(6), cluster.rack, cluster.gpu_type.astype(str)))
    k = np.zeros((6, 6))
    k[np.ix_(order, order)] = 0.01 * random_walk_kernel(similarity_graph(cluster.gpu_type[order], cluster.rack[order]))
    m2, v2 = gp_posterior(k, np.array([n for n, _ in obs]), np.log([f for _, f in obs]), 0.03 ** 2)
    assert mu == pytest.approx(m2) and sd ** 2 == pytest.approx(v2)


class Watching(Policy):
    """fifo, feeding a GP what the running jobs' workers measure, recording its predictions."""

    name = "watching"
    interval = 300.0

    def __init__(self, gp):
        self.gp, self.inner, self.seen = gp, make_policy("fifo"), []

    def reset(self, cluster, seed):
        self.inner.reset(cluster, seed)
        self.gp.reset()

    def schedule(self, snap):
        self.gp.observe(snap)
        self.seen.append((snap.now, *self.gp.speeds(snap.now, snap.cluster)))
        return self.inner.schedule(snap)


@pytest.mark.parametrize("fluctuating", [True, False])
def test_a_machine_that_slows_mid_run_is_predicted_slower_once_observed(fluctuating):
    cluster = Cluster.homogeneous("four", nodes=4, gpus=1, cpus=8, mem=32)
    jobs = [JobSpec(job_id="a", submit_time=0.0, iterations=40000.0)]
    w = Watching(RWOUGP(fluctuating=fluctuating))
    simulate(jobs, cluster, w, PerWorker(), node_events=[NodeEvent(20000.0, 0, "speed", speed=0.6)])
    before = [m for t, m, _ in w.seen if 15000 < t < 20000]
    after = [m for t, m, _ in w.seen if t > 20000 + 3600]
    assert before and after
    assert before[-1][0] == pytest.approx(1.0, abs=0.03)
    assert after[-1][0] < 0.9 * before[-1][0]  # machine 0 is now predicted slower
    assert after[-1][0] < after[-1][1]  # and slower than the machines never seen slow
    if fluctuating:
        assert after[-1][0] == pytest.approx(0.6, abs=0.05)


def test_the_fluctuation_aware_gp_tracks_a_slowdown_faster_than_the_static_one():
    cluster = Cluster.homogeneous("four", nodes=4, gpus=1, cpus=8, mem=32)
    jobs = [JobSpec(job_id="a", submit_time=0.0, iterations=40000.0)]
    ev = [NodeEvent(20000.0, 0, "speed", speed=0.6)]
    runs = {}
    for fl in (True, False):
        w = Watching(RWOUGP(fluctuating=fl))
        simulate(jobs, cluster, w, PerWorker(), node_events=ev)
        runs[fl] = [m[0] for t, m, _ in w.seen if 20000 < t <= 21800][-1]
    assert abs(runs[True] - 0.6) < abs(runs[False] - 0.6)
