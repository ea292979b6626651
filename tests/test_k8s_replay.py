"""A trace replayed on a real kube-apiserver (and the real kube-scheduler) matches its simulation.

Each test starts a control plane of its own (`run_replays` does): kube-scheduler binds every pod
with the default scheduler name, which the session control plane's other tests do not expect.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from dlsched.cli import app
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.sim.config import SimConfig
from dlsched.throughput.registry import default_throughput
from tests.k8s_control_plane import binaries_or_skip

runner = CliRunner()


def _workload(n: int = 10, seed: int = 3) -> list[JobSpec]:
    """Rigid duration-only jobs of 1–8 GPUs, 20–60 min each, one every 5 min: they queue on 16 GPUs."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        dur = float(rng.integers(1200, 3600))
        out.append(JobSpec(job_id=f"j{i:02d}", submit_time=300.0 * i, iterations=dur, duration=dur,
                           num_workers=int(rng.choice([1, 2, 4, 8])), worker_demand=(1.0, 4.0, 16.0)))
    return out


@pytest.mark.k8s
@pytest.mark.xdist_group("k8s")
def test_a_replay_on_the_real_api_and_the_real_kube_scheduler_matches_its_simulation(tmp_path):
    from dlsched.k8s.replay_compare import run_replays

    bins = binaries_or_skip()
    specs = _workload()
    cluster = Cluster.homogeneous("replay-test", nodes=2, gpus=8, cpus=64, mem=512)
    # 40 trace seconds a round (tick x speedup), paced at 0.1 s wall: the stepped trace clock makes what
    # is replayed depend on the trace step, not on the wall pacing (a round that takes longer holds the
    # trace still); 0.2 s at 200x, the same step, replayed the same jobs (gaps 0.0 both) in 64 s, not 41
    cmp = run_replays(specs, cluster, ["kube-scheduler", "fifo"], default_throughput(None), SimConfig(),
                      speedup=400.0, tick=0.1, work_dir=tmp_path, timeout=240, bin_dir=bins)
    assert cmp.cluster.num_nodes == 2 and cmp.cluster.total_gpus == 16
    assert [r.result.policy for r in cmp.replays] == ["kube-scheduler@k8s", "fifo@k8s"]
    for rep in cmp.replays:
        jobs = rep.result.jobs
        assert sorted(jobs.job_id) == [s.job_id for s in specs]  # the trace's own ids, one row each
        assert (jobs.status == "done").all(), jobs[["job_id", "status", "reason"]]
        assert rep.pods_created >= sum(s.num_workers for s in specs)
        assert (jobs.queueing_delay > 0).any()  # the cluster was full at times: an order was decided
    for gap in cmp.gaps():
        assert gap["sim_finished"] == gap["replay_finished"] == len(specs)
        assert abs(gap["jct_gap"]) <= 0.10, gap
        assert abs(gap["utilization_gap"]) <= 0.10, gap
    for rep in cmp.replays:  # a job ends when its work is done (duration-only: its duration), not at a round
        jobs = rep.result.jobs
        assert ((jobs.end - jobs.start) - jobs.iterations).abs().max() < 1.0, jobs[["job_id", "start", "end"]]
    # dlsched's fifo, job by job: rounds fall on the simulator's instants (arrivals and run ends), so
    # every job starts and ends when it did in the simulation (to the replay's 1 ms), not a round later
    sim = next(s for s in cmp.simulated if s.policy == "fifo").jobs.set_index("job_id")
    live = cmp.replays[1].result.jobs.set_index("job_id")
    assert (live.start - sim.start).abs().max() < 1.0, (live.start - sim.start)
    assert (live.end - sim.end).abs().max() < 1.0, (live.end - sim.end)


def test_replay_refuses_bad_input_before_starting_anything(tmp_path):
    for args, words in ((["--speedup", "0"], "--speedup must be a positive number"),
                        (["--tick", "0"], "--tick must be between"),
                        (["--policies", "fifo,nope"], "nope"),
                        (["--policies", "srtf"], "cannot replay srtf")):
        res = runner.invoke(app, ["replay", "--limit", "5", "--out", str(tmp_path / "r"), *args])
        assert res.exit_code == 2, res.output
        assert words in res.output, res.output
        assert not (tmp_path / "r").exists()


@pytest.mark.k8s
@pytest.mark.xdist_group("k8s")
def test_dlsched_replay_writes_the_simulated_and_replayed_runs_in_one_report(tmp_path):
    binaries_or_skip()
    out = tmp_path / "report"
    res = runner.invoke(app, ["replay", "--limit", "6", "--speedup", "3000", "--policies", "fifo", "--rigid",
                              "--out", str(out), "--format", "json"])
    assert res.exit_code == 0, res.output
    gaps = json.loads(res.output[res.output.index("["):])
    assert [g["replay"] for g in gaps] == ["fifo@k8s"] and gaps[0]["simulated"] == "fifo"
    import pandas as pd

    jobs = pd.read_csv(out / "jobs.csv")
    assert set(jobs.policy) == {"fifo", "fifo@k8s"}
    assert (jobs.groupby("policy").size() == 6).all()
    saved = json.loads((out / "replay.json").read_text())
    assert saved["replays"][0]["pods_created"] >= 6 and saved["gaps"] == gaps


def test_the_stepped_clock_moves_to_the_next_event_within_a_step():
    from dlsched.k8s.replay import SteppedClock, next_round

    clock = SteppedClock(900.0, origin=0.0)
    clock.advance(until=100.0)
    assert clock() == 100.0  # an event before the step: the round falls on it
    clock.advance(until=50.0)
    assert clock() == 1000.0  # one already behind: a whole step
    clock.advance(until=5000.0)
    assert clock() == 1900.0  # one beyond the step: the step
    began = time.monotonic()
    assert next_round(clock, 0.9, began, time.time(), 10.0, [None, float("inf"), 1990.0, 3000.0]) == ""
    assert clock() == 1990.0  # the earliest event still ahead; none, inf and later ones ignored
    assert 0.08 <= time.monotonic() - began < 0.5  # a tenth of the step: a tenth of the tick (0.09 s)
    assert "timeout" in next_round(clock, 0.0, 0.0, 0.0, 1.0)  # t_wall 0: long past its timeout
    assert clock() == 1990.0  # and the clock did not move


def test_a_round_waits_for_kube_schedulers_pass_over_its_queue_and_gives_up_without_it():
    from dlsched.k8s.default_scheduler import pass_over

    lengths = iter([{"active": 300.0, "backoff": 0.0}, {"active": 0.0, "backoff": 2.0},
                    {"active": 0.0, "backoff": 0.0, "unschedulable": 302.0}])
    seen = []
    assert pass_over(lambda: seen.append(1) or next(lengths), limit_s=10) is True
    assert len(seen) == 3  # it polled until both queues were empty, not just the active one
    assert pass_over(dict, limit_s=10) is False  # metrics not readable: no wait at all
