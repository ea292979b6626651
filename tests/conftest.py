"""Shared helpers: small clusters and jobs built in code, so tests need no files."""

from __future__ import annotations

import pytest

from dlsched.core import Cluster, JobSpec


def rigid_job(i: int, submit: float, duration: float, gpus: int = 1, **kw) -> JobSpec:
    return JobSpec(job_id=f"j{i}", submit_time=submit, iterations=duration, duration=duration,
                   num_workers=gpus, arch="single" if gpus == 1 else "allreduce", **kw)


@pytest.fixture
def small_cluster() -> Cluster:
    return Cluster.homogeneous("small", nodes=4, gpus=4, cpus=32, mem=256, nodes_per_rack=2)
