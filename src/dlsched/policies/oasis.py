"""OASiS (Bao, Peng, Wu, Li, INFOCOM 2018): online primal-dual admission, allocation and placement.

Why it differs from every other policy here: it decides once per job, at arrival, and commits a
whole schedule (workers and PSs per server for every future slot). A job is admitted only if the
utility of its best schedule exceeds that schedule's cost at the current resource prices
(payoff mu > 0); its usage then raises the prices (eq. (22)) for later arrivals. Admitted plans are
executed as committed: each slot, this policy returns the allocations committed for that slot.

Time model. Slots of `slot_seconds`, counted from the first time the policy is asked. A job that
arrives inside a slot is planned from the next slot boundary (a slot is the unit of allocation).
Planned completion "in slot t" means by the end of slot t; the utility OASiS optimises is f at that
end, which is the latest the job can finish, so the realised utility is never below the planned.
`horizon` is the paper's T: with `rolling=False` every plan must end before slot T of the run; with
`rolling=True` (default, for open-ended real traces) each job looks `horizon` slots ahead.

Pools. `pools="split"`: PS servers are the nodes without GPUs, worker servers those with GPUs (the
paper's two pools); `"shared"`: every node can host both (Kubernetes), with separate prices per
role (p with U1, L1 for workers; q with U2, L2 for PSs), both priced on the node's total usage;
`"auto"`: split when the cluster has both kinds of node.

Jobs. `oasis:ps` jobs (see `throughput.oasis_model`) are planned with the paper's model: work
units of data chunks, elastic worker count up to N, PSs to carry the workers' bandwidth. Any other
job (real traces) is planned rigidly at its requested gang for ceil(duration / slot) slots; a job
without a utility gets `core.utility.from_duration` (equal value per job, target 2x its duration).

Known work. OASiS plans a job's whole schedule at its arrival, before it has run at all, so it
needs the work up front: the paper assumes users declare it (epochs, and the job's profiled
speed). A job that declares its work (`JobState.declared_work`) is planned from it, and its trace
duration at the requested size counts as declared with it. A job that declares none (Philly, ITP)
can only be planned from the truth, so only when the policy runs as an oracle (`snap.oracle` is
set, reported as such); otherwise it is rejected with that reason (`known_work`).

Execution drift. With restart pauses, or a trace job whose real speed differs, a job can have work
left when its plan ends; it then keeps its last allocation while that still fits in the room no
commitment uses (best effort, never displacing a committed plan).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import GPU, Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import Architecture, JobSpec
from dlsched.core.plan import Plan
from dlsched.core.policy import Oracle, Policy
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.core.utility import default_utility
from dlsched.framework.packing import add_use
from dlsched.policies.oasis_prices import JobTerms, OnlineConstants, PriceConstants, UsageTable, price
from dlsched.policies.oasis_schedule import Market, Schedule, _fits, best_schedule
from dlsched.throughput.oasis_model import MODEL_KEY, minibatch_seconds


@dataclass(frozen=True)
class Profile:
    """How OASiS sees one job's work: tasks per slot for d work units, and the constants' terms."""

    workers_for: np.ndarray  # (K+1,) -1 where impossible
    ps_for: np.ndarray
    fastest_slots: int
    work_slots: float  # worker-slots


def known_work(job: JobState, snap: Snapshot) -> float | None:
    """Total iterations a policy that must know the work up front may plan with: what the user
    declared, else the truth when the policy runs as an oracle, else None."""
    declared = job.declared_work
    if declared is not None:
        return declared
    return job.progress + snap.remaining_iterations(job) if snap.oracle is not None else None


NO_KNOWN_WORK = "declares no work, and {name} needs it up front (the paper assumes users declare it): run it as an oracle"


def job_utility(spec: JobSpec):
    """The job's utility, or the duration-derived default for trace jobs that declare none."""
    return spec.utility if spec.utility is not None else default_utility(spec)


def profile(spec: JobSpec, slot: float, max_units: int, work: float | None = None) -> Profile:
    """The paper's chunk model for `oasis:ps` jobs; a rigid gang for every other job.

    `work` is the job's known total (`known_work`); a rigid job without a trace duration at its
    requested size is a duration-only job, whose iterations are seconds at that size.
    """
    if spec.model == MODEL_KEY:
        ex = spec.extra
        t = minibatch_seconds(ex) / slot  # slots per mini-batch
        E, N, M = int(ex["epochs"]), int(ex["chunks"]), int(ex["minibatches"])
        chunks = E * N
        g = math.ceil(chunks / max_units)
        K = math.ceil(chunks / g)
        d = np.arange(K + 1)
        w = np.ceil(d * g * M * t - 1e-9).astype(np.int64)
        ratio = float(ex["worker_gbps"]) / float(ex["ps_gbps"])
        p = np.where(w > 0, np.maximum(1, np.ceil(w * ratio - 1e-9)), 0).astype(np.int64)
        bad = (w > min(N, spec.max_workers)) | ((w > 0) & (w < spec.min_workers)) | (p > w) | (p > spec.max_ps)
        w[bad] = -1
        return Profile(w, p, max(1, math.ceil(E * M * t - 1e-9)), float(math.ceil(chunks * M * t - 1e-9)))
    dur = spec.duration if spec.duration is not None else (work if spec.model == "duration-only" else None)
    if dur is None:
        raise ConfigError(
            f"job {spec.job_id!r}: OASiS needs known work (an '{MODEL_KEY}' job or a trace duration), "
            f"model {spec.model!r} has neither"
        )
    K = max(1, math.ceil(dur / slot - 1e-9))
    w = np.full(K + 1, -1, dtype=np.int64)
    p = np.zeros(K + 1, dtype=np.int64)
    w[0], w[1] = 0, spec.num_workers
    p[1] = spec.num_ps if spec.arch is Architecture.PS else 0
    return Profile(w, p, K, float(K * spec.num_workers))


def best_rigid_schedule(m: Market, utilities: np.ndarray, workers: int, ps: int, slots_needed: int) -> Schedule:
    """Alg. 2's DP when a slot holds at most one unit (a rigid gang): the K cheapest slots up to t.

    The general DP would be O(T K^2) with K up to hundreds of slots; here each completion slot's
    best cost is the sum of the K cheapest feasible slots before it, which is the same optimum.
    """
    from dlsched.policies.oasis_schedule import place_plan, slot_costs

    T = m.slots
    costs = np.array([slot_costs(m, t, np.array([workers]), np.array([ps]))[0] for t in range(T)])
    best_payoff, best_t, best_cost = -np.inf, -1, np.inf
    for t in range(slots_needed - 1, T):
        if best_t >= 0 and utilities[t] <= best_payoff:
            break
        window = costs[: t + 1]
        if np.isfinite(window).sum() < slots_needed or not np.isfinite(costs[t]):
            continue  # completion in t means the job runs in t
        cheapest = np.sort(window[:t])[: slots_needed - 1]
        c = costs[t] + cheapest.sum()
        if np.isfinite(c) and utilities[t] - c > best_payoff:
            best_payoff, best_t, best_cost = utilities[t] - c, t, c
    units = np.zeros(T, dtype=np.int64)
    if best_t < 0:
        return Schedule(-np.inf, 0.0, np.inf, -1, units, [], [])
    units[best_t] = 1
    if slots_needed > 1:
        units[np.argsort(costs[:best_t], kind="stable")[: slots_needed - 1]] = 1
    xs, zs = place_plan(m, units, best_t, np.array([0, workers]), np.array([0, ps]))
    return Schedule(float(best_payoff), float(utilities[best_t]), float(best_cost), best_t, units, xs, zs)


class OASiS(Policy):
    """See the module docstring."""

    name = "oasis"
    offline_only = ("it commits each job's whole schedule when the job arrives, from the job's speed at "
                    "every size (its paper's per-job model, an 'oasis:ps' job or a trace duration); a live "
                    "job declares its steps but not its speeds, which are only measured once it runs")

    def __init__(
        self,
        slot_seconds: float = 3600.0,
        horizon: int = 300,
        rolling: bool = True,
        pools: str = "auto",
        max_units: int = 64,
        scale: float = 1.0,
        constants: PriceConstants | None = None,
        l_min_fraction: float = 1e-3,
        order: str = "arrival",
        release: bool = True,
    ):
        if slot_seconds <= 0 or horizon <= 0 or max_units <= 0:
            raise ConfigError("OASiS: slot_seconds, horizon and max_units must be > 0")
        if pools not in ("auto", "split", "shared"):
            raise ConfigError(f"OASiS: pools must be auto, split or shared, got {pools!r}")
        if not 0 <= l_min_fraction < 1:
            raise ConfigError(f"OASiS: l_min_fraction must be in [0, 1), got {l_min_fraction}")
        self.l_min_fraction = l_min_fraction
        if order not in ("arrival", "value"):
            raise ConfigError(f"OASiS: order must be 'arrival' or 'value', got {order!r}")
        self.order = order
        self.release = release
        if not scale > 0:
            raise ConfigError(f"OASiS: scale (U/L estimate factor) must be > 0, got {scale}")
        self.slot = float(slot_seconds)
        self.interval = self.slot
        self.horizon = int(horizon)
        self.rolling = rolling
        self.pools = pools
        self.max_units = int(max_units)
        self.scale = scale
        self.fixed_constants = constants.scaled(scale) if constants is not None and scale != 1.0 else constants

    # ------------------------------------------------------------------ setup
    def reset(self, cluster: Cluster, seed: int) -> None:
        self.cluster = cluster
        cap = cluster.capacity
        has_gpu = cap[:, GPU] > 0
        split = self.pools == "split" or (self.pools == "auto" and has_gpu.any() and (~has_gpu).any())
        if split and not (has_gpu.any() and (~has_gpu).any()):
            raise ConfigError("OASiS pools='split' needs GPU nodes (workers) and GPU-less nodes (PSs)")
        self.shared = not split
        all_nodes = np.arange(cluster.num_nodes)
        self.wnodes = all_nodes[has_gpu] if split else all_nodes
        self.pnodes = all_nodes[~has_gpu] if split else all_nodes
        self.table = UsageTable(cluster.num_nodes, cap.shape[1], slots=max(64, self.horizon))
        self.online = OnlineConstants(
            self.horizon, float(cap[self.wnodes].sum()), float(cap[self.pnodes].sum()), self.scale, self.l_min_fraction
        )
        self.origin: float | None = None
        self.plans: dict[str, dict[int, Allocation]] = {}
        self.last_slot: dict[str, int] = {}
        self.decided: set[str] = set()
        self.decisions: list[dict] = []
        self.demands: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    # ------------------------------------------------------------------ per call
    def _slot_of(self, t: float) -> int:
        return int(math.floor((t - self.origin) / self.slot + 1e-9))

    def _slot_start(self, t: float) -> int:
        return int(math.ceil((t - self.origin) / self.slot - 1e-9))

    def schedule(self, snap: Snapshot) -> Plan:
        if self.origin is None:
            self.origin = snap.now
        plan = Plan()
        new = []
        for j in snap.pending:
            if j.job_id in self.decided:
                continue
            if known_work(j, snap) is None:
                self.decided.add(j.job_id)
                plan.reject(j.job_id, f"OASiS: {NO_KNOWN_WORK.format(name='OASiS')}")
            else:
                new.append(j)
        for job in sorted(new, key=lambda j: self._order_key(j, snap)):
            self._decide(job, snap, plan)
        s = self._slot_of(snap.now)
        live = {j.job_id: j for j in snap.running + snap.pending}
        if self.release:
            self._release_finished(s, live)
        for jid in live:
            slots = self.plans.get(jid)
            if slots is not None and s in slots:
                plan.assign(jid, slots[s])
        self._best_effort(s, live, plan)
        return plan

    def _release_finished(self, s: int, live: dict[str, JobState]) -> None:
        """A job that finished before its plan ended gives back its later slots (prices fall again).

        Plans round work up to whole workers per slot, and jobs often end inside their last slots;
        the paper's plans run to the end, but keeping capacity reserved for a finished job would
        only turn later jobs away.
        """
        for jid in [j for j in self.demands if j not in live]:
            wd, pd_ = self.demands.pop(jid)
            for t, a in self.plans[jid].items():
                if t > s:
                    nodes = list(a.nodes)
                    left = self.table.used[t, nodes] - (np.outer(a.workers, wd) + np.outer(a.ps, pd_))
                    self.table.used[t, nodes] = np.maximum(left, 0.0)  # no -1e-16 from float round-off

    def _order_key(self, job: JobState, snap: Snapshot):
        """Jobs that arrive together are decided one by one; the paper gives no order among them.

        "arrival": submit order. "value": highest peak utility per unit of work first (utility per
        worker-slot x summed demand), so a burst of arrivals does not fill the cheap early slots
        with whichever job happened to be listed first.
        """
        if self.order == "arrival":
            return (job.rank,)
        spec = job.spec
        prof = profile(spec, self.slot, self.max_units, known_work(job, snap))
        density = job_utility(spec)(0.0) / max(prof.work_slots * float(np.sum(spec.worker_demand)), 1e-12)
        return (-density, job.rank)

    def _best_effort(self, s: int, live: dict[str, JobState], plan: Plan) -> None:
        """Jobs past their plan with work left keep their last allocation where nothing committed is."""
        room = None
        for jid in live:
            last = self.last_slot.get(jid)
            if last is None or jid in plan.allocations or s <= last:
                continue
            alloc = self.plans[jid][last]
            spec = live[jid].spec
            if room is None:
                self.table.ensure(s + 1)
                room = self.cluster.capacity - self.table.used[s]
            use = alloc.usage(np.asarray(spec.worker_demand), np.asarray(spec.ps_demand))
            nodes = list(alloc.nodes)
            if (room[nodes] + 1e-9 >= use).all():
                add_use(room, spec, alloc, -1.0)
                plan.assign(jid, alloc)

    # ------------------------------------------------------------------ admission
    def _decide(self, job: JobState, snap: Snapshot, plan: Plan) -> None:
        t0 = time.perf_counter()
        spec = job.spec
        self.decided.add(spec.job_id)
        start = self._slot_start(max(snap.now, spec.submit_time))
        end = start + self.horizon if self.rolling else self.horizon
        f = job_utility(spec)
        prof = profile(spec, self.slot, self.max_units, known_work(job, snap))
        wd, pd_ = np.asarray(spec.worker_demand), np.asarray(spec.ps_demand)
        end_time = self.origin + end * self.slot
        terms = JobTerms(
            fastest_utility=f(prof.fastest_slots * self.slot),
            horizon_utility=f(max(0.0, end_time - spec.submit_time)),
            work=prof.work_slots,
            worker_demand=wd,
            ps_demand=pd_,
            peak_utility=f(0.0),
        )
        consts = self.fixed_constants or self.online.observe(terms)
        record = {"job_id": spec.job_id, "time": snap.now, "admitted": False, "payoff": float("nan"),
                  "utility": float("nan"), "cost": float("nan"), "completion_slot": -1}
        if start >= end:
            reason = f"OASiS: arrived at slot {start}, after the horizon T={end}"
            sched = None
        else:
            m = self._market(spec, start, end, consts, wd, pd_)
            ends = self.origin + (start + np.arange(end - start) + 1) * self.slot - spec.submit_time
            utilities = f.many(ends) if hasattr(f, "many") else np.array([f(x) for x in ends])
            if (prof.workers_for[2:] < 0).all() and prof.workers_for[1] >= 0 and len(prof.workers_for) > 2:
                sched = best_rigid_schedule(m, utilities, int(prof.workers_for[1]), int(prof.ps_for[1]), len(prof.workers_for) - 1)
            else:
                sched = best_schedule(m, utilities, prof.workers_for, prof.ps_for)
            record.update(payoff=sched.payoff, utility=sched.utility, cost=sched.cost)
            if not sched.feasible:
                reason = f"OASiS: no schedule fits before slot {end} (payoff -inf)"
            elif sched.payoff <= 0:
                reason = (
                    f"OASiS: payoff {sched.payoff:.4g} <= 0 (best schedule: utility {sched.utility:.4g}, "
                    f"cost {sched.cost:.4g} at current prices, completion slot {start + sched.last_slot})"
                )
            else:
                reason = ""
        if reason:
            plan.reject(spec.job_id, reason)
        else:
            self._commit(spec, start, sched, wd, pd_)
            record.update(admitted=True, completion_slot=start + sched.last_slot)
        record["decision_seconds"] = time.perf_counter() - t0
        self.decisions.append(record)

    def _market(self, spec: JobSpec, start: int, end: int, c: PriceConstants, wd: np.ndarray, pd_: np.ndarray) -> Market:
        cap = self.cluster.capacity
        used = self.table.window(start, end)  # (T, N, R)
        wu, pu = used[:, self.wnodes], used[:, self.pnodes]
        wprice = price(wu, cap[self.wnodes], c.U1, c.L1) @ wd
        pprice = price(pu, cap[self.pnodes], c.U2, c.L2) @ pd_
        wcap = _fits(cap[self.wnodes][None] - wu, wd)
        if spec.gpu_type:
            wcap = wcap * (self.cluster.gpu_type[self.wnodes] == spec.gpu_type)[None, :]
        pres = cap[self.pnodes][None] - pu
        pcap = _fits(pres, pd_)
        return Market(wprice, wcap, pprice, pcap, shared=self.shared, pres=pres if self.shared else None, wuse=wd, puse=pd_)

    def _commit(self, spec: JobSpec, start: int, sched: Schedule, wd: np.ndarray, pd_: np.ndarray) -> None:
        slots: dict[int, Allocation] = {}
        for t, (x, z) in enumerate(zip(sched.workers, sched.ps)):
            if x is None:
                continue
            placement: dict[int, list[int]] = {}
            for h in np.flatnonzero(x):
                placement.setdefault(int(self.wnodes[h]), [0, 0])[0] += int(x[h])
            for k in np.flatnonzero(z):
                placement.setdefault(int(self.pnodes[k]), [0, 0])[1] += int(z[k])
            alloc = Allocation.of({n: (w, p) for n, (w, p) in placement.items()})
            slots[start + t] = alloc
            nodes = np.array(alloc.nodes)
            use = np.outer(alloc.workers, wd) + np.outer(alloc.ps, pd_)
            self.table.add(start + t, nodes, use)
        self.plans[spec.job_id] = slots
        self.demands[spec.job_id] = (wd, pd_)
        self.last_slot[spec.job_id] = max(slots)


def oasis(
    slot_seconds: float = 3600.0,
    horizon: int = 300,
    rolling: bool = True,
    pools: str = "auto",
    max_units: int = 64,
    scale: float = 1.0,
    l_min_fraction: float = 1e-3,
    order: str = "arrival",
    release: bool = True,
    oracle: bool = False,
) -> Policy:
    """OASiS with U and L estimated online from the jobs seen so far (x `scale`); see OASiS for
    options. `oracle=True` plans jobs that declare no work from their true work (reported as an oracle)."""
    pol = OASiS(slot_seconds, horizon, rolling, pools, max_units, scale, None, l_min_fraction, order, release)
    return Oracle(pol) if oracle else pol
