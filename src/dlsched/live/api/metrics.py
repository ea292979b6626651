"""Prometheus metrics of the live runtime, served at GET /metrics.

Each `LiveMetrics` has its own registry (not prometheus_client's global one), so several
services or tests in one process never collide over metric names and a scrape shows exactly one
service's numbers. The controller feeds the decision, resize and action metrics as it acts; the
API refreshes the per-status job counts from the store at each scrape, so they are right even
when the controller is stuck or absent.
"""

from __future__ import annotations

from typing import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

#: What `actions_total{kind=...}` counts.
ACTION_KINDS: tuple[str, ...] = ("start", "stop", "resize", "restart", "hold", "cancel")

CONTENT_TYPE = CONTENT_TYPE_LATEST


class LiveMetrics:
    """The live runtime's metrics in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.decision_seconds = Histogram(
            "dlsched_decision_seconds", "Time the policy took to produce one plan",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=r)
        self.resize_pause_seconds = Histogram(
            "dlsched_resize_pause_seconds", "From asking a running job to stop until its first step at the new size",
            buckets=(0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0), registry=r)
        self.decision_failures_total = Counter(
            "dlsched_decision_failures", "Decisions that failed: a plan the core refused, or the policy raised",
            registry=r)
        self.decision_failing = Gauge(
            "dlsched_decision_failing", "1 while the last decision failed (jobs are not being scheduled)", registry=r)
        self.actions_total = Counter(
            "dlsched_actions", "Actions the controller applied", ["kind"], registry=r)
        self.jobs = Gauge("dlsched_jobs", "Jobs in the store by status", ["status"], registry=r)
        self.gpu_slots_total = Gauge("dlsched_gpu_slots_total", "GPU slots of the cluster", registry=r)
        self.gpu_slots_used = Gauge("dlsched_gpu_slots_used", "GPU slots allocated to running jobs", registry=r)
        self.job_steps_per_second = Gauge(
            "dlsched_job_steps_per_second", "Training speed of each running job, measured by its trainer", ["job"],
            registry=r)
        for kind in ACTION_KINDS:  # export zeros, so rate() works from the first scrape
            self.actions_total.labels(kind=kind)

    def set_job_counts(self, counts: Mapping[str, int]) -> None:
        for status, n in counts.items():
            self.jobs.labels(status=status).set(n)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
