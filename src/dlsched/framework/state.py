"""ClusterState: the one job lifecycle and the one accounting of used and held resources.

Both drivers keep their jobs here — the simulator (virtual clock, throughput model) and the live
controller (wall clock, backend) — so a job is admitted, started, resized, preempted, held,
finished and rejected by the same code in both. A decision is: `snapshot` → policy → `diff`
(which validates the whole plan before anything changes) → the driver carries out the Actions,
calling `start`/`stop`/`hold`/`end` here as it does. Each of them settles the job first, which
folds what accrued since its last change — progress, service, and the time it waited
(`JobState.waited`, every wait, not only the first) — so no accounting needs per-tick work.

Jobs live in insertion-ordered dicts (`pending`, `running`, `holding`) updated as jobs move, so a
decision never rebuilds them; the snapshot also carries what changed since the previous one
(arrived, finished, stopped) for policies that work incrementally. `JobState`s are the engine's
own objects (no copies per decision): only this class and the drivers through it mutate them.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import GPU, Cluster
from dlsched.core.errors import PlanError
from dlsched.core.job import JobSpec
from dlsched.core.plan import Plan
from dlsched.core.snapshot import Clock, JobState, JobStatus, Snapshot
from dlsched.framework.actions import Action, Kind
from dlsched.framework.feasibility import never_fits
from dlsched.framework.packing import add_use
from dlsched.framework.validation import check_capacity, check_shape


class ClusterState:
    """Jobs by status, resources used and held, nodes up or down."""

    def __init__(self, cluster: Cluster, clock: Clock | None = None,
                 startup_overhead: float = 0.0, restart_overhead: float = 0.0):
        self.cluster = cluster
        self.clock = clock or Clock(0.0)
        self.startup_overhead = startup_overhead  # pause before the first step (simulator only;
        self.restart_overhead = restart_overhead  # live, the measured pause is in the progress)
        self.capacity = cluster.capacity.copy()  # a node that failed has 0 until it joins again
        self.foreign: np.ndarray | None = None  # what others use on each node (`use_elsewhere`)
        self.down: set[int] = set()  # nodes failed and not joined again
        self.used = np.zeros_like(cluster.capacity)
        # capacity - used, kept row by row as jobs move (a decision must not pay O(nodes) for it);
        # policies see it read-only through the snapshot, valid until the plan is carried out
        self.free = self.capacity - self.used
        self._free_view = self.free.view()
        self._free_view.setflags(write=False)
        self.jobs: dict[str, JobState] = {}
        self.pending: dict[str, JobState] = {}
        self.running: dict[str, JobState] = {}
        self.holding: dict[str, JobState] = {}  # pending jobs sitting on a partial placement
        self.busy_gpus = 0.0
        self.held_gpus = 0.0
        self.ended = 0  # jobs that reached a terminal state
        # running job -> the count of runs begun when its run began: `running`'s order as numbers,
        # kept beside `running` (the one place preemptions are ordered)
        self._run_seq: dict[str, int] = {}
        self._runs = 0
        self._arrived: list[JobState] = []
        self._finished: list[JobState] = []
        self._stopped: list[JobState] = []

    # ------------------------------------------------------------------ lifecycle
    def arrive(self, js: JobState, now: float) -> str:
        """A job is submitted. Rejected at once (returns the reason) when it can never fit the
        cluster, else it waits for the policy (returns "")."""
        self.jobs[js.job_id] = js
        js.last_update = now
        reason = never_fits(js.spec, self.cluster)
        if reason:
            js.status = JobStatus.PENDING
            self.end(js, now, JobStatus.REJECTED, reason)
            return reason
        js.status = JobStatus.PENDING
        self.pending[js.job_id] = js
        self._arrived.append(js)
        return ""

    def start(self, js: JobState, alloc: Allocation, now: float, count_restart: bool = True) -> None:
        """Run the job on `alloc` (a start, a restart or a resize). `count_restart=False` re-attaches
        to a run that survived a restart of the live service."""
        js.settle(now)
        was_running = js.status is JobStatus.RUNNING
        self._release(js)
        if not was_running:
            del self.pending[js.job_id]
            self.running[js.job_id] = js
            self._runs += 1
            self._run_seq[js.job_id] = self._runs
        js.status = JobStatus.RUNNING
        js.allocation = alloc
        js.alloc_gpus = alloc.num_workers * js.spec.worker_demand[GPU]
        js.alloc_nodes = alloc.num_nodes
        if (price := self.cluster.price) is not None:
            gw, gp = js.spec.worker_demand[GPU], js.spec.ps_demand[GPU]
            js.fee_rate = sum((w * gw + p * gp) * price[n] for n, w, p in zip(alloc.nodes, alloc.workers, alloc.ps)) / 3600.0
        self.busy_gpus += js.alloc_gpus
        self._use(js.spec, alloc, 1.0)
        if js.first_start is None:
            js.first_start = now
            pause = self.startup_overhead
        else:
            if count_restart:
                js.restarts += 1
            pause = self.restart_overhead
        js.last_start = now
        js.resume_at = now + pause
        js.rate = 0.0
        js.version += 1

    def stop(self, js: JobState, now: float, preempted: bool = True) -> None:
        """A running job goes back to waiting: preempted by a plan, or its run failed."""
        js.settle(now)
        self._release(js)
        js.status = JobStatus.PENDING
        js.last_stop = now
        if preempted:
            js.preemptions += 1
        del self.running[js.job_id]
        del self._run_seq[js.job_id]
        self.pending[js.job_id] = js
        self._stopped.append(js)

    def park(self, js: JobState) -> None:
        """Take a waiting job out of the policy's view until `unpark` (the live controller's retry
        backoff after a failed run): it stays in `jobs`, holds nothing and no plan may place it."""
        self._drop_hold(js)
        del self.pending[js.job_id]
        self._stopped = [j for j in self._stopped if j is not js]

    def unpark(self, js: JobState) -> None:
        """A parked job waits for the policy again (it shows as stopped, like a failed run)."""
        self.pending[js.job_id] = js
        self._stopped.append(js)

    def hold(self, js: JobState, alloc: Allocation | None, now: float) -> None:
        """Reserve a partial placement for a waiting job (nothing runs on it), or release it."""
        js.settle(now)
        self._drop_hold(js)
        js.held = alloc
        if alloc is not None:
            self._use(js.spec, alloc, 1.0)
            js.held_gpus = alloc.num_workers * js.spec.worker_demand[GPU]
            self.held_gpus += js.held_gpus
            self.holding[js.job_id] = js

    def end(self, js: JobState, now: float, status: JobStatus, reason: str = "") -> None:
        """A terminal state: DONE (all its work), REJECTED, or UNFINISHED (failed, cancelled)."""
        js.settle(now)
        if status is JobStatus.DONE:
            js.finish_work()
        self._release(js)
        self.running.pop(js.job_id, None)
        self._run_seq.pop(js.job_id, None)
        self.pending.pop(js.job_id, None)
        js.status = status
        js.reason = reason
        js.end_time = now
        js.last_stop = now
        self.ended += 1
        self._finished.append(js)

    def _release(self, js: JobState) -> None:
        if js.allocation is not None:
            self._use(js.spec, js.allocation, -1.0)
            self.busy_gpus -= js.alloc_gpus
            js.allocation = None
            js.alloc_gpus = 0.0
            js.alloc_nodes = 0
            js.fee_rate = 0.0  # node_speeds stay: what its last run measured (speed estimators read
            # them from `finished`/`stopped`, or a run that began and ended between two calls is lost)
            js.rate = 0.0
            js.version += 1
        self._drop_hold(js)

    def _drop_hold(self, js: JobState) -> None:
        if js.held is not None:
            self._use(js.spec, js.held, -1.0)
            self.held_gpus -= js.held_gpus
            self.holding.pop(js.job_id, None)
            js.held = None
            js.held_gpus = 0.0

    def _use(self, spec: JobSpec, alloc: Allocation, sign: float) -> None:
        add_use(self.used, spec, alloc, sign)
        capacity, used, free = self.capacity, self.used, self.free
        for n in alloc.nodes:  # `_refresh` of each node, inlined: this runs on every start and stop
            np.subtract(capacity[n], used[n], out=free[n])

    def _refresh(self, node: int) -> None:
        np.subtract(self.capacity[node], self.used[node], out=self.free[node])

    # ------------------------------------------------------------------ nodes
    def on_node(self, node: int) -> list[JobState]:
        """Jobs running or holding resources on `node`."""
        return [js for js in list(self.running.values()) + list(self.holding.values())
                if node in (js.allocation or js.held).nodes]

    def fail_node(self, node: int, now: float) -> list[JobState]:
        """A node goes down: its jobs' runs fail (back to waiting, resuming from their
        checkpoints), holds on it are released, and it offers nothing until it joins again."""
        hit = self.on_node(node)
        for js in hit:
            if js.status is JobStatus.RUNNING:
                self.stop(js, now, preempted=False)
            else:
                self.hold(js, None, now)
        self.capacity[node] = 0.0
        self.down.add(node)
        self._refresh(node)
        return hit

    def join_node(self, node: int) -> None:
        """A node is back (or new in the cluster's list): its full capacity is offered again
        (less what others use on it: `use_elsewhere`)."""
        self.down.discard(node)
        self.capacity[node] = self._offered(node)
        self._refresh(node)

    def use_elsewhere(self, used: np.ndarray) -> bool:
        """What others use on each node (live: pods of other schedulers on a shared Kubernetes
        node), as a (nodes × resources) array: it is not offered to the policy. A node never
        offers less than this scheduler's own jobs already use or hold on it, so a plan that
        keeps them stays valid; they are not preempted for others. Whether any node's offer changed."""
        self.foreign = np.asarray(used, dtype=float)
        offered = self._offered(slice(None))  # every node at once: this runs every live round
        offered[list(self.down)] = 0.0
        changed = np.flatnonzero((offered != self.capacity).any(axis=1))
        self.capacity[changed] = offered[changed]
        self.free[changed] = self.capacity[changed] - self.used[changed]
        return changed.size > 0

    def _offered(self, node: int | slice) -> np.ndarray:
        full = self.cluster.capacity[node]
        if self.foreign is None:
            return full.copy()
        return np.maximum(np.maximum(full - self.foreign[node], 0.0), self.used[node])

    # ------------------------------------------------------------------ decisions
    def snapshot(self, now: float, events: tuple[str, ...], restart_overhead: float,
                 oracle=None, rng: np.random.Generator | None = None, profile=None) -> Snapshot:
        """What the policy sees now, with what changed since the previous snapshot."""
        arrived, finished, stopped = self._arrived, self._finished, self._stopped
        snap = Snapshot(now, self.cluster, self._free_view, self.pending, self.running, restart_overhead, oracle,
                        rng, events, tuple(arrived), tuple(finished), tuple(stopped), self.capacity, profile)
        self._arrived.clear()
        self._finished.clear()
        self._stopped.clear()
        return snap

    def diff(self, plan: Plan, now: float, policy: str) -> list[Action]:
        """Validate the whole plan against the current state, then return the Actions that carry
        it out: stops, hold changes, starts and resizes (in the plan's order), rejections.

        A bad plan raises PlanError naming the policy, the time, the job (and the node); nothing
        has changed then."""
        if not isinstance(plan, Plan):
            raise PlanError(f"policy {policy!r} returned {type(plan).__name__}, not a Plan")
        runs: list[Action] = []
        running, jobs = self.running, self.jobs
        for jid, alloc in plan.allocations.items():
            js = running.get(jid)
            if js is not None and js.allocation is alloc:  # unchanged: the common case
                continue
            js = jobs.get(jid)
            if js is None:
                raise PlanError(f"policy {policy!r} at t={now:.1f}: unknown job {jid!r}")
            if js.status is JobStatus.RUNNING:
                if js.allocation == alloc:
                    continue
            elif js.status is not JobStatus.PENDING:
                raise PlanError(f"policy {policy!r} at t={now:.1f}: job {jid!r} is {js.status.value}, it cannot run")
            elif jid not in self.pending:
                raise PlanError(f"policy {policy!r} at t={now:.1f}: job {jid!r} is waiting out a retry backoff, "
                                "it cannot run yet")
            check_shape(policy, now, js.spec, alloc, self.cluster)
            runs.append(Action(Kind.RESIZE if js.status is JobStatus.RUNNING else Kind.START, jid, alloc))
        if plan.keep_running:
            for jid in plan.preempt:
                if jid not in running or jid in plan.allocations:
                    raise PlanError(f"policy {policy!r} at t={now:.1f}: only a running job the plan does not "
                                    f"place can be preempted, not {jid!r}")
            # in the order the jobs started running, i.e. `running`'s order (a set's order would vary
            # from run to run), found without walking every running job
            stops = [Action(Kind.STOP, jid) for jid in sorted(plan.preempt, key=self._run_seq.__getitem__)]
        else:
            stops = [Action(Kind.STOP, jid) for jid in running if jid not in plan.allocations]
        holds: list[Action] = []
        for jid, alloc in plan.held.items():
            js = jobs.get(jid)
            if js is None or jid not in self.pending or jid in plan.allocations:
                raise PlanError(f"policy {policy!r} at t={now:.1f}: held job {jid!r} must be pending and not running")
            if js.held != alloc:
                check_shape(policy, now, js.spec, alloc, self.cluster, gang=False)
                holds.append(Action(Kind.HOLD, jid, alloc))
        for jid in self.holding:  # holds the plan no longer lists are released
            if jid not in plan.held and jid not in plan.allocations:
                holds.append(Action(Kind.HOLD, jid, None))
        rejects = []
        for jid, reason in plan.rejected.items():
            js = jobs.get(jid)
            if js is None or js.status is not JobStatus.PENDING or jid in plan.allocations:
                raise PlanError(f"policy {policy!r} at t={now:.1f}: only a waiting job can be rejected, not {jid!r}")
            rejects.append(Action(Kind.REJECT, jid, reason=reason or "rejected by the policy"))
        self._check_capacity(plan, runs, stops, holds, now, policy)
        return stops + holds + runs + rejects

    def validate(self, plan: Plan, now: float, policy: str) -> None:
        """Raise PlanError when the plan cannot be carried out (see `diff`)."""
        self.diff(plan, now, policy)

    def _check_capacity(self, plan: Plan, runs: list[Action], stops: list[Action], holds: list[Action],
                        now: float, policy: str) -> None:
        """Per-node capacity after the plan, on the nodes the plan puts something on: the
        changes are added up per node (a plan changes a few nodes; the cluster may have 10,000),
        then each such node is compared in plain floats — the same sums and comparison as NumPy
        would do, without building arrays for the one or two nodes a decision usually touches.
        Only an over-allocation goes through `check_capacity`, which names the node and jobs."""
        delta: dict[int, list[float]] = {}
        touched: set[int] = set()
        jobs = self.jobs
        for a in runs:
            js = jobs[a.job_id]
            if js.allocation is not None:
                _move(delta, js.spec, js.allocation, -1.0)
            if js.held is not None:
                _move(delta, js.spec, js.held, -1.0)
            touched.update(_move(delta, js.spec, a.allocation, 1.0))
        for a in stops:
            js = jobs[a.job_id]
            if js.allocation is not None:
                _move(delta, js.spec, js.allocation, -1.0)
        for a in holds:
            js = jobs[a.job_id]
            if js.held is not None:
                _move(delta, js.spec, js.held, -1.0)
            if a.allocation is not None:
                touched.update(_move(delta, js.spec, a.allocation, 1.0))
        used, cap = self.used, self.capacity
        for n in touched:
            d0, d1, d2 = delta[n]
            u0, u1, u2 = used[n].tolist()
            c0, c1, c2 = cap[n].tolist()
            if u0 + d0 > c0 + 1e-6 or u1 + d1 > c1 + 1e-6 or u2 + d2 > c2 + 1e-6:
                break
        else:
            return
        nodes = np.fromiter(sorted(touched), dtype=np.int64, count=len(touched))
        after = self.used[nodes] + np.array([delta[n] for n in nodes.tolist()])
        check_capacity(policy, now, self.cluster, after, nodes, _holders_after(plan, self.running),
                       capacity=self.capacity)

    def apply(self, action: Action, now: float) -> JobState:
        """The lifecycle part of one Action (the driver does the rest: rates, processes)."""
        js = self.jobs[action.job_id]
        if action.kind is Kind.STOP:
            self.stop(js, now, preempted=True)
        elif action.kind is Kind.HOLD:
            self.hold(js, action.allocation, now)
        elif action.kind in (Kind.START, Kind.RESIZE):
            self.start(js, action.allocation, now)
        else:
            self.end(js, now, JobStatus.REJECTED, action.reason)
        return js


def _move(delta: dict[int, list[float]], spec: JobSpec, alloc: Allocation, sign: float) -> tuple[int, ...]:
    """Add (sign 1) or take away (sign -1) an allocation's use in `delta` {node: [gpu, cpu, mem]};
    returns its nodes."""
    wd, pd = spec.worker_demand, spec.ps_demand
    for n, w, p in zip(alloc.nodes, alloc.workers, alloc.ps):
        d = delta.get(n)
        if d is None:
            d = delta[n] = [0.0, 0.0, 0.0]
        d[0] += sign * (w * wd[0] + p * pd[0])
        d[1] += sign * (w * wd[1] + p * pd[1])
        d[2] += sign * (w * wd[2] + p * pd[2])
    return alloc.nodes


def _holders_after(plan: Plan, running: dict[str, JobState]) -> Callable[[int], list[str]]:
    """Who sits on a node once the plan is carried out (for the error message only)."""
    def holders(node: int) -> list[str]:
        out = [jid for jid, a in plan.allocations.items() if node in a.nodes]
        if plan.keep_running:
            out += [jid for jid, js in running.items()
                    if jid not in plan.allocations and jid not in plan.preempt and node in js.allocation.nodes]
        return out + [f"{jid} (held)" for jid, a in plan.held.items() if node in a.nodes]
    return holders
