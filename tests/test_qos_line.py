"""`PlainLine` and deferred prediction records: the qos policy takes `PhasedPolicy`'s incremental
path while no job has a deadline and none can shrink, and computes a record of a job without a
deadline when the records are read. Both must give exactly what running the phases on every
call, with every prediction made at once, gives."""

from __future__ import annotations

import dataclasses

import pytest

from dlsched.core.policy import Every
from dlsched.paths import traces_dir
from dlsched.policies.phases.records import PredictionRecord, Records
from dlsched.policies.qos import PlainLine, kube_autoscale, qos
from dlsched.sim.engine import simulate
from dlsched.throughput.registry import default_throughput
from dlsched.traces.qos_synthetic import qos_cluster, qos_workload

TP = default_throughput(traces_dir())


def _rigid(job):
    return dataclasses.replace(job, deadline=None, min_workers=job.num_workers, max_workers=job.num_workers)


def _mixed(jobs):
    """Every third job keeps its deadline, every other one is rigid: the line comes and goes."""
    out = []
    for i, j in enumerate(jobs):
        j = _rigid(j) if i % 2 else j
        out.append(j if i % 3 == 0 else dataclasses.replace(j, deadline=None))
    return out


def _line_calls(policy):
    """Counts the calls that took the plain line."""
    plain = policy.inner.inner
    assert isinstance(plain, PlainLine)
    calls = [0]
    orig = plain.line.schedule

    def counted(snap):
        calls[0] += 1
        return orig(snap)

    plain.line.schedule = counted
    return calls


def _records(policy):
    return [(k, repr(v)) for k, v in policy.sizing.predictions.items()]


@pytest.mark.parametrize("factory", [qos, kube_autoscale, lambda: qos(preempt="none")])
@pytest.mark.parametrize("workload", ["rigid", "mixed"])
def test_the_line_plans_as_the_phases(factory, workload):
    base = qos_workload(40, mean_interarrival=40.0, seed=5).jobs
    jobs = [_rigid(j) for j in base] if workload == "rigid" else _mixed(base)
    lined = factory()
    phases = Every(lined.inner.inner.inner, lined.interval)  # the phases on every call, no line
    calls = _line_calls(lined)
    a = simulate(jobs, qos_cluster(5), lined, TP)
    b = simulate(jobs, qos_cluster(5), phases, TP)
    assert a.jobs.equals(b.jobs)
    assert a.summary["policy_calls"] == b.summary["policy_calls"]
    assert _records(lined) == _records(phases) and _records(lined)
    assert calls[0] > 0
    if workload == "rigid":
        assert a.summary["preemptions"] == b.summary["preemptions"]


def test_deferred_records_are_the_eager_ones(monkeypatch):
    """A record computed when read equals the prediction made at its prediction point."""
    jobs = _mixed(qos_workload(40, mean_interarrival=40.0, seed=2).jobs)
    jobs = [dataclasses.replace(j, work_known=False) if i % 4 else j for i, j in enumerate(jobs)]  # fits
    deferred = qos()
    simulate(jobs, qos_cluster(5), deferred, TP)

    def eager(self, key, predictor, job, now):
        self.add(key, PredictionRecord(job.job_id, now, job.num_workers, job.num_ps, predictor.predict(job, now)))

    monkeypatch.setattr(Records, "defer", eager)
    made_at_once = qos()
    simulate(jobs, qos_cluster(5), made_at_once, TP)
    assert _records(deferred) == _records(made_at_once)
    sources = {r.prediction.source for r in deferred.sizing.predictions.values()}
    assert len(deferred.sizing.predictions) > 10 and "fit" in sources, sources
