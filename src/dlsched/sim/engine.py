"""The event-driven simulator.

Between events every running job advances at a constant rate, so completion times are computed,
not ticked; a reallocation bumps the job's version, which invalidates its old completion event.
Arrivals are read from a sorted list with a cursor; everything else goes through one heap.
The policy is asked once per distinct event time (all events at that time first).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Generator, Sequence

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import GPU, Cluster
from dlsched.core.errors import ConfigError, PlanError
from dlsched.core.job import JobSpec
from dlsched.core.plan import Plan
from dlsched.core.policy import Policy
from dlsched.core.snapshot import Clock, JobState, JobStatus, Snapshot
from dlsched.sim.config import SimConfig
from dlsched.sim.convergence import loss_curve
from dlsched.sim.feasibility import never_fits
from dlsched.sim.results import SimResult
from dlsched.sim.validation import check_capacity, check_shape
from dlsched.throughput.base import ThroughputModel

_COMPLETE = 0


@dataclass
class _Timeline:
    """Step functions sampled at every change: time, GPUs allocated, GPUs making progress, queue."""

    t: list[float] = field(default_factory=list)
    used_gpus: list[float] = field(default_factory=list)
    busy_gpus: list[float] = field(default_factory=list)
    held_gpus: list[float] = field(default_factory=list)
    queue: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)

    def record(self, t: float, used: float, busy: float, held: float, queue: int, running: int) -> None:
        if self.t and self.t[-1] == t:
            self.used_gpus[-1], self.busy_gpus[-1], self.held_gpus[-1] = used, busy, held
            self.queue[-1], self.running[-1] = queue, running
            return
        self.t.append(t)
        self.used_gpus.append(used)
        self.busy_gpus.append(busy)
        self.held_gpus.append(held)
        self.queue.append(queue)
        self.running.append(running)


class Simulator:
    """Runs one policy over one workload on one cluster."""

    def __init__(
        self,
        cluster: Cluster,
        throughput: ThroughputModel,
        policy: Policy,
        config: SimConfig | None = None,
        on_progress: Callable[[float, int], None] | None = None,
    ):
        self.cluster = cluster
        self.throughput = throughput
        self.policy = policy
        self.config = config or SimConfig()
        self.on_progress = on_progress

    # ------------------------------------------------------------------ run
    def run(self, jobs: Sequence[JobSpec]) -> SimResult:
        """Run the whole workload, asking `self.policy` whenever a decision is due."""
        steps = self.steps(jobs)
        try:
            snap = next(steps)
            while True:
                snap = steps.send(self.policy.schedule(snap))
        except StopIteration as done:
            return done.value

    def steps(self, jobs: Sequence[JobSpec]) -> Generator[Snapshot, Plan, SimResult]:
        """The run as a generator: it yields each Snapshot on which a decision is due and expects
        the Plan back through `send`; it returns the SimResult.

        `run` drives it with `self.policy.schedule`. A caller that must own the loop — a Gymnasium
        environment stepping an RL agent one action at a time — drives it itself. `self.policy`
        still sets the triggers (`on_events`, `interval`) and is reset before the run.
        """
        cfg = self.config
        ids = [j.job_id for j in jobs]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ConfigError(f"duplicate job id {dup!r} in the workload")
        for spec in jobs:  # fail before the run, not hours into it, on a job no model knows
            if not self.throughput.supports(spec):
                raise ConfigError(
                    f"job {spec.job_id!r}: throughput model {self.throughput.name!r} does not know model {spec.model!r}"
                )
        self.clock = Clock(0.0)
        self.states = [JobState(spec=s, index=i, clock=self.clock) for i, s in enumerate(jobs)]
        self.by_id = {s.job_id: s for s in self.states}
        self.order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_time, i))
        for rank, i in enumerate(self.order):
            self.states[i].rank = rank
        self.rng = np.random.default_rng(cfg.seed)
        self.used = np.zeros_like(self.cluster.capacity)
        self.running: dict[str, JobState] = {}
        self.pending: dict[str, JobState] = {}
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.timeline = _Timeline()
        self.busy_gpus = 0.0
        self.held_gpus = 0.0
        self.policy_calls = 0
        self.ended = 0  # jobs done or rejected so far (for progress bars)
        self.policy.reset(self.cluster, cfg.seed)
        policy_name = getattr(self.policy, "name", type(self.policy).__name__)

        interval = self.policy.interval
        if interval is not None and interval <= 0:
            raise ConfigError(f"policy {policy_name!r}: interval must be > 0")
        cursor = 0
        n = len(jobs)
        t0 = jobs[self.order[0]].submit_time if n else 0.0
        next_tick = t0 if interval else math.inf
        wake = math.inf
        idle_calls = 0
        end_reason = ""
        t = t0
        while True:
            if cursor >= n and not self.pending and not self.running:
                break
            t_arr = jobs[self.order[cursor]].submit_time if cursor < n else math.inf
            t_evt = self.heap[0][0] if self.heap else math.inf
            t = min(t_arr, t_evt, next_tick, wake)
            if t == math.inf:
                break
            if cfg.max_time is not None and t > cfg.max_time:
                end_reason = f"the run stopped at max_time={cfg.max_time:g} s"
                t = cfg.max_time
                break
            self.clock.now = t
            events: set[str] = set()
            while cursor < n and jobs[self.order[cursor]].submit_time <= t:
                self._arrive(self.states[self.order[cursor]], t)
                cursor += 1
                events.add("arrival")
            while self.heap and self.heap[0][0] <= t:
                _, _, kind, idx, version = heapq.heappop(self.heap)
                js = self.states[idx]
                if kind == _COMPLETE and version == js.version and js.status is JobStatus.RUNNING:
                    self._complete(js, t)
                    events.add("completion")
            if next_tick <= t:
                events.add("tick")
                next_tick = t0 + (math.floor((t - t0) / interval) + 1) * interval
                if next_tick <= t:  # (t - t0)/interval rounded just below a whole number
                    next_tick += interval
            if wake <= t:
                events.add("wake")
                wake = math.inf
            ask = bool(events & {"tick", "wake"}) or (
                self.policy.on_events and bool(events & {"arrival", "completion"})
            )
            started = False
            if ask and (self.pending or self.running):
                self.policy_calls += 1
                plan = yield self._snapshot(t, tuple(sorted(events)))
                if not isinstance(plan, Plan):
                    raise PlanError(f"policy {policy_name!r} returned {type(plan).__name__}, not a Plan")
                started = self._apply(plan, t, policy_name)
                if plan.wake_at is not None and plan.wake_at > t:
                    wake = plan.wake_at
                if self.on_progress is not None:
                    self.on_progress(t, self.ended)
            self._record(t)
            if self.running or started:
                idle_calls = 0
                continue
            # Nothing runs. With arrivals still to come, jump idle ticks to the next arrival.
            if cursor < n:
                if interval:
                    t_next = jobs[self.order[cursor]].submit_time
                    next_tick = max(next_tick, t0 + math.ceil((t_next - t0) / interval) * interval)
                continue
            # Nothing runs and nothing will arrive: only a timer of the policy can change anything.
            # Give it a bounded number of chances, then end instead of spinning forever.
            if self.pending:
                idle_calls += 1
                if (wake == math.inf and not interval) or idle_calls > 100:
                    end_reason = (
                        "nothing was running, no job was left to arrive, and the policy started "
                        "nothing more (jobs still waiting"
                        + (", some holding a partial placement: a gang deadlock)" if self.held_gpus else ")")
                    )
                    break
        never_arrived = [self.states[i] for i in self.order[cursor:]]
        return self._finish(t, end_reason, never_arrived)

    # ------------------------------------------------------------------ events
    def _arrive(self, js: JobState, t: float) -> None:
        js.last_update = t
        reason = never_fits(js.spec, self.cluster)
        if reason:
            js.status = JobStatus.REJECTED
            js.reason = reason
            js.end_time = t
            self.ended += 1
            return
        js.status = JobStatus.PENDING
        js.loss_fn = loss_curve(js.job_id, js.spec.iterations, self.config.seed, self.config.loss_noise)
        self.pending[js.job_id] = js

    def _complete(self, js: JobState, t: float) -> None:
        js.settle(t)
        js._progress = js.spec.iterations
        self._release(js)
        js.status = JobStatus.DONE
        js.end_time = t
        self.ended += 1
        js.last_stop = t
        del self.running[js.job_id]

    def _snapshot(self, t: float, events: tuple[str, ...]) -> Snapshot:
        free = self.cluster.capacity - self.used
        free.setflags(write=False)
        snap = Snapshot(
            now=t,
            cluster=self.cluster,
            free=free,
            pending=list(self.pending.values()),
            running=list(self.running.values()),
            restart_overhead=self.config.restart_overhead,
            oracle=self.throughput if self.policy.oracle else None,
            rng=self.rng,
            events=events,
        )
        return snap

    # ------------------------------------------------------------------ applying a plan
    def _usage(self, js: JobState, alloc: Allocation) -> tuple[list[int], np.ndarray]:
        s = js.spec
        return list(alloc.nodes), alloc.usage(np.asarray(s.worker_demand), np.asarray(s.ps_demand))

    def _release(self, js: JobState) -> None:
        if js.allocation is not None:
            nodes, use = self._usage(js, js.allocation)
            np.subtract.at(self.used, nodes, use)
            self.busy_gpus -= js.alloc_gpus
            js.allocation = None
            js.alloc_gpus = 0.0
            js.alloc_nodes = 0
            js.rate = 0.0
            js.version += 1
        if js.held is not None:
            nodes, use = self._usage(js, js.held)
            np.subtract.at(self.used, nodes, use)
            self.held_gpus -= js.held_gpus
            js.held = None
            js.held_gpus = 0.0

    def _apply(self, plan: Plan, t: float, policy: str) -> bool:
        """Validate the whole plan, then apply it. Returns whether any job started or resized."""
        starts: list[tuple[JobState, Allocation]] = []
        running = self.running
        for jid, alloc in plan.allocations.items():
            js = running.get(jid)
            if js is not None and js.allocation is alloc:  # unchanged: the common case
                continue
            js = self.by_id.get(jid)
            if js is None:
                raise PlanError(f"policy {policy!r} at t={t:.1f}: unknown job {jid!r}")
            if js.status is JobStatus.RUNNING:
                if js.allocation is alloc or js.allocation == alloc:
                    continue
            elif js.status is not JobStatus.PENDING:
                raise PlanError(f"policy {policy!r} at t={t:.1f}: job {jid!r} is {js.status.value}, it cannot run")
            check_shape(policy, t, js.spec, alloc, self.cluster)
            starts.append((js, alloc))
        stops = [js for jid, js in self.running.items() if jid not in plan.allocations]
        held_changes: list[tuple[JobState, Allocation | None]] = []
        for jid, alloc in plan.held.items():
            js = self.by_id.get(jid)
            if js is None or js.status is not JobStatus.PENDING or jid in plan.allocations:
                raise PlanError(f"policy {policy!r} at t={t:.1f}: held job {jid!r} must be pending and not running")
            if js.held != alloc:
                check_shape(policy, t, js.spec, alloc, self.cluster, gang=False)
                held_changes.append((js, alloc))
        for js in self.pending.values():
            if js.held is not None and js.job_id not in plan.held and js.job_id not in plan.allocations:
                held_changes.append((js, None))
        for jid in plan.rejected:
            js = self.by_id.get(jid)
            if js is None or js.status is not JobStatus.PENDING or jid in plan.allocations:
                raise PlanError(f"policy {policy!r} at t={t:.1f}: only a waiting job can be rejected, not {jid!r}")

        # capacity, on the nodes the plan touches
        new_used = self.used.copy()
        touched: list[int] = []
        for js, alloc in starts:
            for old in (js.allocation, js.held):
                if old is not None:
                    nodes, use = self._usage(js, old)
                    np.subtract.at(new_used, nodes, use)
            nodes, use = self._usage(js, alloc)
            np.add.at(new_used, nodes, use)
            touched += nodes
        for js in stops:
            nodes, use = self._usage(js, js.allocation)
            np.subtract.at(new_used, nodes, use)
        for js, alloc in held_changes:
            if js.held is not None:
                nodes, use = self._usage(js, js.held)
                np.subtract.at(new_used, nodes, use)
            if alloc is not None:
                nodes, use = self._usage(js, alloc)
                np.add.at(new_used, nodes, use)
                touched += nodes
        if touched:
            check_capacity(policy, t, self.cluster, new_used, np.unique(touched), self._holders_after(plan))

        # apply
        for js in stops:
            js.settle(t)
            self._release(js)
            js.status = JobStatus.PENDING
            js.last_stop = t
            js.preemptions += 1
            del self.running[js.job_id]
            self.pending[js.job_id] = js
        for js, alloc in held_changes:
            js.settle(t)
            if js.held is not None:
                nodes, use = self._usage(js, js.held)
                np.subtract.at(self.used, nodes, use)
                self.held_gpus -= js.held_gpus
            js.held = alloc
            js.held_gpus = 0.0
            if alloc is not None:
                nodes, use = self._usage(js, alloc)
                np.add.at(self.used, nodes, use)
                js.held_gpus = alloc.num_workers * js.spec.worker_demand[GPU]
                self.held_gpus += js.held_gpus
        for js, alloc in starts:
            self._start(js, alloc, t)
        for jid, reason in plan.rejected.items():
            js = self.by_id[jid]
            js.settle(t)
            self._release(js)
            js.status = JobStatus.REJECTED
            js.reason = reason or "rejected by the policy"
            js.end_time = t
            self.ended += 1
            del self.pending[jid]
        return bool(starts)

    def _holders_after(self, plan: Plan):
        def holders(node: int) -> list[str]:
            out = [jid for jid, a in plan.allocations.items() if node in a.nodes]
            return out + [f"{jid} (held)" for jid, a in plan.held.items() if node in a.nodes]
        return holders

    def _start(self, js: JobState, alloc: Allocation, t: float) -> None:
        js.settle(t)
        was_running = js.status is JobStatus.RUNNING
        self._release(js)
        if not was_running:
            del self.pending[js.job_id]
            self.running[js.job_id] = js
        js.status = JobStatus.RUNNING
        js.allocation = alloc
        js.alloc_gpus = alloc.num_workers * js.spec.worker_demand[GPU]
        js.alloc_nodes = alloc.num_nodes
        self.busy_gpus += js.alloc_gpus
        nodes, use = self._usage(js, alloc)
        np.add.at(self.used, nodes, use)
        cfg = self.config
        if js.first_start is None:
            js.first_start = t
            pause = cfg.startup_overhead
        else:
            js.restarts += 1
            pause = cfg.restart_overhead
        js.last_start = t
        js.resume_at = t + pause
        rate = self.throughput.rate(js.spec, alloc, self.cluster)
        if rate > 0:
            rate *= float(self.cluster.speed[list(alloc.nodes)].min())
        js.rate = rate
        js.observed_rates[(alloc.num_nodes, alloc.num_workers, alloc.num_ps)] = rate
        js.version += 1
        if rate > 0:
            done_at = js.resume_at + (js.spec.iterations - js._progress) / rate
            self.seq += 1
            heapq.heappush(self.heap, (done_at, self.seq, _COMPLETE, js.index, js.version))

    def _record(self, t: float) -> None:
        self.timeline.record(
            t, self.busy_gpus + self.held_gpus, self.busy_gpus, self.held_gpus, len(self.pending), len(self.running)
        )

    # ------------------------------------------------------------------ end
    def _finish(self, t: float, reason: str, never_arrived: list[JobState]) -> SimResult:
        self.clock.now = t
        for js in list(self.running.values()) + list(self.pending.values()):
            js.settle(t)
            was = js.status
            js.status = JobStatus.UNFINISHED
            js.reason = reason or "the run ended first"
            if was is JobStatus.PENDING and not reason:
                js.reason = "still waiting when the run ended"
            elif was is JobStatus.RUNNING and js.rate <= 0:
                js.reason = "its allocation makes no progress (the throughput model gives 0 iterations/s there)"
        for js in never_arrived:
            js.status = JobStatus.UNFINISHED
            js.reason = reason or "not submitted before the run ended"
        self._record(t)
        return SimResult.build(
            policy=self.policy.name,
            cluster=self.cluster,
            states=self.states,
            timeline=self.timeline,
            end_time=t,
            policy_calls=self.policy_calls,
            config=self.config,
        )


def simulate(
    jobs: Sequence[JobSpec],
    cluster: Cluster,
    policy: Policy,
    throughput: ThroughputModel,
    config: SimConfig | None = None,
    on_progress: Callable[[float, int], None] | None = None,
) -> SimResult:
    """Run `policy` over `jobs` on `cluster` and return the per-job table, timelines and summary."""
    return Simulator(cluster, throughput, policy, config, on_progress).run(jobs)
