"""`even_spread` through the compiled walks (`placement_compiled`) must give the NumPy path's
allocation: Optimus' figures in the docs were made with the NumPy one."""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.policies.phases import placement
from dlsched.policies.phases.placement import even_spread


def _specs() -> list[JobSpec]:
    demands = [(1.0, 4.0, 16.0), (2.0, 8.0, 64.0), (0.0, 2.0, 8.0), (1.0, 0.0, 0.0), (0.0, 0.0, 0.0),
               (0.5, 1.5, 3.0)]
    return [JobSpec(job_id=f"j{i}", submit_time=0.0, iterations=100.0, worker_demand=d, ps_demand=demands[-1 - i])
            for i, d in enumerate(demands)]


@pytest.mark.parametrize("typed", [False, True])
def test_the_compiled_spread_is_the_numpy_spread(monkeypatch, typed):
    rng = np.random.default_rng(7 + typed)
    nodes = 24
    cluster = Cluster.homogeneous("t", nodes=nodes, gpus=8, cpus=32, mem=256, nodes_per_rack=4)
    if typed:  # a job of one GPU type sees only that type's nodes (the mask)
        types = ["v100" if i % 3 else "k80" for i in range(nodes)]
        cluster = Cluster(name="t", capacity=np.tile([8.0, 32.0, 256.0], (nodes, 1)),
                          gpu_type=np.array(types, dtype=object), rack=np.arange(nodes) // 4,
                          speed=np.ones(nodes), node_names=tuple(f"n{i}" for i in range(nodes)))
    specs = _specs()
    if typed:
        specs = [JobSpec(job_id=s.job_id, submit_time=0.0, iterations=100.0, worker_demand=s.worker_demand,
                         ps_demand=s.ps_demand, gpu_type="k80") for s in specs]
    cases = []
    for _ in range(120):
        free = cluster.capacity * rng.choice([0.0, 0.25, 0.5, 1.0], size=cluster.capacity.shape)
        free[rng.random(nodes) < rng.uniform(0.2, 1.0)] = 0.0  # full nodes, sometimes all of them
        free[rng.random(nodes) < 0.1, 2] = -8.0  # over-committed memory (a failed node's jobs still on it)
        for spec in specs:
            for workers, ps in ((1, 0), (0, 1), (2, 0), (3, 1), (4, 2), (8, 0), (5, 3), (16, 4)):
                cases.append((free, spec, workers, ps))
    compiled = [even_spread(cluster, f, s, w, p) for f, s, w, p in cases]
    monkeypatch.setattr(placement, "kernel", lambda module, name: None)  # the NumPy path
    plain = [even_spread(cluster, f, s, w, p) for f, s, w, p in cases]
    assert compiled == plain
    assert sum(a is None for a in plain) > 100 and sum(a is not None for a in plain) > 1000  # both answers occur
