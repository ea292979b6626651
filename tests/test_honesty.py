"""Honesty by construction: a policy learns a job's total work only if the user declared it
(`JobState.declared_work`) or it runs as an oracle (`Snapshot.remaining_iterations`, which refuses
everyone else). No policy, phase, estimator or RL state encoder reads `spec.iterations` — the
simulator's ground truth — directly."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dlsched
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import Clock, JobState, Snapshot
from dlsched.core.cluster import Cluster

ROOT = Path(dlsched.__file__).parent
DECIDERS = sorted([*(ROOT / "policies").rglob("*.py"), *(ROOT / "estimators").rglob("*.py"),
                   *(ROOT / "models").rglob("*.py")])


@pytest.mark.parametrize("path", DECIDERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_decision_code_reads_the_true_work(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    reads = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "iterations"]
    assert not reads, f"{path.name} reads .iterations at lines {reads}: use job.declared_work or the oracle"


def test_declared_work_is_none_unless_declared_and_truth_needs_the_oracle():
    clock = Clock()
    hidden = JobState(JobSpec(job_id="a", submit_time=0.0, iterations=100.0), index=0, clock=clock)
    told = JobState(JobSpec(job_id="b", submit_time=0.0, iterations=50.0, work_known=True), index=1, clock=clock)
    assert hidden.declared_work is None and told.declared_work == 50.0
    cluster = Cluster.homogeneous("c", nodes=1, gpus=1, cpus=1, mem=1)
    snap = Snapshot(now=0.0, cluster=cluster, free=cluster.capacity, pending=[hidden], running=[],
                    restart_overhead=0.0)
    with pytest.raises(RuntimeError, match="oracle"):
        snap.remaining_iterations(hidden)
