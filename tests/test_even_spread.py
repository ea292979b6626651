"""`even_spread`'s single-task shortcut (`_one_task`) against the rule it must give."""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.core import Cluster, JobSpec
from dlsched.policies.phases.placement import even_spread


def _roomiest_that_fits(free: np.ndarray, demand: np.ndarray) -> tuple[int, ...] | None:
    """The general path for k = 1: servers by most room for the task (lowest index first among
    equals), the first one if its room is positive and the task fits there."""
    need = demand > 0
    room = ((free[:, need] + 1e-9) / demand[need]).min(axis=1)
    order = np.lexsort((np.arange(len(room)), -room))
    i = int(order[0])
    if room[i] > 0 and (free[i] + 1e-9 >= demand).all():
        return (i,)
    return None


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("as_ps", [False, True])
def test_a_single_task_goes_to_the_roomiest_server_that_fits(seed, as_ps):
    rng = np.random.default_rng(seed)
    cluster = Cluster.homogeneous("c", nodes=12, gpus=4, cpus=16, mem=64)
    spec = JobSpec("j", submit_time=0.0, iterations=10.0, arch="ps", max_workers=4, max_ps=4,
                   worker_demand=(1, 2, 4), ps_demand=(0, 3, 8))
    for _ in range(30):  # whole numbers: many ties, full and over-committed servers
        free = rng.integers(-1, 5, size=(12, 3)).astype(float) * np.array([1.0, 4.0, 16.0])
        workers, ps = (0, 1) if as_ps else (1, 0)
        demand = np.asarray(spec.ps_demand if as_ps else spec.worker_demand, dtype=float)
        got = even_spread(cluster, free, spec, workers=workers, ps=ps)
        want = _roomiest_that_fits(free, demand)
        assert (None if got is None else got.nodes) == want
        if got is not None:
            assert (got.workers, got.ps) == ((workers,), (ps,))
