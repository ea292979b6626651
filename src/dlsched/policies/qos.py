"""The QoS-oriented scheduling and autoscaling framework (Xing et al., IJCNN 2019), composed.

Users give a deadline, not a size. Each call runs the phases

    DeadlineFeasibility → EarliestDeadline → Autoscaler → placement (packed)

- admission rejects (or, with `infeasible="deprioritise"`, keeps behind the others) a job that
  cannot meet its deadline even at its maximum size, with the reason — only before it first
  starts, when the answer costs nothing spent and the user can still act on it; a job that has
  run is deprioritised, never thrown away with its progress;
- ordering is earliest deadline first among the jobs that can still make it, then jobs without
  a deadline (arrival order), then late jobs, shortest predicted remaining time first (ours:
  their deadlines are lost whatever the order; `late_order="deadline"` keeps EDF there);
- sizing starts deadline-only jobs at a predicted size, grows running jobs predicted to miss to
  the smallest size predicted to meet the deadline (restart-based, the n_new rule, vertical PS
  scaling; not at all when no size would);
- placement packs a job on the fewest nodes (best fit). The prototype put each pod on the node
  of lowest CPU use, which on its CPU cluster balanced load; a data-parallel GPU job spread pod by
  pod over nodes pays a cross-node all-reduce every step (on ElasticFlow's measured curves, bert
  grown from 1 to 2 GPUs over two racks ran slower than on 1). `placement="least-loaded"` keeps
  the prototype's choice.

Preemptive by default (`preempt="minimal"`): a job that does not fit in what is free may stop
running jobs ranked below it in that order, lowest first — late jobs before any job that can still
make it — and they resume later from their checkpoint. The prototype modifies kube-scheduler,
which does not evict (`preempt="none"`: running jobs keep their nodes, only grow in place); on
ITP's bursts that left jobs that could still make their deadline queued for hours behind jobs that
could not, and the deadline-blind preemptive baselines (DRF, Optimus) met far more deadlines
(docs/QOS.md). Everything the policy reads is observable in a live system (progress, measured rate,
elapsed time, declared work, the deadline); it is not an oracle.

It is a `PhasedPolicy` configuration (with `resize`: running jobs go through the phases and may
grow), asked on events and every `interval` seconds.

The same phases build the comparison policies of `dlsched experiment qos`: `edf` (no autoscaler)
and `kube_autoscale` (arrival order and kube-scheduler's spreading with the autoscaler), which
isolates what the deadline-aware scheduling adds over the default scheduler.
"""

from __future__ import annotations

from operator import attrgetter

from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.errors import ConfigError
from dlsched.core.plan import Plan
from dlsched.core.policy import Admission, Every, Ordering, Policy, Wrapper
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.policies.phased import PhasedPolicy
from dlsched.estimators.completion_predictor import DEFAULT_MIN_STEPS, CompletionPredictor
from dlsched.policies.phases.autoscale import WAKE_AFTER, Autoscaler, ps_steps_shrink
from dlsched.policies.phases.deadline import (
    MODES, DeadlineFeasibility, DeadlineJobs, EarliestDeadline, EarliestFinish, JobsWith,
)
from dlsched.policies.phases.ordering import ByArrival
from dlsched.policies.phases.placement import PLACEMENTS
from dlsched.policies.phases.realise import ShrinkRule
from dlsched.policies.phases.sizing import ps_for, requested_workers


_VERSION, _RATE = attrgetter("version"), attrgetter("rate")
#: How `qos` orders jobs that can no longer make their deadline (`late_order`).
LATE_ORDERS = ("shortest", "deadline")


class QuietTicks(Wrapper):
    """Answers a tick that cannot change the plan without running the phases.

    Why: the policy is asked every `interval` seconds, and on a trace without deadlines (Philly)
    nearly every tick finds nothing changed; running the phases over every job then costs the
    whole run. A tick is quiet when no job in the system has a deadline (so admission, EDF order
    and the autoscaler's decisions do not depend on the clock), nothing arrived, left or stopped,
    the running jobs are the same with the same versions and rates as at the last full call (the
    last plan changed nothing: a start or resize bumps a version), and no running job has reached
    its prediction point since (the last plan's `wake_at` is that point plus `WAKE_AFTER`). The
    phases would then place nothing new (what did not fit then cannot fit in no more room now),
    so the answer is that call's: keep everything running, same wake-up.
    """

    def __init__(self, inner: Policy, deadlines: DeadlineJobs):
        super().__init__(inner)
        # the phases' own tracker, kept up to date by them on every full call (a quiet tick has
        # no deltas for it to miss)
        self._deadlines = deadlines
        self._last: tuple | None = None  # running fingerprint and wake_at of the last full call

    def reset(self, cluster: Cluster, seed: int) -> None:
        self._last = None
        super().reset(cluster, seed)

    def schedule(self, snap: Snapshot) -> Plan:
        running = snap.running
        mark = (len(running), sum(map(_VERSION, running)), sum(map(_RATE, running)))
        last = self._last
        if (last is not None and last[0] == mark and snap.events == ("tick",) and self._deadlines.none()
                and not (snap.arrived or snap.finished or snap.stopped)):
            wake = last[1]
            if wake is None or snap.now + 2 * WAKE_AFTER < wake:  # no job has reached its point
                return Plan(keep_running=True, wake_at=wake)
        plan = self.inner.schedule(snap)
        self._last = (mark, plan.wake_at)
        return plan


class AsRequested:
    """The autoscaler seen job by job, while no job in the system has a deadline and none could
    start smaller than it asked: a waiting job's size is its requested one (`Autoscaler.size`,
    cached per job), a running job keeps its size; the autoscaler still observes every call,
    records each run's prediction at its prediction point and sets the wake-up."""

    def __init__(self, autoscaler: Autoscaler):
        self.autoscaler = autoscaler

    def observe(self, snap: Snapshot) -> None:
        self.autoscaler.observe(snap)
        self.autoscaler.record_ready(snap)

    def size_one(self, snap: Snapshot, job: JobState) -> tuple[int, int]:
        (_, w, ps), = self.autoscaler.size(snap, [job])
        return w, ps

    def wake_at(self, snap: Snapshot) -> float | None:
        return self.autoscaler.wake_at(snap)


class PlainLine(Wrapper):
    """While no job in the system has a deadline and none could start smaller than it asked, the
    phases are a plain waiting line: admission admits everyone, EDF is arrival order (and so is
    `kube_autoscale`'s), the autoscaler keeps every size (a waiting job's requested size, a running
    job's own), and the shrink rule offers nothing. That is `PhasedPolicy`'s incremental case, so
    such a call takes it (`line`, a `PhasedPolicy` over `AsRequested`): a waiting line kept across
    calls and walked only for sizes that fit, instead of sorting, sizing and offering every job
    on every call (on Philly, no deadlines and rigid jobs, that was the whole run). Any other call
    runs the phases (`inner`), and the line is rebuilt from the snapshot when next taken.
    """

    def __init__(self, inner: PhasedPolicy, autoscaler: Autoscaler):
        super().__init__(inner)
        self.line = PhasedPolicy(
            admission=None, ordering=ByArrival(), sizing=AsRequested(autoscaler), placement=inner.placement,
            name=inner.name, preempt=inner.preempt, backfill=inner.backfill,
        )
        shrink = inner.shrink
        # jobs that keep the phases from being a plain line: a deadline, or a smaller size to try
        self._odd = JobsWith(lambda spec: spec.deadline is not None or _can_shrink(spec, shrink))

    def reset(self, cluster: Cluster, seed: int) -> None:
        self._odd.reset()
        self.line.reset(cluster, seed)
        super().reset(cluster, seed)

    def schedule(self, snap: Snapshot) -> Plan:
        self._odd.observe(snap)
        if self._odd.none():
            return self.line.schedule(snap)
        self.line.forget()  # its book does not follow the phases' plans
        return self.inner.schedule(snap)


def _can_shrink(spec: JobSpec, shrink: ShrinkRule) -> bool:
    """Could the realiser offer the job smaller than its requested size? (its size without a deadline)"""
    w = requested_workers(spec)
    return next(iter(shrink(spec, w, ps_for(spec, w))), None) is not None


def _compose(admission: Admission | None, ordering: Ordering, sizing: Autoscaler, placement: str, name: str,
             interval: float | None, preempt: str = "none") -> Policy:
    """admission → ordering → autoscaler → realise, running jobs growing (in place with "none");
    a plain line while nothing needs the phases (`PlainLine`), quiet ticks answered at once."""
    if placement not in PLACEMENTS:
        raise ConfigError(f"unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
    pol = PlainLine(PhasedPolicy(
        admission=admission, ordering=ordering, sizing=sizing, placement=PLACEMENTS[placement], name=name,
        preempt=preempt, resize=True, backfill=True, shrink=ps_steps_shrink,
    ), sizing)
    return Every(QuietTicks(pol, sizing.finish.deadlines), interval) if interval is not None else pol


def qos(
    infeasible: str = "reject",
    autoscale: bool = True,
    initial: str = "predict",
    c: float = 1.0,
    min_predict_steps: int = DEFAULT_MIN_STEPS,
    theta: float = 1.0,
    placement: str = "pack",
    interval: float | None = 60.0,
    preempt: str = "minimal",
    late_order: str = "shortest",
) -> Policy:
    """The QoS deadline framework: EDF with deadline feasibility, autoscaling, packed placement.

    `infeasible`: "reject" a job whose deadline cannot be met even at max size, or "deprioritise"
    it. `autoscale=False` keeps jobs at their default size (the scheduling part alone).
    `initial`: "predict" sizes deadline-only jobs at start, "default" starts them at 1 worker.
    `c`: the scaling rule's calibration (a job's extra["scale_c"] wins). `min_predict_steps`:
    warm-up before a job is predicted (a job's extra["min_predict_steps"] wins). `theta`: the
    prototype's per-step-time divisor. `interval`: seconds between re-predictions. `placement`:
    a placement phase's name. `preempt`: "minimal" (lower-ranked running jobs may be stopped for a
    job that does not fit) or "none" (the prototype: never). `late_order`: jobs that can no longer
    make their deadline go "shortest" predicted remaining time first (ours) or by "deadline"
    (EDF, as before; docs/QOS.md).
    """
    if infeasible not in MODES:
        raise ConfigError(f"qos: infeasible must be one of {', '.join(MODES)}, got {infeasible!r}")
    if interval is not None and not interval > 0:
        raise ConfigError(f"qos: interval must be > 0 seconds, got {interval}")
    if preempt not in ("minimal", "none"):
        raise ConfigError(f"qos: preempt must be 'minimal' or 'none', got {preempt!r}")
    if late_order not in LATE_ORDERS:
        raise ConfigError(f"qos: late_order must be one of {', '.join(LATE_ORDERS)}, got {late_order!r}")
    if min_predict_steps < 1:
        raise ConfigError(f"qos: min_predict_steps must be >= 1, got {min_predict_steps}")
    if not theta > 0:
        raise ConfigError(f"qos: theta must be > 0, got {theta}")
    finish = EarliestFinish(CompletionPredictor(min_predict_steps, theta))
    admission = DeadlineFeasibility(finish, mode=infeasible)
    # without autoscaling the sizing phase still predicts (for the error report) but never grows
    sizing = Autoscaler(finish, c=c, initial=initial if autoscale else "default", scale=autoscale)
    ordering = EarliestDeadline(late=lambda: admission.late, deadlines=finish.deadlines,
                                finish=finish if late_order == "shortest" else None)
    return _compose(admission, ordering, sizing, placement,
                    "qos" if autoscale else "qos-noscale", interval, preempt)


def kube_autoscale(c: float = 1.0, min_predict_steps: int = DEFAULT_MIN_STEPS, interval: float | None = 60.0) -> Policy:
    """The autoscaler on top of default-Kubernetes-like scheduling: arrival order, no deadline
    check, tasks spread on the least-allocated nodes (gang start, unlike `kube-default`)."""
    finish = EarliestFinish(CompletionPredictor(min_predict_steps))
    return _compose(None, ByArrival(), Autoscaler(finish, c=c, initial="default"), "spread",
                    "kube+autoscale", interval)
