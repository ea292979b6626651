"""Queueing delay counts every wait: before the first start and after each preemption or failed run.

The wait is accumulated in the one job lifecycle (`ClusterState` settling `JobState.waited`), so
the simulator and the live controller count it alike; the wait before the first start stays a
column of its own (`first_start_delay`)."""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import Clock, JobState, JobStatus
from dlsched.framework.state import ClusterState
from dlsched.policies.fifo import fifo
from dlsched.policies.srtf import srtf
from dlsched.policies.tiresias import tiresias
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import Simulator, simulate
from dlsched.throughput.duration_only import DurationOnly

NODE = Cluster.homogeneous("t", nodes=1, gpus=4, cpus=64, mem=512)


def job(name: str, submit: float, seconds: float, gpus: int = 1) -> JobSpec:
    return JobSpec(job_id=name, submit_time=submit, iterations=seconds, duration=seconds, num_workers=gpus,
                   arch="single" if gpus == 1 else "allreduce")


def heavy_tailed(n: int, seed: int) -> list[JobSpec]:
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 1, 1, 2, 4, 8], size=n)
    dur = np.exp(rng.normal(6.5, 1.4, size=n)).clip(10, 5e4)
    t = np.cumsum(rng.exponential(float((sizes * dur).mean()) / (0.9 * 16), size=n))
    return [job(f"h{i}", float(t[i]), float(dur[i]), int(sizes[i])) for i in range(n)]


def test_a_preempted_job_counts_its_wait_after_the_preemption():
    # "long" runs 0-10, waits while "short" runs 10-110, restarts at 110 (a 10 s pause while it
    # holds its GPUs: running, not waiting) and ends at 1110.
    r = simulate([job("long", 0, 1000, 4), job("short", 10, 100, 4)], NODE, srtf(), DurationOnly(), SimConfig())
    rows = r.jobs.set_index("job_id")
    assert rows.loc["long", "preemptions"] == 1
    assert rows.loc["long", "queueing_delay"] == pytest.approx(100.0)
    assert rows.loc["long", "first_start_delay"] == pytest.approx(0.0)
    assert rows.loc["short", "queueing_delay"] == pytest.approx(0.0)
    assert r.summary["mean_queueing_delay"] == pytest.approx(50.0)
    assert r.summary["mean_first_start_delay"] == pytest.approx(0.0)


class _KeepsEnded(Simulator):
    """A Simulator that keeps every ended JobState (the engine lets them go once their row is in
    the table)."""

    def _ended(self, js: JobState) -> None:
        self.ended.append(js)
        super()._ended(js)


@pytest.mark.parametrize("make", [tiresias, srtf], ids=["tiresias", "srtf"])
def test_every_second_of_a_finished_job_is_either_waiting_or_running(make):
    """JCT = total wait + time holding a running allocation, for every finished job of a
    preemptive policy; the first-start wait is a part of the total."""
    sim = _KeepsEnded(Cluster.homogeneous("t", nodes=2, gpus=8, cpus=64, mem=512), DurationOnly(), make())
    sim.ended = []
    r = sim.run(heavy_tailed(120, seed=5))
    done = [js for js in sim.ended if js.status is JobStatus.DONE]
    assert len(done) == 120
    assert sum(js.preemptions for js in done) > 0  # the check is about waits after a preemption
    for js in done:
        assert js.waited + js.run_time == pytest.approx(js.end_time - js.spec.submit_time, abs=1e-6)
    rows = r.jobs
    assert (rows["queueing_delay"] >= rows["first_start_delay"] - 1e-9).all()
    preempted = rows["preemptions"] > 0
    assert (rows.loc[preempted, "queueing_delay"] > rows.loc[preempted, "first_start_delay"]).any()
    assert r.summary["mean_queueing_delay"] > r.summary["mean_first_start_delay"]


def test_without_preemption_the_two_waits_are_the_same():
    r = simulate(heavy_tailed(80, seed=2), Cluster.homogeneous("t", nodes=2, gpus=8, cpus=64, mem=512),
                 fifo(), DurationOnly(), SimConfig())
    assert r.summary["preemptions"] == 0
    np.testing.assert_allclose(r.jobs["queueing_delay"], r.jobs["first_start_delay"], atol=1e-6)


def test_a_job_still_waiting_when_the_run_stops_counts_its_wait_until_then():
    r = simulate([job("a", 0, 1000, 4), job("b", 100, 50, 4)], NODE, fifo(), DurationOnly(),
                 SimConfig(max_time=400.0))
    b = r.jobs.set_index("job_id").loc["b"]
    assert b["status"] == "unfinished"
    assert b["queueing_delay"] == pytest.approx(300.0)
    assert np.isnan(b["first_start_delay"])


def test_the_shared_lifecycle_counts_waits_for_the_live_controller_too():
    """The live controller drives the same ClusterState on wall-clock time: arrive at 0, run 5-20,
    fail back to the queue, run again 50-60 → waited 5 + 30 s, with the current wait visible
    while the job waits."""
    clock = Clock(0.0)
    state = ClusterState(NODE, clock)
    js = JobState(spec=job("j", 0.0, 100.0), index=0, clock=clock)
    alloc = Allocation.single_node(0, 1)
    state.arrive(js, 0.0)
    state.start(js, alloc, 5.0)
    state.stop(js, 20.0, preempted=False)
    clock.now = 42.0
    assert js.waited == pytest.approx(5.0 + 22.0)  # still waiting: read through the clock
    state.start(js, alloc, 50.0)
    clock.now = 55.0
    assert js.waited == pytest.approx(35.0)  # running: no longer grows
    state.end(js, 60.0, JobStatus.DONE)
    clock.now = 1000.0
    assert js.waited == pytest.approx(35.0)
