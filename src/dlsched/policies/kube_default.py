"""The default Kubernetes scheduler running tf-operator jobs: pod by pod, spreading, no gang.

This is the comparison point of DRAGON (Lin, Yeh, Chou; CLOSER 2019). What it models:

- tf-operator creates all of a job's pods when the job is submitted: its PSs, then its workers.
- kube-scheduler pops pods from its active queue by (priority, creation time). All priorities
  are equal here, so pods go in order of (job submit time, job index, PSs before workers).
- Each pod is bound on its own to the node that fits it (resources and GPU-type node selector)
  with the best LeastAllocated score: the mean over the scored resources of
  (allocatable - requested - this pod) / allocatable (`framework.scoring.least_allocated`, bound by the
  same `TaskByTask.bind` as `gang.bind_pods`); ties go to one of the tied nodes at random
  (seeded by the run's seed), as kube-scheduler's `selectHost` does. This matters: a lowest-index
  tie-break keeps a job's pods on consecutive nodes of one rack, random ones spread it over
  racks, and measured curves charge that (docs/KUBERNETES.md, "Replaying a trace"). By default
  the scored resources are CPU and memory, as in kube-scheduler's default NodeResourcesFit
  configuration; GPUs are only filtered on.
- No gang: bound pods of a job whose other pods are still pending hold their resources and do no
  work (`Plan.held`); the job runs only once every pod is bound. This can deadlock (partial jobs
  holding everything), and then the engine ends the run with the rest unfinished: that is real.
- Never preemptive: a bound pod is never moved or unbound, and a running job keeps its nodes.
- A pod that fits nowhere stays pending and is retried at the next event (an arrival or a
  completion frees or changes something). kube-scheduler's exponential back-off and its
  unschedulable queue are not modelled beyond that, nor percentageOfNodesToScore sampling.
- The queue never blocks on one pod: when a pod fails, later pods (of the same job or of later
  jobs) are still tried in the same round.

Where the real kube-scheduler differs (measured against it on a real API server, docs/KUBERNETES.md
"Replaying a trace"): when the pods of a job that ends leave together, its queue (ordered by each
pod's last failed attempt, failed pods backed off) gives part of the freed room to newer pods: a
race between API events and its queue, from 2 to 8 of 8 freed GPUs to the oldest job in identical
trials. This imitation is the deterministic limit of that, room freed one pod at a time, where
kube-scheduler too is FIFO. On a 200-job ITP slice its mean JCT is 7% below the real one's (1%
with the real one given room one pod at a time).

Cost per round: pods of one resource shape that did not fit cannot fit later in the same round
(binding only takes resources away), so each failed shape is tried once per round; the round
stops early once every shape still waiting has failed.
"""

from __future__ import annotations

from collections import Counter
from functools import partial

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import RESOURCES, Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.plan import Plan
from dlsched.core.policy import Policy
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.framework.scoring import TaskByTask, least_allocated

_PS, _WORKER = 0, 1


class _Pods:
    """One waiting job: how many of its PS and worker pods are unbound, and where the rest are."""

    __slots__ = ("job", "left", "bound", "held")

    def __init__(self, job: JobState):
        self.job = job
        self.left = [job.spec.num_ps, job.spec.num_workers]
        self.bound: dict[int, tuple[int, int]] = {}  # node -> (workers, ps)
        self.held: Allocation | None = None

    def shape(self, kind: int) -> tuple:
        s = self.job.spec
        return (s.ps_demand if kind == _PS else s.worker_demand, s.gpu_type)


class KubeDefault(Policy):
    """See the module docstring."""

    name = "kube-default"

    def __init__(self, scored: tuple[str, ...] = ("cpu", "mem"), ties: str = "random"):
        bad = [r for r in scored if r not in RESOURCES]
        if bad or not scored:
            raise ConfigError(f"scored resources must be a non-empty subset of {RESOURCES}, got {scored!r}")
        if ties not in ("random", "lowest"):
            raise ConfigError(f"ties must be 'random' (kube-scheduler's) or 'lowest' (lowest node index), got {ties!r}")
        self.ties = ties
        self._binder = TaskByTask(partial(least_allocated, resources=tuple(RESOURCES.index(r) for r in scored)), self.name)
        self.reset(None, 0)

    def reset(self, cluster: Cluster | None, seed: int) -> None:
        self._ties = np.random.default_rng(seed) if self.ties == "random" else None
        self._waiting: dict[int, _Pods] = {}  # by job index, in pod-creation order
        self._need: Counter = Counter()  # pod shape -> waiting jobs with unbound pods of it
        self._held: dict[str, Allocation] = {}  # partial placements, by job id

    # ------------------------------------------------------------------ bookkeeping
    def _track(self, job: JobState) -> None:
        p = _Pods(job)
        self._waiting[job.index] = p
        for kind in (_PS, _WORKER):
            if p.left[kind]:
                self._need[p.shape(kind)] += 1

    def _sync(self, snap: Snapshot) -> None:
        """Track the jobs that queued since the last call (arrived, or stopped by a failure) and
        forget those that left while waiting, from the snapshot's deltas. When the count does not
        add up (a wrapper skipped a call, so deltas were missed), compare with the whole queue."""
        for job in snap.finished:
            if job.index in self._waiting:
                self._forget(job.index)
        for job in sorted(snap.arrived + snap.stopped, key=lambda j: (j.spec.submit_time, j.index)):
            if job.index not in self._waiting:
                self._track(job)
        if snap.num_pending != len(self._waiting):
            pending = snap.pending
            alive = {j.index for j in pending}
            for idx in [i for i in self._waiting if i not in alive]:
                self._forget(idx)
            for job in sorted((j for j in pending if j.index not in self._waiting),
                              key=lambda j: (j.spec.submit_time, j.index)):
                self._track(job)

    def _forget(self, idx: int) -> None:
        p = self._waiting.pop(idx)
        self._held.pop(p.job.job_id, None)
        for kind in (_PS, _WORKER):
            if p.left[kind]:
                self._drop_need(p.shape(kind))

    def _drop_need(self, shape: tuple) -> None:
        self._need[shape] -= 1
        if self._need[shape] <= 0:
            del self._need[shape]

    # ------------------------------------------------------------------ scheduling
    def schedule(self, snap: Snapshot) -> Plan:
        self._sync(snap)
        plan = Plan(keep_running=True)  # never preempts: the plan lists only the jobs that start
        room: np.ndarray | None = None
        failed: set[tuple] = set()
        started: list[int] = []
        for idx, p in self._waiting.items():
            if len(failed) >= len(self._need):
                break  # every shape still waiting failed this round: nothing more can bind
            spec = p.job.spec
            total = (spec.num_ps, spec.num_workers)
            tried = [k for k in (_PS, _WORKER) if p.left[k] and p.shape(k) not in failed]
            if not tried:
                continue
            if room is None:
                room = np.array(snap.free, dtype=float)
            want = [total[k] - (0 if k in tried else p.left[k]) for k in (_PS, _WORKER)]
            self._binder.bind(snap.cluster, room, spec, p.bound, want[_WORKER], want[_PS], ties=self._ties)
            got = (sum(ps for _, ps in p.bound.values()), sum(w for w, _ in p.bound.values()))
            changed = False
            for k in tried:
                changed |= total[k] - got[k] < p.left[k]
                p.left[k] = total[k] - got[k]
                if p.left[k]:
                    failed.add(p.shape(k))
                else:
                    self._drop_need(p.shape(k))
            if not changed:
                continue
            p.held = Allocation.of(p.bound)
            if p.left[_PS] == 0 and p.left[_WORKER] == 0:
                plan.allocations[p.job.job_id] = p.held
                self._held.pop(p.job.job_id, None)
                started.append(idx)
            else:
                self._held[p.job.job_id] = p.held
        for idx in started:
            del self._waiting[idx]
        plan.held = dict(self._held)
        return plan


def kube_default(scored: tuple[str, ...] = ("cpu", "mem"), ties: str = "random") -> KubeDefault:
    """The default Kubernetes scheduler; `scored` are the resources its LeastAllocated score uses,
    `ties` how a tie between nodes is broken ("random", seeded, as kube-scheduler; or "lowest")."""
    return KubeDefault(scored=tuple(scored), ties=ties)
