"""Core vocabulary: cluster, jobs, allocations, snapshots, plans and the policy protocol."""

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import CPU, GPU, MEM, RESOURCES, Cluster, Network
from dlsched.core.errors import ConfigError, DlschedError, PlanError, TraceError
from dlsched.core.job import Architecture, JobSpec
from dlsched.core.plan import Plan
from dlsched.core.policy import Policy
from dlsched.core.snapshot import Clock, JobState, JobStatus, Snapshot

__all__ = [
    "Allocation", "Architecture", "CPU", "Clock", "Cluster", "ConfigError", "DlschedError", "GPU",
    "JobSpec", "JobState", "JobStatus", "MEM", "Network", "Plan", "PlanError",
    "Policy", "RESOURCES", "Snapshot", "TraceError",
]
