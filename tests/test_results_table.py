"""The run's tables kept as columns (`sim.results`): the same DataFrames as the rows they replace,
and the engine lets a finished job's JobState go."""

from __future__ import annotations

import gc
import random
from types import SimpleNamespace

import numpy as np
import pandas as pd

from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import Clock, JobState, JobStatus
from dlsched.policies.fifo import fifo
from dlsched.sim.engine import Simulator
from dlsched.sim.results import JOB_COLUMNS, JobTable, Timeline, _Columns
from dlsched.throughput.duration_only import DurationOnly


def _state(i: int, rng: random.Random) -> JobState:
    """A job in any final state, with the odd value types a trace or a test can give: int
    times and work, deadlines on some jobs, a utility on some."""
    submit = rng.choice([i, float(i), np.float64(i) + 0.5])
    spec = JobSpec(job_id=f"j{i}", submit_time=submit, iterations=rng.choice([100, 100.0]),
                   deadline=submit + 50 if rng.random() < 0.3 else None,
                   utility=(lambda jct: 1.0 / (1.0 + jct)) if rng.random() < 0.2 else None,
                   extra={"profile": "p"} if rng.random() < 0.1 else {})
    js = JobState(spec=spec, index=i, clock=Clock(0.0))
    js.status = rng.choice([JobStatus.DONE, JobStatus.DONE, JobStatus.REJECTED, JobStatus.UNFINISHED])
    if js.status is not JobStatus.REJECTED:
        js.first_start = submit + rng.choice([0, 3.5])
    if js.status is JobStatus.DONE:
        js.end_time = js.first_start + rng.choice([10, 20.25])
        js._progress = spec.iterations
        js._run_time = 10.0
    js.reason = "" if js.status is JobStatus.DONE else "why"
    js.restarts = rng.choice([0, 1])
    return js


def test_the_job_table_is_the_frame_of_its_rows_in_index_order() -> None:
    rng = random.Random(3)
    states = [_state(i, rng) for i in range(3 * _Columns.BUFFER + 17)]  # several flushes
    expected = pd.DataFrame.from_records([JobTable.row(js, DurationOnly()) for js in states], columns=JOB_COLUMNS)
    table = JobTable(DurationOnly())
    for js in rng.sample(states, len(states)):  # jobs end in any order
        table.add(js)
    pd.testing.assert_frame_equal(table.frame(), expected, check_exact=True)


def test_typed_columns_are_the_arrays_of_their_values() -> None:
    rng = random.Random(4)
    states = []
    for i in range(2 * _Columns.BUFFER):
        js = _state(i, rng)
        object.__setattr__(js.spec, "submit_time", float(i))  # floats only: the typed fast path
        object.__setattr__(js.spec, "iterations", 100.0)
        states.append(js)
    expected = pd.DataFrame.from_records([JobTable.row(js, None) for js in states], columns=JOB_COLUMNS)
    table = JobTable()
    for js in states:
        table.add(js)
    got = table.frame()
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert got["submit"].dtype == np.float64 and got["restarts"].dtype == np.int64
    assert JobTable().frame().equals(pd.DataFrame.from_records([], columns=JOB_COLUMNS))


def test_the_timeline_keeps_the_last_sample_of_a_time() -> None:
    rng = random.Random(5)
    lists = SimpleNamespace(**{c: [] for c in Timeline.COLUMNS})
    tl = Timeline()
    t = 0.0
    for k in range(3 * _Columns.BUFFER):
        if rng.random() < 0.6:
            t += rng.choice([1, 0.5])  # an int time now and then: the column keeps what it got
        row = (t, float(k), float(k) / 2, 0.0, k, rng.randrange(5))
        tl.record(*row)
        if lists.t and lists.t[-1] == t:  # what the engine's lists did
            for c, v in zip(Timeline.COLUMNS, row):
                getattr(lists, c)[-1] = v
        else:
            for c, v in zip(Timeline.COLUMNS, row):
                getattr(lists, c).append(v)
    expected = pd.DataFrame({c: getattr(lists, c) for c in Timeline.COLUMNS})
    pd.testing.assert_frame_equal(tl.frame(), expected, check_exact=True)


def test_the_engine_lets_finished_jobs_go() -> None:
    """Only jobs in the system have a JobState: during the run the engine holds no more of them
    than are waiting or running, and after it only the few its policy and core saw last are left
    (fifo's Book used to keep every job it ever started)."""
    cluster = Cluster.homogeneous("t", nodes=1, gpus=4, cpus=64, mem=512)
    jobs = [JobSpec(job_id=f"j{i}", submit_time=10.0 * i, iterations=5.0, duration=5.0) for i in range(1000)]
    policy = fifo()
    inner, held = policy.schedule, []

    def schedule(snap):
        held.append(len(sim.live) - len(snap.pending) - len(snap.running))
        return inner(snap)

    policy.schedule = schedule
    sim = Simulator(cluster, DurationOnly(), policy)
    result = sim.run(jobs)
    gc.collect()
    assert held and max(held) == 0
    assert not sim.live and not sim.state.jobs
    assert sum(type(o) is JobState for o in gc.get_objects()) < 100
    assert result.jobs["job_id"].tolist() == [j.job_id for j in jobs]
    assert (result.jobs["status"] == "done").all()
