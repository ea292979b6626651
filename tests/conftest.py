"""Shared helpers: small clusters and jobs built in code, so tests need no files."""

from __future__ import annotations

import pytest

from dlsched.core import Cluster, JobSpec


def rigid_job(i: int, submit: float, duration: float, gpus: int = 1, **kw) -> JobSpec:
    return JobSpec(job_id=f"j{i}", submit_time=submit, iterations=duration, duration=duration,
                   num_workers=gpus, arch="single" if gpus == 1 else "allreduce", **kw)


@pytest.hookimpl(trylast=True)  # after pytest's own reordering (fixtures, deselection): this order is final
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `long` (the suite's slowest, ~35-90 s each) first, each keeping its place among
    the others. Under `pytest -n 2 --dist loadgroup` every test outside an xdist_group is a work unit
    of its own, handed out in collection order (the k8s group, the biggest unit, goes first anyway), so
    a long test collected late could start when the other worker is nearly done and leave it idle
    for the rest of the run; started first, the long ones overlap the k8s group and the short tests
    even out the end. Tests in an xdist_group are left where they are: a group is one unit whatever
    the order of its tests, and their order inside it is not changed."""
    def first(item: pytest.Item) -> bool:
        return item.get_closest_marker("long") is not None and item.get_closest_marker("xdist_group") is None

    items[:] = [i for i in items if first(i)] + [i for i in items if not first(i)]


@pytest.fixture
def small_cluster() -> Cluster:
    return Cluster.homogeneous("small", nodes=4, gpus=4, cpus=32, mem=256, nodes_per_rack=2)
