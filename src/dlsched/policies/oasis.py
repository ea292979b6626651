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
units of data chunks, elastic worker count up to N, PSs to carry the workers' bandwidth. An elastic
job planned from the truth (an oracle: real traces on measured curves) is planned at the best of a
few constant sizes, each with the slots its true speed needs there (`oasis_jobs.size_options`).
Any other job is planned rigidly at its requested gang for ceil(duration / slot) slots. A job
without a utility gets `core.utility.from_duration` (equal value per job, target 2x its duration).
On a trace, `oasis_jobs.workload_slots` picks the slot length and horizon from the jobs'
durations (`dlsched compare` applies it unless the run sets them).

Known work. OASiS plans a job's whole schedule at its arrival, before it has run at all, so it
needs the work up front: the paper assumes users declare it (epochs, and the job's profiled
speed). A job that declares its work (`JobState.declared_work`) is planned from it, and its trace
duration at the requested size counts as declared with it. A job that declares none (Philly, ITP)
can only be planned from the truth, so only when the policy runs as an oracle (`snap.oracle` is
set, reported as such); otherwise it is rejected with that reason (`known_work`).

Trace loads (constant-size plans, not the paper's `oasis:ps` jobs). `work_conserving`: an admitted
job that waits for its planned slots runs now in room no commitment of the slot uses, and hands
back the latest slots it no longer needs (`_trim`); `defer`: it commits the latest slots that keep
that share of its best schedule's utility, so a long job does not reserve the near future that
short arrivals need; `prices="auto"`: U and L per resource-slot (`oasis_prices.density_constants`).
Why: on ITP traces at load 0.8 OASiS' total utility trailed DRF's by 17-31% (docs/OASIS.md).

Revision (`revise`, ours; the paper never revises a commitment): an arrival OASiS would turn
away may move later the commitments of admitted constant-size jobs that lose least by ending later,
if each fits again and the arrival gains more than they lose (`_displace`). Why: on ITP traces at
load 0.8 bursts of short jobs were turned away while long jobs, whose utility barely moves over
their slack, held the near slots (0.83x DRF's utility on all 3,011 raw rigid jobs at load 0.8;
1.03x with it).

Execution drift. With restart pauses, or a trace job whose real speed differs, a job can have work
left when its plan ends; it then keeps its last allocation while that still fits in the room no
commitment uses (best effort, never displacing a committed plan).
"""

from __future__ import annotations

import bisect
import math
import time

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import GPU, Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.core.plan import Plan
from dlsched.core.policy import Oracle, Policy
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.core.utility import default_utility
from dlsched.framework.packing import add_use, pack
from dlsched.policies.oasis_prices import JobTerms, OnlineConstants, PriceConstants, UsageTable, price
from dlsched.policies.oasis_jobs import best_rigid_schedule, best_sized_schedule, profile, size_options
from dlsched.policies.oasis_schedule import Market, Schedule, _fits, best_schedule
from dlsched.throughput.oasis_model import MODEL_KEY


#: Slots' worth of slack `_trim` leaves a job that is ahead of its plan (restarts are not planned).
TRIM_MARGIN = 0.25
#: A constant-size job commits the latest slots that keep this share of its best schedule's utility
#: (`oasis_jobs._deferred`); it still runs early in idle room.
DEFER = 0.7
#: A rolling window of more slots than this is planned in blocks of whole slots (`OASiS._step`).
#: Why: an arrival prices a (slots, nodes, resources) table over its whole window and searches
#: it slot by slot, so one decision costs what the window's length in slots is. A trace that mixes
#: minute-long and month-long jobs (Philly) needs 60 s slots for the short ones and then gives a
#: long job a window of 135k-206k slots: 200 Philly jobs took OASiS about 30 minutes. Blocks keep
#: the short slots (and the short jobs' plans) as they are. The ITP traces' windows (at most
#: 17,049 and 20,810 slots) are under it, so their plans are unchanged.
MAX_PLAN_SLOTS = 25_000
#: With `revise`, an arrival that would be turned away may move at most this many admitted jobs'
#: commitments later (`OASiS._displace`): each costs a market over the arrival's window.
MAX_VICTIMS = 8
#: ... each of which would lose less than this share of its planned utility by ending as many
#: slots later as the arrival needs.
MAX_VICTIM_LOSS = 0.5
#: ... and a victim that does not fit again is left out of the next try, this many tries at most.
DISPLACE_TRIES = 3


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
        work_conserving: bool = True,
        defer: float = DEFER,
        prices: str = "auto",
        revise: bool = True,
    ):
        self.revise = revise
        if prices not in ("auto", "paper", "density"):
            raise ConfigError(f"OASiS: prices must be auto, paper or density, got {prices!r}")
        self.prices = prices
        self.work_conserving = work_conserving
        if not 0 < defer <= 1:
            raise ConfigError(f"OASiS: defer must be in (0, 1], got {defer}")
        self.defer = defer if work_conserving else 1.0
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
        rack = cluster.rack[self.wnodes]  # worker-server columns of each rack: gangs stay in one
        self.racks = [np.flatnonzero(rack == r) for r in np.unique(rack)]
        self.table = UsageTable(cluster.num_nodes, cap.shape[1], slots=max(64, self.horizon))
        self.online = OnlineConstants(
            self.horizon, float(cap[self.wnodes].sum()), float(cap[self.pnodes].sum()), self.scale, self.l_min_fraction
        )
        self.origin: float | None = None
        self.plans: dict[str, dict[int, Allocation]] = {}
        self.last_slot: dict[str, int] = {}
        self.starts: dict[str, list[int]] = {}  # each plan's slots, sorted (the next start by bisection)
        self.decided: set[str] = set()
        self.decisions: list[dict] = []
        self.demands: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.plan_rate: dict[str, float] = {}  # iterations/s of a constant-size plan (0: not one)
        self._record: dict[str, dict] = {}  # each admitted job's decision (a displaced job's is updated)

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
        self._best_effort(s, live, plan, snap)
        plan.wake_at = self._next_start(s, snap)
        return plan

    def _next_start(self, s: int, snap: Snapshot) -> float | None:
        """When the next committed slot of a waiting job begins. Why: the simulator skips idle time
        to the next arrival when nothing runs, so a job planned to start in a later slot of an idle
        cluster would otherwise wait for someone else's arrival (on 195job, a 1 h job planned for
        slot 18 first ran in slot 47)."""
        nxt = None
        for j in snap.pending:
            keys = self.starts.get(j.job_id)
            i = bisect.bisect_right(keys, s) if keys is not None else 0
            if keys is not None and i < len(keys) and (nxt is None or keys[i] < nxt):
                nxt = keys[i]
        return None if nxt is None else self.origin + nxt * self.slot

    def _release_finished(self, s: int, live: dict[str, JobState]) -> None:
        """A job that finished before its plan ended gives back its later slots (prices fall again).

        Plans round work up to whole workers per slot, and jobs often end inside their last slots;
        the paper's plans run to the end, but keeping capacity reserved for a finished job would
        only turn later jobs away.
        """
        for jid in [j for j in self.demands if j not in live]:
            wd, pd_ = self.demands.pop(jid)
            self.starts.pop(jid, None)
            self._record.pop(jid, None)
            for t, a in self.plans[jid].items():
                if t > s:
                    self._unuse(t, a, wd, pd_)

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

    def _best_effort(self, s: int, live: dict[str, JobState], plan: Plan, snap: Snapshot) -> None:
        """Admitted jobs with nothing committed in slot s run in the room no commitment of slot s uses.

        Jobs past their plan keep their last allocation there (execution drift). With
        `work_conserving`, every other admitted job that waits in slot s (its next planned slot is
        later, or its plan has a gap here) also starts early in that room: at its current
        allocation if it runs, else at its next planned allocation, else packed anywhere at that
        size. It never displaces a commitment, so every plan still holds; the work it does early
        shortens its plan (`_trim`), which hands its latest slots back for later arrivals.
        """
        self.table.ensure(s + 1)
        room = self.cluster.capacity - self.table.used[s]
        waiting = []
        for jid, job in live.items():
            if jid in plan.allocations or jid not in self.plans:
                continue
            last = self.last_slot[jid]
            if s > last:
                waiting.append((0, 0, jid, [self.plans[jid][last]]))
            elif self.work_conserving and job.spec.model != MODEL_KEY:  # constant-size plans (the paper's keep theirs)
                keys = self.starts.get(jid) or []
                i = bisect.bisect_right(keys, s)
                nxt = self.plans[jid][keys[i]] if i < len(keys) else self.plans[jid][last]
                cur = [job.allocation] if job.allocation is not None else []
                waiting.append((1, keys[i] if i < len(keys) else last, jid, cur + [nxt]))
        waiting.sort(key=lambda w: (w[0], w[1], live[w[2]].rank))
        for overdue, _, jid, options in waiting:
            spec = live[jid].spec
            wd, pd_ = np.asarray(spec.worker_demand), np.asarray(spec.ps_demand)
            chosen = None
            for alloc in options:
                if (room[list(alloc.nodes)] + 1e-9 >= alloc.usage(wd, pd_)).all():
                    chosen = alloc
                    break
            if chosen is None and overdue == 1:
                alloc = options[-1]
                chosen = pack(self.cluster, room, spec, int(sum(alloc.workers)), int(sum(alloc.ps)))
            if chosen is not None:
                add_use(room, spec, chosen, -1.0)
                plan.assign(jid, chosen)
                if overdue == 1:  # it now holds slot s: commit it there, so the plan is what runs
                    self.plans[jid][s] = chosen
                    bisect.insort(self.starts[jid], s)
                    self.table.add(s, np.array(chosen.nodes), np.outer(chosen.workers, wd) + np.outer(chosen.ps, pd_))
        if self.work_conserving and snap.oracle is not None:
            self._trim(s, live, plan, snap)

    def _trim(self, s: int, live: dict[str, JobState], plan: Plan, snap: Snapshot) -> None:
        """Hand back the latest planned slots a constant-size job no longer needs.

        Why: a job that ran early in idle room (or faster than planned) is ahead of its plan; its
        last slots would stay reserved until it ends, priced as used for every later arrival. Only
        for plans at one size, whose need is its remaining work at that size's true rate (an
        oracle's; a declared-work job without one keeps its plan); TRIM_MARGIN of a slot is kept
        for restarts the plan does not count.
        """
        end_s = self.origin + (s + 1) * self.slot
        for jid, job in live.items():
            slots = self.plans.get(jid)
            if slots is None or jid not in self.demands:
                continue
            rate = self.plan_rate.get(jid)
            if rate is None:
                sizes = {(sum(a.workers), sum(a.ps)) for a in slots.values()}
                first = slots[min(slots)]
                rate = snap.oracle.rate(job.spec, first, snap.cluster) if len(sizes) == 1 else 0.0
                self.plan_rate[jid] = rate
            if rate <= 0:
                continue
            keys = self.starts[jid]
            i = bisect.bisect_right(keys, s)
            ahead = len(keys) - i  # planned slots after s (counted, not copied: a month-long plan has 1e5)
            if not ahead:
                continue
            rest = end_s - snap.now if jid in plan.allocations else 0.0
            left = snap.remaining_iterations(job) / rate - rest
            need = max(0, math.ceil(left / self.slot + TRIM_MARGIN - 1e-9))
            if need >= ahead:
                continue
            wd, pd_ = self.demands[jid]
            for t in keys[i + need:]:
                self._unuse(t, slots.pop(t), wd, pd_)
            del keys[i + need:]
            self.last_slot[jid] = keys[-1] if keys else s

    # ------------------------------------------------------------------ admission
    def _decide(self, job: JobState, snap: Snapshot, plan: Plan) -> None:
        t0 = time.perf_counter()
        spec = job.spec
        self.decided.add(spec.job_id)
        start = self._slot_start(max(snap.now, spec.submit_time))
        end = start + self.horizon if self.rolling else self.horizon
        f = job_utility(spec)
        work = known_work(job, snap)
        sizes = size_options(job, snap, self.slot, work)
        prof = None if sizes else profile(spec, self.slot, self.max_units, work)
        fastest = min(o.slots for o in sizes) if sizes else prof.fastest_slots
        wd, pd_ = np.asarray(spec.worker_demand), np.asarray(spec.ps_demand)
        end_time = self.origin + end * self.slot
        terms = JobTerms(
            fastest_utility=f(fastest * self.slot),
            horizon_utility=f(max(0.0, end_time - spec.submit_time)),
            work=min(o.workers * o.slots for o in sizes) if sizes else prof.work_slots,
            worker_demand=wd,
            ps_demand=pd_,
            peak_utility=f(0.0),
        )
        if self.prices != "paper":  # "auto": the paper's bounds for its own jobs, density for constant-size ones
            self.online.density = self.prices == "density" or spec.model != MODEL_KEY
        consts = self.fixed_constants or self.online.observe(terms)
        record = {"job_id": spec.job_id, "time": snap.now, "admitted": False, "payoff": float("nan"),
                  "utility": float("nan"), "cost": float("nan"), "completion_slot": -1}
        if start >= end:
            reason = f"OASiS: arrived at slot {start}, after the horizon T={end}"
            sched = None
        else:
            utilities = self._utilities(f, spec, start, end - start)
            if self.rolling:  # look ahead only while the job is worth something (L's own cut-off)
                end = start + self._useful_slots(utilities, terms.peak_utility)
                utilities = utilities[: end - start]
            step = self._step(end - start, spec)
            if step > 1:  # a long window: plan in blocks of `step` slots, the job's needs and values by block
                blocks = math.ceil((end - start) / step)
                end = start + blocks * step
                utilities = self._utilities(f, spec, start, blocks, step)
                sizes = size_options(job, snap, self.slot * step, work)
                prof = None if sizes else profile(spec, self.slot * step, self.max_units, work)
            constant = bool(sizes) or ((prof.workers_for[2:] < 0).all() and prof.workers_for[1] >= 0
                                       and len(prof.workers_for) > 2)

            def plan_in(m: Market, defer: float = self.defer) -> Schedule:
                """The job's best schedule in market m: at one size (committed late by `defer`), else
                Alg. 2's DP over work units."""
                if sizes:
                    return best_sized_schedule(m, utilities, sizes, self.racks, defer)
                if constant:
                    return best_rigid_schedule(m, utilities, int(prof.workers_for[1]), int(prof.ps_for[1]),
                                               len(prof.workers_for) - 1, self.racks, defer)
                return best_schedule(m, utilities, prof.workers_for, prof.ps_for)

            sched = plan_in(self._market(spec, start, end, consts, wd, pd_, step))
            record.update(payoff=sched.payoff, utility=sched.utility, cost=sched.cost)
            if not sched.feasible:
                reason = f"OASiS: no schedule fits before slot {end} (payoff -inf)"
                if self.rolling and end < start + self.horizon:
                    reason += f"; later it is worth < {self.l_min_fraction:g} of its peak utility"
            elif sched.payoff <= 0:
                reason = (
                    f"OASiS: payoff {sched.payoff:.4g} <= 0 (best schedule: utility {sched.utility:.4g}, "
                    f"cost {sched.cost:.4g} at current prices, completion slot {start + (sched.last_slot + 1) * step - 1})"
                )
            else:
                reason = ""
        if reason and self.revise and start < end and step == 1 and constant and spec.model != MODEL_KEY:
            goal = (1.0 - MAX_VICTIM_LOSS) * terms.fastest_utility
            # its best schedule, not deferred: it takes the room the moved commitments give it
            moved = self._displace(job, snap, start, end, fastest, goal, lambda m: plan_in(m, 1.0), consts, wd, pd_)
            if moved is not None:
                sched, record["displaced"] = moved
                record.update(payoff=sched.payoff, utility=sched.utility, cost=sched.cost)
                record.update(admitted=True, completion_slot=start + sched.last_slot,
                              decision_seconds=time.perf_counter() - t0)
                self.decisions.append(record)
                self._record[spec.job_id] = record
                return
        if reason:
            plan.reject(spec.job_id, reason)
        else:
            self._commit(spec, start, sched, wd, pd_, step)
            record.update(admitted=True, completion_slot=start + (sched.last_slot + 1) * step - 1)
            self._record[spec.job_id] = record
        record["decision_seconds"] = time.perf_counter() - t0
        self.decisions.append(record)

    # ------------------------------------------------------------------ revision (ours, `revise=True`)
    def _displace(self, job: JobState, snap: Snapshot, start: int, end: int, fastest: int, goal: float, plan_in,
                  consts: PriceConstants, wd: np.ndarray, pd_: np.ndarray) -> tuple[Schedule, list[str]] | None:
        """Admit an arrival that would be turned away by moving later the commitments of admitted
        jobs that lose least by waiting, if the total planned utility grows.

        Why (ours; the paper never revises a commitment): on ITP traces at load 0.8 bursts of short
        jobs arrive while long jobs hold the near slots; a short job's utility decays on the scale
        of its own length (hours) while a long job's barely moves over its slack (days), so OASiS
        turned them away where DRF preempts the long jobs (docs/OASIS.md). Victims (`_victims`),
        one at a time: each gives up its commitments from slot `start` on, and the arrival is
        planned in what that frees; once it fits with a positive payoff, every victim is planned
        again at its size for as many slots as it gave up. Kept only if every victim fits again and
        the arrival's planned utility exceeds what the victims' planned completions lose;
        otherwise the table and the plans are restored exactly.
        """
        live = {j.job_id: j for j in snap.running + snap.pending}
        victims = self._victims(start, fastest, live)
        for _ in range(DISPLACE_TRIES):
            if not victims:
                return None
            saved_used = self.table.used.copy()
            saved = {jid: (dict(self.plans[jid]), list(self.starts[jid]), self.last_slot[jid], dict(self._record[jid]))
                     for jid in victims}
            sched, released, stuck = self._try_displace(job, start, end, goal, plan_in, consts, wd, pd_, victims, live, saved)
            if stuck is None and sched is not None:
                return sched, released
            self.table.used = saved_used  # undo exactly
            for jid, (plans, starts, last, record) in saved.items():
                self.plans[jid], self.starts[jid], self.last_slot[jid] = plans, starts, last
                self._record[jid].clear()  # the same dict as in `decisions`
                self._record[jid].update(record)
            for table in (self.plans, self.starts, self.demands, self.last_slot):
                table.pop(job.job_id, None)
            if stuck is None:
                return None
            victims = [v for v in victims if v != stuck]  # try again without the one that did not fit again
        return None

    def _try_displace(self, job: JobState, start: int, end: int, goal: float, plan_in, consts: PriceConstants,
                      wd: np.ndarray, pd_: np.ndarray, victims: list[str], live: dict[str, JobState],
                      saved: dict) -> tuple[Schedule | None, list[str], str | None]:
        """One try of `_displace`: (the arrival's schedule if kept, the victims moved, the victim
        that did not fit again if that ended the try)."""
        spec = job.spec
        released: list[tuple[str, int, Allocation]] = []
        for jid in victims:
            released.append((jid, *self._uncommit_from(jid, start)))
            sched = plan_in(self._market(spec, start, end, consts, wd, pd_))
            if not (sched.feasible and sched.payoff > 0 and sched.utility >= goal) and jid != victims[-1]:
                continue
            if not (sched.feasible and sched.payoff > 0):
                return None, [], None
            self._commit(spec, start, sched, wd, pd_)
            lost = 0.0
            for vid, slots, alloc in released:
                change = self._replan(live[vid], start, slots, alloc, consts, saved[vid][2])
                if change is None:
                    return None, [], vid
                lost += change
            if sched.utility > lost:
                return sched, [vid for vid, _, _ in released], None
            return None, [], None  # the victims lose more than the arrival gains
        return None, [], None

    def _victims(self, start: int, fastest: int, live: dict[str, JobState]) -> list[str]:
        """Admitted jobs with a constant-size plan and a commitment within the arrival's target
        (2x its fastest slots from `start`) that would lose less than MAX_VICTIM_LOSS of their
        planned utility by ending `fastest` slots later: the smallest such share first (then the
        most GPUs: one victim frees more), at most MAX_VICTIMS."""
        near = start + 2 * fastest
        out = []
        for job in live.values():
            keys = self.starts.get(job.job_id)
            if not keys or job.job_id not in self.demands or job.spec.model == MODEL_KEY:
                continue
            i = bisect.bisect_left(keys, start)
            if i == len(keys) or keys[i] >= near:
                continue
            plan = self.plans[job.job_id]
            sizes = {(sum(plan[t].workers), sum(plan[t].ps)) for t in keys[i:]}
            if len(sizes) != 1:
                continue
            f = job_utility(job.spec)
            last = self.last_slot[job.job_id]
            now_u, later_u = (self._utilities(f, job.spec, t, 1)[0] for t in (last, last + fastest))
            share = (now_u - later_u) / now_u if now_u > 0 else 1.0
            if share >= MAX_VICTIM_LOSS:
                continue
            gpus = float(next(iter(sizes))[0]) * float(job.spec.worker_demand[GPU])
            out.append((share, -gpus, job.rank, job.job_id))
        out.sort()
        return [jid for *_, jid in out[:MAX_VICTIMS]]

    def _uncommit_from(self, jid: str, start: int) -> tuple[int, Allocation]:
        """Drop the job's commitments in slots >= start: how many slots it gave up, and the
        allocation of the first of them (its size)."""
        keys = self.starts[jid]
        i = bisect.bisect_left(keys, start)
        wd, pd_ = self.demands[jid]
        first = self.plans[jid][keys[i]]
        for t in keys[i:]:
            self._unuse(t, self.plans[jid].pop(t), wd, pd_)
        gave = len(keys) - i
        del keys[i:]
        self.last_slot[jid] = keys[-1] if keys else start - 1
        return gave, first

    def _unuse(self, t: int, a: Allocation, wd: np.ndarray, pd_: np.ndarray) -> None:
        """Take an allocation's use out of slot t of the table."""
        nodes = list(a.nodes)
        left = self.table.used[t, nodes] - (np.outer(a.workers, wd) + np.outer(a.ps, pd_))
        self.table.used[t, nodes] = np.maximum(left, 0.0)  # no -1e-16 from float round-off

    def _replan(self, job: JobState, start: int, slots: int, size: Allocation, consts: PriceConstants,
                old_last: int) -> float | None:
        """Plan a displaced job again at its size for the `slots` it gave up, from slot `start`
        (its best schedule, not deferred); the planned utility it loses (None: nothing fits)."""
        spec = job.spec
        f = job_utility(spec)
        wd, pd_ = self.demands[spec.job_id]
        if self.rolling:
            utilities = self._utilities(f, spec, start, self.horizon)
            end = start + self._useful_slots(utilities, f(0.0))
        else:  # a fixed T: as `_decide`, the window ends at slot T, and nothing is planned past it
            end = self.horizon
            if end <= start:
                return None
            utilities = self._utilities(f, spec, start, end - start)
        if end - start > MAX_PLAN_SLOTS:  # a window planned in blocks: not moved (its blocks are whole)
            return None
        m = self._market(spec, start, end, consts, wd, pd_)
        sched = best_rigid_schedule(m, utilities[: end - start], int(sum(size.workers)), int(sum(size.ps)), slots, self.racks)
        if not sched.feasible:
            return None
        self._commit(spec, start, sched, wd, pd_, keep=self.plans[spec.job_id])
        record = self._record[spec.job_id]
        record["completion_slot"] = start + sched.last_slot
        record["moved"] = record.get("moved", 0) + 1
        return float(self._utilities(f, spec, old_last, 1)[0] - sched.utility)

    def _utilities(self, f, spec: JobSpec, start: int, count: int, step: int = 1) -> np.ndarray:
        """The job's utility if it completes at the end of each of `count` steps of `step` slots
        from slot `start` (a window's slots, or its blocks)."""
        ends = self.origin + (start + (np.arange(count) + 1) * step) * self.slot - spec.submit_time
        return f.many(ends) if hasattr(f, "many") else np.array([f(x) for x in ends])

    def _useful_slots(self, utilities: np.ndarray, peak: float) -> int:
        """Slots of a rolling window up to the last where the job is worth at least `l_min_fraction`
        of its peak (at least one). Why: a completion worth less is what L's floor already leaves
        out (`oasis_prices._lower`), and a long horizon for the longest jobs would otherwise price
        thousands of worthless slots for every short one."""
        if self.l_min_fraction <= 0:
            return len(utilities)
        worth = np.flatnonzero(utilities >= self.l_min_fraction * peak)
        return int(worth[-1]) + 1 if len(worth) else 1

    def _step(self, slots: int, spec: JobSpec) -> int:
        """Slots per planning step of a rolling window of `slots` slots: 1 up to MAX_PLAN_SLOTS,
        else the fewest whole slots that bring it under (the paper's jobs and a fixed T: always 1)."""
        if slots <= MAX_PLAN_SLOTS or not self.rolling or spec.model == MODEL_KEY:
            return 1
        return math.ceil(slots / MAX_PLAN_SLOTS)

    def _market(self, spec: JobSpec, start: int, end: int, c: PriceConstants, wd: np.ndarray, pd_: np.ndarray,
                step: int = 1) -> Market:
        """Prices and room of the window's slots; with `step` > 1, of its blocks of `step` slots:
        a block's room is its fullest slot's, and holding a task there costs `step` slots at the
        price of that fullest slot (prices rise with use, so never less than the slots' own)."""
        cap = self.cluster.capacity
        used = self.table.window(start, end)  # (T, N, R)
        if step > 1:
            used = used.reshape(-1, step, *used.shape[1:]).max(axis=1)
        wu, pu = used[:, self.wnodes], used[:, self.pnodes]
        wprice = price(wu, cap[self.wnodes], c.U1, c.L1) @ wd
        pprice = price(pu, cap[self.pnodes], c.U2, c.L2) @ pd_
        if step > 1:
            wprice, pprice = wprice * step, pprice * step
        wcap = _fits(cap[self.wnodes][None] - wu, wd)
        if spec.gpu_type:
            wcap = wcap * (self.cluster.gpu_type[self.wnodes] == spec.gpu_type)[None, :]
        pres = cap[self.pnodes][None] - pu
        pcap = _fits(pres, pd_)
        return Market(wprice, wcap, pprice, pcap, shared=self.shared, pres=pres if self.shared else None, wuse=wd, puse=pd_)

    def _commit(self, spec: JobSpec, start: int, sched: Schedule, wd: np.ndarray, pd_: np.ndarray, step: int = 1,
                keep: dict[int, Allocation] | None = None) -> None:
        """Commit the schedule's allocation of each window slot (of each block's `step` slots);
        `keep`: the job's commitments before `start` (a displaced job planned again)."""
        slots: dict[int, Allocation] = dict(keep) if keep else {}
        for t, (x, z) in enumerate(zip(sched.workers, sched.ps)):
            if x is None:
                continue
            placement: dict[int, list[int]] = {}
            for h in np.flatnonzero(x):
                placement.setdefault(int(self.wnodes[h]), [0, 0])[0] += int(x[h])
            for k in np.flatnonzero(z):
                placement.setdefault(int(self.pnodes[k]), [0, 0])[1] += int(z[k])
            alloc = Allocation.of({n: (w, p) for n, (w, p) in placement.items()})
            first = start + t * step
            for slot in range(first, first + step):
                slots[slot] = alloc
            nodes = np.array(alloc.nodes)
            use = np.outer(alloc.workers, wd) + np.outer(alloc.ps, pd_)
            self.table.add(first, nodes, use, first + step)
        self.plans[spec.job_id] = slots
        self.starts[spec.job_id] = sorted(slots)
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
    work_conserving: bool = True,
    defer: float = DEFER,
    prices: str = "auto",
    revise: bool = True,
) -> Policy:
    """OASiS with U and L estimated online from the jobs seen so far (x `scale`); see OASiS for
    options. `oracle=True` plans jobs that declare no work from their true work (reported as an oracle)."""
    pol = OASiS(slot_seconds, horizon, rolling, pools, max_units, scale, None, l_min_fraction, order, release, work_conserving, defer=defer, prices=prices, revise=revise)
    return Oracle(pol) if oracle else pol
