"""The simulator: a thin driver of the one scheduling core on a virtual clock.

next event → `ClusterState` → snapshot → policy → diff → apply the Actions with the throughput
model. Between events every running job advances at a constant rate, so completion times are
computed, not ticked; a reallocation bumps the job's version, which invalidates its old completion
event. Arrivals and node events are read from sorted lists with cursors; completions go through a
heap. The policy is asked once per distinct event time (all events at that time first), on the
triggers it declares (`framework.triggers`).

Node events model a changing cluster: a node's speed factor changing (a straggler appears or
goes away: every job on it runs at its slowest node's speed), a node failing (its jobs' runs fail
and wait again) or joining.
"""

from __future__ import annotations

import gc
import heapq
import math
from typing import Callable, Generator, Sequence

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.events import NodeEvent  # noqa: F401  (the simulator's node events; re-exported)
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.core.plan import Plan
from dlsched.core.policy import Policy
from dlsched.core.snapshot import Clock, JobState, JobStatus, Snapshot
from dlsched.framework.actions import Kind
from dlsched.framework.state import ClusterState
from dlsched.framework.triggers import Triggers
from dlsched.sim.config import SimConfig
from dlsched.sim.convergence import loss_curve
from dlsched.sim.results import JobTable, SimResult, Timeline
from dlsched.throughput.base import ThroughputModel
from dlsched.throughput.trace_files import unserved_hint


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

    def run(self, jobs: Sequence[JobSpec], node_events: Sequence[NodeEvent] = ()) -> SimResult:
        """Run the whole workload, asking `self.policy` whenever a decision is due."""
        steps = self.steps(jobs, node_events)
        try:
            snap = next(steps)
            while True:
                snap = steps.send(self.policy.schedule(snap))
        except StopIteration as done:
            return done.value

    def steps(self, jobs: Sequence[JobSpec], node_events: Sequence[NodeEvent] = ()
              ) -> Generator[Snapshot, Plan, SimResult]:
        """The run as a generator: it yields each Snapshot on which a decision is due and expects
        the Plan back through `send`; it returns the SimResult.

        `run` drives it with `self.policy.schedule`. A caller that must own the loop — a Gymnasium
        environment stepping an RL agent one action at a time — drives it itself. `self.policy`
        still sets the triggers (`on_events`, `interval`) and is reset before the run.
        """
        arrivals = self._setup(jobs, node_events)
        # The job specs and the trace live for the whole run: the collector need not scan them
        # again on every full collection (on 40k Philly jobs under fifo that scanning was ~7%
        # of the run). Skipped when someone else froze objects already; undone when the run ends.
        froze = gc.get_freeze_count() == 0
        if froze:
            gc.freeze()
        try:
            return (yield from self._loop(arrivals))
        finally:
            if froze:
                gc.unfreeze()

    def _loop(self, arrivals: list[int]) -> Generator[Snapshot, Plan, SimResult]:
        state, trig, cfg, name = self.state, self.triggers, self.config, self.policy.name
        n, idle_calls, end_reason, t = len(arrivals), 0, "", trig.t0
        arrival_at, node_event_at, heap = self._arrival_at, self._node_event_at, self.heap
        while self._cursor < n or state.pending or state.running:
            nxt = min(arrival_at[self._cursor], heap[0][0] if heap else math.inf,
                      node_event_at[self._node_cursor], trig.next_time())
            if nxt == math.inf:  # nothing will ever happen again: the run ends now, not at infinity
                break
            t = nxt
            if cfg.max_time is not None and t > cfg.max_time:
                end_reason, t = f"the run stopped at max_time={cfg.max_time:g} s", cfg.max_time
                break
            self.clock.now = t
            reasons = trig.due(t, self._events_at(t, arrivals))
            started = False
            if reasons and (state.pending or state.running):
                self.policy_calls += 1
                plan = yield state.snapshot(t, reasons, cfg.restart_overhead,
                                            oracle=self.throughput if self.policy.oracle else None, rng=self.rng,
                                            profile=self.throughput)
                started = self._apply(plan, t, name)
                trig.wake_at(plan.wake_at, t)
                if self.on_progress is not None:
                    self.on_progress(t, state.ended)
            self._record(t)
            if state.running or started:
                idle_calls = 0
            elif self._cursor < n:
                # nothing runs: jump idle ticks to the next arrival, unless jobs wait for a policy
                # asked only on its grid (DL2's slots): their next tick is when they can start
                if trig.on_events or not state.pending:
                    trig.skip_to(arrival_at[self._cursor])
            elif state.pending:  # nothing runs or will arrive: only a policy timer can help, a few times
                idle_calls += 1
                if (trig.wake == math.inf and not trig.interval) or idle_calls > 100:
                    end_reason = ("nothing was running, no job was left to arrive, and the policy started "
                                  "nothing more (jobs still waiting"
                                  + (", some holding a partial placement: a gang deadlock)" if state.holding else ")"))
                    break
        return self._finish(t, end_reason, arrivals[self._cursor:])

    # ------------------------------------------------------------------ setup and events
    def _setup(self, jobs: Sequence[JobSpec], node_events: Sequence[NodeEvent]) -> list[int]:
        """Check the inputs and reset; return the jobs' indices in arrival order."""
        ids = [j.job_id for j in jobs]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ConfigError(f"duplicate job id {dup!r} in the workload")
        for spec in jobs:  # fail before the run, not hours into it, on a job no model knows
            if not self.throughput.supports(spec):
                raise ConfigError(
                    f"job {spec.job_id!r}: throughput model {self.throughput.name!r} does not know model {spec.model!r}"
                    + unserved_hint(spec.model)
                )
        for ev in node_events:
            if not 0 <= ev.node < self.cluster.num_nodes or ev.kind not in ("speed", "fail", "join") or (
                    ev.kind == "speed" and not (ev.speed or 0) > 0):
                raise ConfigError(f"bad node event {ev}: node 0..{self.cluster.num_nodes - 1}, "
                                  "kind speed (with a speed > 0), fail or join")
        cfg = self.config
        self.clock = Clock(0.0)
        # JobStates only of jobs in the system, by index: an ended job's row goes to the table and
        # its JobState is let go, so memory follows the jobs in the system, not the whole trace
        self.jobs, self.live, self.table = jobs, {}, JobTable(self.throughput)
        self._leaf: list[ThroughputModel | None] = [None] * len(jobs)  # per job index, set at its first run
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_time, i))
        self.state = ClusterState(self.cluster, self.clock, cfg.startup_overhead, cfg.restart_overhead)
        self.speed = self.cluster.speed.astype(float).tolist()  # true speed factors, changed by node events
        self.node_events = sorted(node_events, key=lambda e: e.time)
        self._node_cursor = 0
        self._cursor = 0
        # the times of what comes next, each list ending in inf: the loop reads the next one without
        # a bounds check or an attribute walk per decision
        self._arrival_at = [jobs[i].submit_time for i in order] + [math.inf]
        self._node_event_at = [e.time for e in self.node_events] + [math.inf]
        self.rng = np.random.default_rng(cfg.seed)
        self.heap: list[tuple[float, int, int, int]] = []  # (completion time, seq, job index, version)
        self.seq = 0
        self.timeline = Timeline()
        self.policy_calls = 0
        self.policy.reset(self.cluster, cfg.seed)
        t0 = jobs[order[0]].submit_time if jobs else 0.0
        self.triggers = Triggers(self.policy.on_events, self.policy.interval, t0, self.policy.name)
        return order

    def _events_at(self, t: float, arrivals: list[int]) -> set[str]:
        """Carry out everything that happens at `t`; return the kinds of what happened."""
        happened: set[str] = set()
        state, arrival_at = self.state, self._arrival_at
        if arrival_at[self._cursor] <= t:
            cfg, i, live = self.config, self._cursor, self.live
            while arrival_at[i] <= t:
                js = self._state_of(arrivals[i], i)
                live[js.index] = js
                if state.arrive(js, t):
                    self._ended(js)
                else:
                    js.loss_fn = loss_curve(js.job_id, js.spec.iterations, cfg.seed, cfg.loss_noise)
                i += 1
            self._cursor = i
            happened.add("arrival")
        heap, live = self.heap, self.live
        while heap and heap[0][0] <= t:
            _, _, idx, version = heapq.heappop(heap)
            js = live.get(idx)
            if js is not None and version == js.version and js.status is JobStatus.RUNNING:
                state.end(js, t, JobStatus.DONE)
                self._ended(js)
                happened.add("completion")
        while self._node_event_at[self._node_cursor] <= t:
            ev = self.node_events[self._node_cursor]
            self._node_cursor += 1
            happened.add(self._node_event(ev, t))
        return happened

    def _state_of(self, index: int, rank: int) -> JobState:
        return JobState(spec=self.jobs[index], index=index, clock=self.clock, rank=rank)

    def _ended(self, js: JobState) -> None:
        """A job ended for good: its row is final, so it goes to the table and its JobState goes
        (the core forgets it too, as the live controller does with ended jobs)."""
        self.table.add(js)
        del self.live[js.index]
        self.state.jobs.pop(js.job_id, None)

    def _node_event(self, ev: NodeEvent, t: float) -> str:
        state = self.state
        if ev.kind == "fail":
            for js in state.fail_node(ev.node, t):
                js.reason = f"its node {self.cluster.node_names[ev.node]} failed at t={t:.0f}"
            return "failure"
        if ev.kind == "join":
            state.join_node(ev.node)
            return "node"
        self.speed[ev.node] = float(ev.speed)
        for js in state.on_node(ev.node):
            if js.status is JobStatus.RUNNING:
                js.settle(t)
                self._run(js, js.allocation)
        return "speed"

    # ------------------------------------------------------------------ applying a plan
    def _apply(self, plan: Plan, t: float, policy: str) -> bool:
        """Validate the whole plan, then carry it out. Returns whether any job started or resized."""
        state = self.state
        started = False
        for a in state.diff(plan, t, policy):
            js = state.apply(a, t)
            if a.kind is Kind.START or a.kind is Kind.RESIZE:
                self._run(js, a.allocation)
                started = True
            elif a.kind is Kind.REJECT:
                self._ended(js)
        return started

    def _run(self, js: JobState, alloc: Allocation) -> None:
        """Give a running job its true rate on `alloc` and schedule its completion."""
        leaf = self._leaf[js.index]
        if leaf is None:  # the model that serves this job, resolved once (ThroughputModel.leaf_for)
            leaf = self._leaf[js.index] = self.throughput.leaf_for(js.spec)
        rate = leaf.rate(js.spec, alloc, self.cluster)
        nodes, speed = alloc.nodes, self.speed
        if rate > 0:
            rate *= speed[nodes[0]] if len(nodes) == 1 else min([speed[n] for n in nodes])  # its slowest node
        js.node_speeds = {n: speed[n] for n in nodes}  # what its workers' step times show
        js.rate = rate
        js.observed_rates[(len(alloc.nodes), alloc.num_workers, alloc.num_ps)] = rate
        js.version += 1
        if rate > 0:  # the job was settled at now: its progress is the settled value
            done_at = max(js.resume_at, js.last_update) + (js.spec.iterations - js.reported_progress) / rate
            self.seq += 1
            heapq.heappush(self.heap, (done_at, self.seq, js.index, js.version))

    def _record(self, t: float) -> None:
        s = self.state
        self.timeline.record(t, s.busy_gpus + s.held_gpus, s.busy_gpus, s.held_gpus, len(s.pending), len(s.running))

    # ------------------------------------------------------------------ end
    def _finish(self, t: float, reason: str, never_arrived: list[int]) -> SimResult:
        self.clock.now = t
        for js in list(self.state.running.values()) + list(self.state.pending.values()):
            was = js.status
            js.settle(t)
            js.status = JobStatus.UNFINISHED
            js.reason = reason or "the run ended first"
            if was is JobStatus.PENDING and not reason:
                js.reason = "still waiting when the run ended"
            elif was is JobStatus.RUNNING and js.rate <= 0:
                js.reason = "its allocation makes no progress (the throughput model gives 0 iterations/s there)"
            self.table.add(js)
        for rank, i in enumerate(never_arrived, start=self._cursor):
            js = self._state_of(i, rank)
            js.status = JobStatus.UNFINISHED
            js.reason = reason or "not submitted before the run ended"
            self.table.add(js)
        self._record(t)
        return SimResult.build(
            policy=self.policy.name,
            cluster=self.cluster,
            states=self.table,
            timeline=self.timeline,
            end_time=t,
            policy_calls=self.policy_calls,
            config=self.config,
            throughput=self.throughput,
            oracle=bool(self.policy.oracle),
        )


def simulate(
    jobs: Sequence[JobSpec],
    cluster: Cluster,
    policy: Policy,
    throughput: ThroughputModel,
    config: SimConfig | None = None,
    on_progress: Callable[[float, int], None] | None = None,
    node_events: Sequence[NodeEvent] = (),
) -> SimResult:
    """Run `policy` over `jobs` on `cluster` and return the per-job table, timelines and summary."""
    return Simulator(cluster, throughput, policy, config, on_progress).run(jobs, node_events)
