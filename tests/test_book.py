"""`Book.victims`: the running jobs above a key, highest first, exactly as a full sort would give,
whichever bounds (plain keys, or clocked bounds that follow the clock) it prunes with — also when
node speed changes re-rate running jobs (a clocked bound then holds no more) and restarts pause them."""

from __future__ import annotations

import random

import pytest

from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.policies.phases import book
from dlsched.policies.phases.ordering import ShortestRemainingTime
from dlsched.policies.registry import make_policy
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import NodeEvent, simulate
from tests.test_engine_events import PerWorker


def _workload(seed: int) -> tuple[list[JobSpec], list[NodeEvent]]:
    rng = random.Random(seed)
    jobs = [JobSpec(job_id=f"j{i}", submit_time=float(rng.randrange(0, 400)), iterations=float(rng.randrange(5, 300)),
                    num_workers=rng.choice([1, 1, 2, 4])) for i in range(60)]
    events = [NodeEvent(float(rng.randrange(1, 600)), rng.randrange(4), "speed", speed=rng.choice([0.25, 0.5, 1.0, 2.0]))
              for _ in range(12)]
    return jobs, events


def _run(jobs: list[JobSpec], events: list[NodeEvent]):
    cluster = Cluster.homogeneous("b", nodes=4, gpus=4, cpus=64, mem=256)
    res = simulate(jobs, cluster, make_policy("srtf"), PerWorker(), SimConfig(restart_overhead=3.0), node_events=events)
    return res.jobs.sort_values("job_id").reset_index(drop=True)


@pytest.mark.parametrize("seed", range(6))
def test_victims_hand_out_the_exact_order_with_speed_changes(seed, monkeypatch):
    """Every call's victims equal a full sort of the running jobs' keys, and the run equals one
    with plain bounds only (no clocked bound)."""
    calls = {"victims": 0, "clocked": 0}
    victims, clock_bound = book.Book.victims, ShortestRemainingTime.clock_bound

    def checked(self, snap, k):
        got = list(victims(self, snap, k))
        jobs = [j for j in snap.running if j.job_id in self.running]
        want = sorted(((self.key(snap, j), j.job_id) for j in jobs if self.key(snap, j) > k), reverse=True)
        assert [(x, j.job_id) for x, j in got] == want
        calls["victims"] += 1
        yield from victims(self, snap, k)

    def counted(self, snap, job, key):
        c = clock_bound(self, snap, job, key)
        calls["clocked"] += c is not None
        return c

    jobs, events = _workload(seed)
    monkeypatch.setattr(book.Book, "victims", checked)
    monkeypatch.setattr(ShortestRemainingTime, "clock_bound", counted)
    clocked = _run(jobs, events)
    assert calls["victims"] > 0 and calls["clocked"] > 0
    monkeypatch.setattr(ShortestRemainingTime, "clock_bound", lambda self, snap, job, key: None)
    plain = _run(jobs, events)
    assert clocked.equals(plain)


def test_a_job_slowed_down_after_it_was_bounded_is_bounded_again():
    """Job a is bounded at t=5 (x arrives and does not fit) while it runs at full speed, then its
    node slows to a quarter: its remaining time falls slower than the clock from then on, so its
    clocked bound no longer holds. At t=50 a has 100 - 10 - 40/4 = 80 s left at the oracle rate,
    more than b's 75: b must preempt it (a stale bound, 100 - 50 = 50, would say a ranks above b)."""
    jobs = [JobSpec(job_id="a", submit_time=0.0, iterations=100.0),
            JobSpec(job_id="x", submit_time=5.0, iterations=200.0),
            JobSpec(job_id="b", submit_time=50.0, iterations=75.0)]
    cluster = Cluster.homogeneous("b", nodes=1, gpus=1, cpus=8, mem=32)
    res = simulate(jobs, cluster, make_policy("srtf"), PerWorker(), SimConfig(),
                   node_events=[NodeEvent(10.0, 0, "speed", speed=0.25)]).jobs.set_index("job_id")
    assert res.loc["b", "start"] == pytest.approx(50.0)
    assert res.loc["a", "preemptions"] == 1
