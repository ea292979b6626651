"""Tiresias (Gu et al., NSDI 2019): discretized two-dimensional LAS, information-agnostic.

A job's priority is its attained service in GPU-seconds (GPUs x time held: "2D"), discretized
into queues by `thresholds`: Q0 below 3250, Q1 below 7200, Q2 below 18000, Q3 beyond. Short jobs
finish in Q0 before long ones get a look-in, without anyone knowing durations.

Faithful to the authors' simulator (`SymbioticLab/Tiresias`, `run_sim.py` dlas-gpu):
- Every job enters Q0 and is demoted as soon as its service in the queue reaches the threshold.
- Within a queue jobs are in the order they entered it (arrival, demotion or promotion), except
  that after each round running jobs move ahead of waiting ones (the simulator re-partitions each
  queue that way): so a job never preempts a job of its own queue, and a preempted job heads its
  queue's waiting line.
- Starvation (PromoteKnob): a waiting job in a lower queue returns to Q0, with its queue service
  reset to zero, once the time it has waited since it first ran after (re-)entering Q0 reaches
  `promote_knob` x the time it has run since then. The authors' default `dlas-gpu` run has it off
  (their variants use 0.5 to 1000); ours defaults to 8 (`promote_knob=0` turns it off).
- The authors' code sets three thresholds but only three queues, so 18000 is never used there;
  here every threshold makes a queue (pass `thresholds=(3250, 7200)` for their exact setting).

Where the simulator only counts GPUs, ours places jobs (Pack: consolidated), so preemption is
spelled out: queues are walked in priority order and a waiting job starts if it fits in what is
free (skipping ahead of jobs that do not); if it does not fit, running jobs of lower priority are
preempted, lowest first, only if freeing them lets it be placed, and only as many as needed;
otherwise nothing is preempted. A job preempted in a round is not restarted in the same round.
Jobs are rigid, at their requested size.

Cost: the queues are an `MLFQ` index kept across calls and changed by the snapshot's deltas
(arrived, stopped, finished); the walk looks only at waiting jobs whose GPU count could still fit
(free plus what lower priorities hold) and realises them with the shared `Realiser`; a round in
which no line's smallest job could fit skips the realiser altogether (`_may_start`). The next
threshold crossing or promotion is `plan.wake_at`, so no periodic tick is needed.

Any Placement phase can be given (the heterogeneity baselines differ only there): one that is an
`Observer` is told every snapshot before the walk (speed-aware placements learn machine speeds),
one that `Resets` is reset before each run (with the run's seed if it says `takes_seed`).
"""

from __future__ import annotations

import heapq

from dlsched.core.cluster import GPU, Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.plan import Plan
from dlsched.core.policy import Named, Observer, Placement, Policy, Resets
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.framework.las import THRESHOLDS
from dlsched.policies.phases.placement import PLACEMENTS
from dlsched.policies.phases.queues import MLFQ, Entry
from dlsched.policies.phases.realise import Realiser


class Tiresias(Policy):
    """Discretized 2D-LAS with starvation promotion (see the module docstring)."""

    name = "tiresias"

    def __init__(self, thresholds: tuple[float, ...], promote_knob: float, placement: Placement):
        self.thresholds = tuple(float(t) for t in thresholds)
        if any(t <= 0 for t in self.thresholds) or list(self.thresholds) != sorted(set(self.thresholds)):
            raise ConfigError(f"tiresias thresholds must be positive and increasing, got {thresholds!r}")
        if not promote_knob >= 0:
            raise ConfigError(f"tiresias promote_knob must be >= 0 (0 = off), got {promote_knob}")
        self.promote_knob = float(promote_knob)
        self.placement = placement
        self.reset(None, 0)

    def reset(self, cluster: Cluster | None, seed: int) -> None:
        self.index = MLFQ(self.thresholds)
        self._promote: list[tuple[float, int, str, int]] = []  # (time, job index, job id, token)
        self.demotions = self.promotions = 0
        p = self.placement
        if isinstance(p, Resets):  # a placement with state (speed estimates, a random stream)
            if getattr(p, "takes_seed", False):  # a seeded one gets the run's seed
                p.reset(seed=seed)
            else:
                p.reset()

    def schedule(self, snap: Snapshot) -> Plan:
        now, idx = snap.now, self.index
        if isinstance(self.placement, Observer):  # told every call, before any placement
            self.placement.observe(snap)
        for e in idx.follow(snap):  # stopped without our plan: heads its line, may starve
            self._starve(e, now)
        self.demotions += idx.demote_due(now)
        while self._promote and self._promote[0][0] <= now:
            if (e := self._promotable(heapq.heappop(self._promote))) is not None:  # back to Q0, service reset
                idx.unwait(e)
                e.q, e.token, e.first_run = 0, e.token + 1, None
                e.base_service, e.base_run = e.job.attained_service, e.job.run_time
                idx.wait(e)
                self.promotions += 1
        # only what changes: started jobs and the preempted ones (everything else keeps running)
        plan = Plan(keep_running=True)
        if idx.waiting or any(idx.entering):
            started, plan.preempt = self._round(snap, now)
            if started:
                plan.allocations = {j.job_id: idx.allocations[j.job_id] for j in started if j.job_id in idx.allocations}
        while self._promote and self._promotable(self._promote[0]) is None:
            heapq.heappop(self._promote)
        crossing, promotion = idx.next_crossing(), (self._promote[0][0] if self._promote else None)
        plan.wake_at = crossing if promotion is None else promotion if crossing is None else min(crossing, promotion)
        return plan

    # ------------------------------------------------------------------ the walk
    def _round(self, snap: Snapshot, now: float) -> tuple[list[JobState], set[str]]:
        """Queues in priority order: each queue's running jobs, its waiting line, then the jobs
        demoted into it this call. A waiting job may preempt only what ranks below it. Returns
        the jobs started and the ids of the jobs preempted."""
        idx = self.index
        entering = idx.entering_gpus
        held = sum(idx.running_gpus) + sum(entering)
        # free GPUs = what the nodes offer - what our running jobs hold (nothing else holds GPUs here)
        free_gpus = float(snap.capacity[:, GPU].sum()) - held
        started: list[JobState] = []
        gone: dict[str, JobState] = {}
        if self._may_start(free_gpus, held, entering):
            r = Realiser(snap, self.placement, preempt="minimal", keep=idx.allocations, victims=idx.lowest_first(),
                         below=held, free_gpus=free_gpus)
            for q in range(idx.levels):
                r.passed((q, 0), idx.running_gpus[q])
                for job in idx.lines[q].walk(r.room):
                    r.offer(job, job.spec.num_workers, job.spec.num_ps, key=(q, 1))
                r.passed((q, 2), entering[q])
            started, gone = r.started, r.preempted
        for job in started:
            e = idx.entries[job.job_id]
            idx.unwait(e)
            e.token += 1
            e.first_run = now if e.first_run is None else e.first_run
            idx.run(e, now)
        if any(idx.entering):
            for lst in idx.entering:  # demoted jobs stay running at the end of their new queue, or
                for e in lst:  # if preempted, join the end of the line they just entered
                    if e.job.job_id in gone:
                        self._stop(e, now)
                    else:
                        idx.run(e, now)
            idx.clear_entering()
        if not gone:
            return started, set()
        # other preempted jobs head their queue's line, ahead of the jobs already waiting
        heads = sorted((e for j in gone if (e := idx.entries[j]).running), key=lambda e: (e.q, -e.run_key))
        for e in heads:
            idx.unrun(e)
            self._stop(e, now, front=True)
        return started, set(gone)

    def _may_start(self, free_gpus: float, held: float, entering: list[float]) -> bool:
        """Whether the walk would offer any job: some line's smallest job fits in what is free plus
        what ranks below that line (the `Realiser`'s `room` at that point, the same sums in the
        same order). In about 4 rounds of 10 on Philly none does, and the round changes nothing
        but the demoted jobs' places, so it skips the realiser and the walks."""
        idx, below = self.index, held
        for q in range(idx.levels):
            below -= idx.running_gpus[q]
            smallest = idx.lines[q].smallest()
            if smallest is not None and smallest <= free_gpus + below + 1e-9:
                return True
            below -= entering[q]
        return False

    def _stop(self, e: Entry, now: float, front: bool = False) -> None:
        e.token += 1
        self.index.wait(e, front=front)
        self._starve(e, now)

    def _starve(self, e: Entry, now: float) -> None:
        """Promotion timer of a job that just stopped running (PromoteKnob)."""
        if self.promote_knob > 0 and e.q > 0 and e.first_run is not None:
            # promoted once it has waited promote_knob x what it ran since its first run in Q0
            t = e.first_run + (1.0 + self.promote_knob) * (e.job.run_time - e.base_run)
            heapq.heappush(self._promote, (max(t, now + 1e-3), e.job.index, e.job.job_id, e.token))

    def _promotable(self, item: tuple[float, int, str, int]) -> Entry | None:
        e = self.index.entries.get(item[2])
        return e if e is not None and e.token == item[3] and not e.running and e.q > 0 else None



def tiresias(
    thresholds: tuple[float, ...] = THRESHOLDS,
    promote_knob: float = 8.0,
    placement: str = "pack",
) -> Tiresias:
    """Tiresias 2D-LAS: queue `thresholds` in GPU-seconds, `promote_knob` (0 = no promotion)."""
    if placement not in PLACEMENTS:
        raise ConfigError(f"unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
    return Tiresias(tuple(thresholds), promote_knob, PLACEMENTS[placement])


def tiresias_ll(thresholds: tuple[float, ...] = THRESHOLDS, promote_knob: float = 8.0) -> Policy:
    """Tiresias ordering with DL2's least-loaded placement: a heterogeneity-blind baseline."""
    return Named(tiresias(thresholds, promote_knob, placement="least-loaded"), "tiresias-ll")
