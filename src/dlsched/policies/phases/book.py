"""`Book`: a `PhasedPolicy`'s waiting line and running plan, kept up by the snapshot's deltas,
and its lazy ranking of running jobs for minimal preemption (`victims`, rigid SRTF's hot path).

Kept across calls and changed only by what happened, so a call costs what changed, not the
number of jobs in the system.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from operator import attrgetter
from typing import Any, Callable, Iterable, Iterator

from dlsched.core.allocation import Allocation
from dlsched.core.snapshot import JobState, JobStatus, Snapshot
from dlsched.policies.phases.queues import Line

_VERSION = attrgetter("version")


class Book:
    """What runs as of the policy's own last plan, and who waits in a `Line`: kept up by the
    snapshot's deltas (arrived and stopped join the line, started leave it, finished leave both),
    so a call need not rebuild or re-sort either. `key(job)` and `gpus(job)` must not change
    while a job waits (both are given the snapshot and the job). It rebuilds from the snapshot on
    the first call and whenever the counts disagree with it (a snapshot it did not follow, e.g. a
    live controller's restart).

    Running jobs are ranked lazily (`victims`) from upper bounds of their keys, for keys that
    never grow while a job runs. A plain bound is the job's key when it was last keyed: it goes
    stale as the key falls, so a scan keys every job whose old key is above the true top. With
    `clock_bound` (an ordering whose key is a tuple led by a time that falls at least as fast as
    the clock while a job runs unchanged: a remaining time at no less than the rate it is keyed
    at), a bound follows the clock instead: `clock_bound(snap, job, key)` is a c with
    key[0] < c - t at every later t, so one sorted list of c orders the bounds of all such jobs
    at every call, each just above its key, and a scan stops next to the true keys. Such a bound
    holds only while the job keeps the rate it had (`JobState.version` unchanged): a job re-rated
    since (a node's speed changed) is bounded afresh."""

    def __init__(self, key: Callable[[Snapshot, JobState], Any], gpus: Callable[[Snapshot, JobState], float],
                 clock_bound: Callable[[Snapshot, JobState, Any], float | None] | None = None):
        self.key, self.gpus, self.clock_bound = key, gpus, clock_bound
        self.running: dict[str, Allocation] = {}
        self.line = Line()
        self._fresh = True
        # (bound, seq, job id, job) of every running job, sorted: plain bounds (keys) and clocked
        # ones (floats c, the key's first element being below c - now). A job's entry leaves when
        # it stops, finishes or is bounded again; one preempted by the plan being made is skipped.
        self._bounds: list[tuple[Any, int, str, JobState]] = []
        self._clocked: list[tuple[float, int, str, JobState]] = []
        self._bound_of: dict[str, tuple[Any, int, bool]] = {}  # job id -> (bound, seq, clocked)
        # Clocked jobs and their versions when bounded, and the sum of those: versions only grow,
        # so the sum of the jobs' versions now equals it exactly when none was re-rated since (one
        # pass in C per call instead of a Python loop over the running jobs).
        self._clocked_jobs: dict[str, JobState] = {}
        self._version: dict[str, int] = {}
        self._version_sum = 0
        self._seq = 0
        self._keyed_at: Snapshot | None = None
        self._keys_now: dict[str, tuple[Any, JobState]] = {}  # keyed during the current call
        self._unbounded: list[JobState] = []

    def follow(self, snap: Snapshot) -> bool:
        """Apply the deltas; True if it had to rebuild from the snapshot instead."""
        if not self._fresh:
            for job in (*snap.arrived, *snap.stopped):
                self.running.pop(job.job_id, None)
                self._unbound(job.job_id)
                if job.job_id not in self.line and job.status is JobStatus.PENDING:
                    self.line.add(job, self.key(snap, job), self.gpus(snap, job))
            for job in snap.finished:
                self.running.pop(job.job_id, None)
                self._unbound(job.job_id)
                self.line.remove(job.job_id)
        if not (self._fresh or snap.num_running != len(self.running) or snap.num_pending != len(self.line)):
            return False
        self.running = {j.job_id: j.allocation for j in snap.running}
        self._bounds, self._clocked, self._bound_of = [], [], {}
        self._clocked_jobs, self._version, self._version_sum = {}, {}, 0
        self._unbounded = list(snap.running)
        self.line = Line()
        for job in snap.pending:
            self.line.add(job, self.key(snap, job), self.gpus(snap, job))
        self._fresh = False
        return True

    def record(self, allocations: dict[str, Allocation], started: Iterable[JobState]) -> None:
        """The plan just returned: its jobs run, and those it started leave the line."""
        for job in started:
            self.line.remove(job.job_id)
            self._unbounded.append(job)
        self.running = allocations
        if len(self._unbounded) > 2 * len(allocations) + 64:  # a policy that never asks for victims
            # (fifo) would keep every job it ever started; ended ones can never be keyed again
            self._unbounded = [j for j in self._unbounded if j.status in (JobStatus.PENDING, JobStatus.RUNNING)]

    def victims(self, snap: Snapshot, k: Any) -> Iterator[tuple[Any, JobState]]:
        """Running jobs whose key now is greater than `k`, highest first (lowest priority first),
        lazily: a job is keyed only when its bound (plain, or clocked: (c - now, inf), above
        every key led by c - now or less) exceeds both `k` and every key already found. The
        order handed out is the keys' exact order whatever the bounds. Must not outlive the call
        (the plan being made) it was made for."""
        self._refresh(snap)
        plain, clocked, running, keys_now = self._bounds, self._clocked, self.running, self._keys_now
        now, inf = snap.now, math.inf
        k0 = k[0] if clocked else None
        found: list[tuple[Any, str, JobState]] = []  # keys now > k, ascending
        i, lo, j = len(plain) - 1, bisect_left(plain, (k,)), len(clocked) - 1
        while True:
            c = clocked[j] if j >= 0 and clocked[j][0] - now >= k0 else None  # type: ignore[operator]
            if c is not None and (i < lo or (c[0] - now, inf) > plain[i][0]):
                b, item = (c[0] - now, inf), c
                j -= 1
            elif i >= lo:
                item = plain[i]
                b = item[0]
                i -= 1
            else:
                break
            while found and found[-1][0] > b:  # greater than every key not looked at yet
                x, _, v = found.pop()
                yield x, v
            jid, job = item[2], item[3]
            if jid not in running:
                continue  # preempted by this plan
            got = keys_now.get(jid)
            if got is None:
                got = keys_now[jid] = (self.key(snap, job), job)
            if got[0] > k:
                insort(found, (got[0], jid, job))
        while found:
            x, _, v = found.pop()
            yield x, v

    def _refresh(self, snap: Snapshot) -> None:
        """Once per call: lower the plain bounds of jobs keyed in the previous call to those keys
        (still upper bounds: keys only shrink), and bound the jobs started since and the clocked
        jobs re-rated since."""
        if self._keyed_at is snap:
            return
        running, bound_of, version, clocked = self.running, self._bound_of, self._version, self._clocked_jobs
        fresh = {j.job_id: j for j in self._unbounded}  # started since: keyed once
        for jid, (x, job) in self._keys_now.items():
            b = bound_of.get(jid)
            if jid in running and b is not None and not b[2] and jid not in fresh and x < b[0]:
                self._bound(jid, job, x, None)
        self._keyed_at, self._keys_now, self._unbounded = snap, {}, []
        if sum(map(_VERSION, clocked.values())) != self._version_sum:
            fresh.update((jid, job) for jid, job in clocked.items() if job.version != version[jid])
        for jid, job in fresh.items():
            if jid in running:
                x = self.key(snap, job)
                self._keys_now[jid] = (x, job)
                self._bound(jid, job, x, None if self.clock_bound is None else self.clock_bound(snap, job, x))
            else:
                self._unbound(jid)

    def _bound(self, jid: str, job: JobState, x: Any, c: float | None) -> None:
        """Give a running job the bound `x` (its key now), or the clocked bound `c` if any."""
        self._unbound(jid)
        self._seq += 1
        if c is None:
            self._bound_of[jid] = (x, self._seq, False)
            insort(self._bounds, (x, self._seq, jid, job))
        else:
            self._clocked_jobs[jid], self._version[jid] = job, job.version
            self._version_sum += job.version
            self._bound_of[jid] = (c, self._seq, True)
            insort(self._clocked, (c, self._seq, jid, job))

    def _unbound(self, jid: str) -> None:
        """The job's bound leaves (it stopped, finished, or is bounded again)."""
        b = self._bound_of.pop(jid, None)
        if b is not None:
            bounds = self._clocked if b[2] else self._bounds
            del bounds[bisect_left(bounds, b[:2])]
            if b[2]:
                del self._clocked_jobs[jid]
                self._version_sum -= self._version.pop(jid)
