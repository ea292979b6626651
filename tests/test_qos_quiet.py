"""`QuietTicks`: the qos policy answers ticks that cannot change anything without running its
phases, and the results are exactly those of running the phases on every tick."""

from __future__ import annotations

import dataclasses

import pytest

from dlsched.core.policy import Every
from dlsched.paths import traces_dir
from dlsched.policies.qos import QuietTicks, kube_autoscale, qos
from dlsched.sim.engine import simulate
from dlsched.throughput.registry import default_throughput
from dlsched.traces.qos_synthetic import qos_cluster, qos_workload

TP = default_throughput(traces_dir())


def _phases(policy):
    """The PhasedPolicy inside Every(QuietTicks(...)), with a counter of its calls."""
    assert isinstance(policy.inner, QuietTicks)
    phased = policy.inner.inner
    calls = [0]
    orig = phased.schedule

    def counted(snap):
        calls[0] += 1
        return orig(snap)

    phased.schedule = counted
    return phased, calls


def _unquiet(policy):
    """The same policy asked on every tick: its phases without the QuietTicks shortcut."""
    return Every(policy.inner.inner, policy.interval)


def _records(policy):
    return sorted((k, repr(v)) for k, v in policy.sizing.predictions.items())


@pytest.mark.parametrize("factory", [qos, kube_autoscale])
def test_without_deadlines_quiet_ticks_are_skipped_and_nothing_changes(factory):
    jobs = [dataclasses.replace(j, deadline=None) for j in qos_workload(30, seed=3).jobs]
    quiet, always = factory(), _unquiet(factory())
    _, calls = _phases(quiet)
    a = simulate(jobs, qos_cluster(6), quiet, TP)
    b = simulate(jobs, qos_cluster(6), always, TP)
    assert a.jobs.equals(b.jobs)
    assert _records(quiet) == _records(always) and _records(quiet)
    assert a.summary["policy_calls"] == b.summary["policy_calls"]
    assert calls[0] < 2 / 3 * a.summary["policy_calls"]  # many ticks found nothing to do


def test_with_deadlines_every_call_runs_the_phases():
    """Deadline decisions change with the clock alone (a job becomes late, a prediction misses):
    no tick is quiet while a job with a deadline is in the system."""
    jobs = qos_workload(20, seed=1).jobs
    quiet, always = qos(), _unquiet(qos())
    _, calls = _phases(quiet)
    a = simulate(jobs, qos_cluster(6), quiet, TP)
    b = simulate(jobs, qos_cluster(6), always, TP)
    assert a.jobs.equals(b.jobs)
    assert calls[0] == a.summary["policy_calls"]
