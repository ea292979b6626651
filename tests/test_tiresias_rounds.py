"""Tiresias's cheap rounds give the answers of the full ones, and the realiser's deferred
bookkeeping of its free array shows every placement once the array is read."""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.core import Clock
from dlsched.framework.packing import add_use
from dlsched.policies.phases.placement import Pack
from dlsched.policies.phases.realise import Realiser
from dlsched.policies.tiresias import Tiresias, tiresias
from tests.test_policies_baselines import job, node, random_rigid, run
from tests.test_realise import _snap, _state


class FullRounds(Tiresias):
    """Tiresias that runs the realiser and every walk on every round, and checks that a round the
    shortcut (`_may_start`) would skip indeed starts and preempts nothing."""

    skipped = 0

    def _may_start(self, free_gpus: float, held: float, entering: list[float]) -> bool:
        self._would_skip = not super()._may_start(free_gpus, held, entering)
        return True

    def _round(self, snap, now):
        started, gone = super()._round(snap, now)
        if self._would_skip:
            assert not started and not gone
            FullRounds.skipped += 1
        return started, gone


@pytest.mark.parametrize("seed,knob", [(0, 8.0), (3, 0.0)])
def test_skipped_rounds_change_nothing(seed, knob):
    jobs = random_rigid(seed, 150, 30, 6.5, 1.5, [1, 1, 2, 4, 8])
    cluster = node(n=3, gpus=8)
    fast = run(jobs, cluster, tiresias(promote_knob=knob)).jobs.set_index("job_id")
    FullRounds.skipped = 0
    full = run(jobs, cluster, FullRounds((3250.0, 7200.0, 18000.0), knob, Pack())).jobs.set_index("job_id")
    assert FullRounds.skipped > 0  # the workload has rounds where nothing waiting fits
    assert fast["preemptions"].sum() > 0
    np.testing.assert_array_equal(fast["preemptions"].to_numpy(), full["preemptions"].to_numpy())
    np.testing.assert_array_equal(fast["end"].to_numpy(), full["end"].to_numpy())


def test_realiser_free_shows_every_placement_once_read():
    cluster = node(n=2, gpus=4)
    clock = Clock(0.0)
    a, b = (_state(job(n, 0, 100, g), i, clock) for i, (n, g) in enumerate([("a", 2), ("b", 3)]))
    snap = _snap(cluster, [], [a, b])
    r = Realiser(snap, Pack(), preempt="minimal")
    alloc_a = r.offer(a, a.spec.num_workers, 0)
    alloc_b = r.offer(b, b.spec.num_workers, 0)
    expected = cluster.capacity.astype(float)
    add_use(expected, a.spec, alloc_a, -1.0)
    add_use(expected, b.spec, alloc_b, -1.0)
    np.testing.assert_array_equal(r.free, expected)
    assert r.free_gpus == float(expected[:, 0].sum())
    np.testing.assert_array_equal(snap.free, cluster.capacity)  # the snapshot's array is left alone
