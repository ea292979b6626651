"""The QoS-oriented scheduling and autoscaling framework (Xing et al., IJCNN 2019), composed.

Users give a deadline, not a size. Each call runs the phases

    DeadlineFeasibility → EarliestDeadline → Autoscaler → placement (least-loaded node)

- admission rejects (or, with `infeasible="deprioritise"`, keeps behind the others) a job that
  cannot meet its deadline even at its maximum size, with the reason;
- ordering is earliest deadline first among the jobs that can still make it;
- sizing starts deadline-only jobs at a predicted size and grows running jobs predicted to miss
  (restart-based, the n_new rule, vertical PS scaling);
- placement binds tasks to the least-loaded nodes (the prototype's "lowest CPU use" node choice;
  in the simulator use equals allocation).

It is not preemptive (the prototype modifies kube-scheduler, which does not evict running jobs):
running jobs keep their nodes, and a job's resize competes for free resources in deadline order
with the jobs waiting to start. Everything the policy reads is observable in a live system
(progress, measured rate, elapsed time, declared work, the deadline); it is not an oracle.

The same phases build the comparison policies of `dlsched experiment qos`: `edf` (no autoscaler)
and `kube_autoscale` (arrival order and kube-scheduler's spreading with the autoscaler), which
isolates what the deadline-aware scheduling adds over the default scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.errors import ConfigError
from dlsched.core.plan import Plan
from dlsched.core.policy import Admission, Ordering, Placement, Policy, take
from dlsched.core.snapshot import JobState, JobStatus, Snapshot
from dlsched.estimators.completion_predictor import DEFAULT_MIN_STEPS, CompletionPredictor
from dlsched.policies.phases.admission import AdmitAll
from dlsched.policies.phases.autoscale import Autoscaler
from dlsched.policies.phases.deadline import MODES, DeadlineFeasibility, EarliestDeadline, EarliestFinish, ps_for_workers
from dlsched.policies.phases.ordering import ByArrival
from dlsched.policies.phases.placement import PLACEMENTS


def realise(
    snap: Snapshot, sized: list[tuple[JobState, int, int]], placement: Placement
) -> dict[str, Allocation]:
    """Turn (job, workers, ps) in priority order into allocations, without preempting anyone.

    Running jobs keep their allocation unless resized; a resize is placed in what is free plus
    the job's own resources, and shrinks to the largest size above the current one that fits
    (or is dropped). A waiting job that does not fit at its size starts at the largest size down
    to its minimum that fits (it can grow later), else waits; later jobs may still start (backfill).
    Never exceeds what is free: every placement is made within the free array it then updates.
    """
    free = np.array(snap.free, dtype=float)
    plans = {j.job_id: j.allocation for j in snap.running}
    for job, w, ps in sized:
        spec = job.spec
        if job.status is JobStatus.RUNNING:
            if w <= job.num_workers:
                continue
            own = job.allocation.usage(np.asarray(spec.worker_demand), np.asarray(spec.ps_demand))
            room = free.copy()
            np.add.at(room, list(job.allocation.nodes), own)
            for ww in range(w, job.num_workers, -1):
                alloc = placement.place(snap.cluster, room, spec, ww, ps if ww == w else ps_for_workers(spec, ww))
                if alloc is not None:
                    free = room
                    take(free, alloc, spec)
                    plans[job.job_id] = alloc
                    break
            continue
        for ww in range(w, spec.min_workers - 1, -1):
            alloc = placement.place(snap.cluster, free, spec, ww, ps if ww == w else ps_for_workers(spec, ww))
            if alloc is not None:
                take(free, alloc, spec)
                plans[job.job_id] = alloc
                break
    return plans


@dataclass(eq=False)
class QoSPolicy(Policy):
    """admission → ordering → sizing → `realise` (see the module docstring)."""

    finish: EarliestFinish
    admission: Admission
    ordering: Ordering
    sizing: Autoscaler | None
    placement: Placement
    name: str = "qos"
    interval: float | None = 60.0
    on_events: bool = True
    oracle: bool = False
    rejected_log: dict[str, str] = field(default_factory=dict)

    def reset(self, cluster, seed: int) -> None:
        predictor = CompletionPredictor(self.finish.predictor.default_min_steps, self.finish.predictor.theta)
        self.finish.predictor = predictor
        self.finish.speeds = type(self.finish.speeds)()
        if self.sizing is not None:
            self.sizing.predictions.clear()
            self.sizing.last_reason.clear()
        self.rejected_log = {}

    def schedule(self, snap: Snapshot) -> Plan:
        self.finish.observe(snap)
        admitted, rejected = self.admission.admit(snap, snap.running + snap.pending)
        ordered = self.ordering.order(snap, admitted)
        if self.sizing is not None:
            sized = self.sizing.size(snap, ordered)
        else:
            sized = [(j, j.num_workers, j.num_ps) if j.status is JobStatus.RUNNING
                     else (j, j.spec.num_workers, j.spec.num_ps) for j in ordered]
        plan = Plan(allocations=realise(snap, sized, self.placement), rejected=dict(rejected))
        self.rejected_log.update(rejected)
        plan.wake_at = self._next_prediction_point(snap)
        return plan

    def _next_prediction_point(self, snap: Snapshot) -> float | None:
        """When the next running job reaches its prediction point, so the autoscaler acts then
        and not up to `interval` later (a live controller would watch the step counter)."""
        if self.sizing is None:
            return None
        pred = self.finish.predictor
        times = []
        for j in snap.running:
            if j.rate > 0 and not pred.ready(j, snap.now):
                steps = float(j.spec.extra.get("min_predict_steps", pred.default_min_steps))
                times.append(j.resume_at + steps / j.rate + 1e-6)
        later = [t for t in times if t > snap.now]
        return min(later) if later else None


def _placement(name: str) -> Placement:
    if name not in PLACEMENTS:
        raise ConfigError(f"unknown placement {name!r}; known: {', '.join(PLACEMENTS)}")
    return PLACEMENTS[name]


def qos(
    infeasible: str = "reject",
    autoscale: bool = True,
    initial: str = "predict",
    c: float = 1.0,
    min_predict_steps: int = DEFAULT_MIN_STEPS,
    theta: float = 1.0,
    placement: str = "least-loaded",
    interval: float | None = 60.0,
) -> QoSPolicy:
    """The QoS deadline framework: EDF with deadline feasibility, autoscaling, least-loaded nodes.

    `infeasible`: "reject" a job whose deadline cannot be met even at max size, or "deprioritise"
    it. `autoscale=False` keeps jobs at their default size (the scheduling part alone).
    `initial`: "predict" sizes deadline-only jobs at start, "default" starts them at 1 worker.
    `c`: the scaling rule's calibration (a job's extra["scale_c"] wins). `min_predict_steps`:
    warm-up before a job is predicted (a job's extra["min_predict_steps"] wins). `theta`: the
    prototype's per-step-time divisor. `interval`: seconds between re-predictions.
    """
    if infeasible not in MODES:
        raise ConfigError(f"qos: infeasible must be one of {', '.join(MODES)}, got {infeasible!r}")
    if interval is not None and not interval > 0:
        raise ConfigError(f"qos: interval must be > 0 seconds, got {interval}")
    if min_predict_steps < 1:
        raise ConfigError(f"qos: min_predict_steps must be >= 1, got {min_predict_steps}")
    if not theta > 0:
        raise ConfigError(f"qos: theta must be > 0, got {theta}")
    finish = EarliestFinish(CompletionPredictor(min_predict_steps, theta))
    admission = DeadlineFeasibility(finish, mode=infeasible)
    # without autoscaling the sizing phase still predicts (for the error report) but never grows
    sizing = Autoscaler(finish, c=c, initial=initial if autoscale else "default", scale=autoscale)
    return QoSPolicy(
        finish=finish, admission=admission, ordering=EarliestDeadline(late=lambda: admission.late),
        sizing=sizing, placement=_placement(placement), name="qos" if autoscale else "qos-noscale",
        interval=interval,
    )


def kube_autoscale(c: float = 1.0, min_predict_steps: int = DEFAULT_MIN_STEPS, interval: float | None = 60.0) -> QoSPolicy:
    """The autoscaler on top of default-Kubernetes-like scheduling: arrival order, no deadline
    check, tasks spread on the least-allocated nodes (gang start, unlike `kube-default`)."""
    finish = EarliestFinish(CompletionPredictor(min_predict_steps))
    return QoSPolicy(
        finish=finish, admission=AdmitAll(), ordering=ByArrival(),
        sizing=Autoscaler(finish, c=c, initial="default"), placement=_placement("spread"),
        name="kube+autoscale", interval=interval,
    )
