"""Dual-Agent-style scheduling (after Xing et al., KDD 2023: "A Dual-Agent Scheduler for
Distributed Deep Learning Jobs on Public Cloud via Reinforcement Learning"). Only the paper's
abstract is public; this is our design from it (docs/DUAL_AGENT.md says which choices are ours),
never a reproduction of its numbers.

Two cooperating agents decide at every arrival, completion and machine-speed change, and every
6 minutes:
- the ordering agent (`rl.dual_agent_net`, SC-pool) scores every job in the system — running and
  waiting — from what it has received (attained GPU-seconds, waiting and run time, GPUs asked),
  the squeezed context of all jobs and the placement agent's message (its machine encodings, and
  per job the speed and price of the best machine it could get now);
- the placement agent (`phases.agent_placement`) places each job, in that order, on machines it
  picks from the RW-OU GP's estimate of every machine's speed and its uncertainty
  (`estimators.rwgp`), told the ordering agent's message for the job.
The ordering agent's score is its teacher's plus a learned correction (a residual actor,
docs/DUAL_AGENT.md). On a cluster of one GPU type the teacher ranks jobs by their estimated
remaining time (ours: `phases.length_rank`, Optimus' loss-curve and speed estimates; on ITP's 3,011
rigid jobs attained service left dual-agent 1.6-1.9x Optimus' mean JCT); on several types it keeps
Tiresias' attained service, the teacher the models were trained with: the estimate divides by
Optimus' speed model, which pools a job type's measured speeds over GPU types, and on the
heterogeneous held-out scenarios it cost the two heaviest windows up to 15% JCT and 37% fee
(docs/DECISIONS.md). `lengths=True`/`False` forces either teacher.
The shared realiser turns the order into allocations with minimal preemption (a running job stops
only when that lets a higher-ranked one start). A rigid job runs at its requested size. Elastic
jobs (ours: the paper's agents order and place, they do not size) are sized by `AdmitThenShare`:
the order admits jobs at their minimum gang while the cluster holds them, and what the admitted
jobs leave is shared among the elastic ones by dominant-resource progressive filling, as DRF
shares it (on a cluster with prices never past a job's requested size: its user pays for every
GPU-hour); `elastic=False` runs them at their requested size instead. A
waiting job the ordering agent scores below 0 is not offered: it waits for a better machine (the
placement agent's message says how good a machine it would get now), for at most MAX_WAIT_S, and
only while something runs (an idle cluster has no better machine to wait for).

Variants (`VARIANTS`, each its own trained model): the full policy, the ablations (no
communication; no GP: every machine at its type's profile speed; no fluctuation-awareness: a static
GP), and the single-agent baselines (ordering only, over Gavel-style placement; placement only,
under Tiresias' ordering).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dlsched.core.cluster import GPU, Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.plan import Plan
from dlsched.core.policy import Named, Observer, Policy, Resets
from dlsched.core.snapshot import Snapshot
from dlsched.estimators.rwgp import RWOUGP
from dlsched.policies.phases.agent_placement import AgentPlacement
from dlsched.policies.phases.length_rank import LengthRank
from dlsched.policies.phases.realise import realise
from dlsched.policies.phases.scaling import room_at_minimum
from dlsched.policies.phases.sizing import AdmitThenShare
from dlsched.policies.phases.speed_aware import SpeedAwarePlacement
from dlsched.policies.tiresias import THRESHOLDS, Tiresias
from dlsched.models.dual_agent_features import MAX_WAIT_S, global_features, job_features, machine_features, teacher_scores
from dlsched.models.dual_agent_net import DualAgentNet
from dlsched.models.model_io import load_model, save_model
from dlsched.models.dual_agent_trajectory import Trajectory

_DATA = Path(__file__).resolve().parent.parent / "data"
#: variant -> (shipped model file, what it is)
VARIANTS: dict[str, str] = {
    "full": "ordering agent + placement agent with the RW-OU GP, communicating",
    "no-comm": "ablation: the agents send no messages",
    "no-gp": "ablation: no machine-speed model (every machine at its GPU type's profile speed)",
    "static-gp": "ablation: no fluctuation-awareness (the GP without its time-varying part)",
    "ordering-only": "single agent: learned ordering over Gavel-style placement",
    "placement-only": "single agent: learned placement under Tiresias' ordering",
}
DECISION_INTERVAL = 360.0


def model_path(variant: str) -> Path:
    return _DATA / f"dual_agent_{variant.replace('-', '_')}.pt"


def estimate_for(variant: str) -> RWOUGP | None:
    """The machine-speed model each variant's placement agent uses."""
    if variant == "no-gp":
        return None
    return RWOUGP(fluctuating=variant != "static-gp")


class DualAgent(Policy):
    """The ordering agent over a placement phase (the placement agent, or a heuristic)."""

    on_events = True
    interval = DECISION_INTERVAL

    def __init__(self, net: DualAgentNet, placement, mode: str = "greedy", trajectory: Trajectory | None = None,
                 name: str = "dual-agent", notes: list[str] | None = None, elastic: bool = True,
                 lengths: bool | None = None):
        self.net, self.placement, self.mode, self.trajectory = net, placement, mode, trajectory
        self.lengths = lengths
        self._lengths: LengthRank | None = None  # set by `reset`, for its cluster
        self.name, self.notes = name, list(notes or [])
        self.sizing = AdmitThenShare() if elastic else None
        self._billed: AdmitThenShare | None = AdmitThenShare(beyond_requested=False) if elastic else None
        self.rng = np.random.default_rng(0)
        self._last = -1.0

    def reset(self, cluster: Cluster, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self._last = -1.0
        ranked = self.lengths if self.lengths is not None else len(cluster.gpu_types) <= 1
        self._lengths = LengthRank() if ranked else None
        if isinstance(self.placement, Resets):
            self.placement.reset()
        if isinstance(self.placement, AgentPlacement):
            self.placement.seed(seed + 1)

    def schedule(self, snap: Snapshot) -> Plan:
        agent = self.placement if isinstance(self.placement, AgentPlacement) else None
        # Nothing waits: the order only says which running job stops for a waiting one, and the
        # minimal-preemption realiser keeps every running (rigid) job where it is. Only the
        # machine-speed estimate learns, as on every call, so every later decision is the one it
        # would have been. (On the Alibaba 2023 pods, weeks-long runs on a roomy cluster, such
        # calls were nearly all of them, and each encoded all 1,213 machines.)
        # (With elastic sizing, a running job below its maximum can still grow into free GPUs.)
        idle = not snap.pending and self.trajectory is None and self.mode != "sample" and not self._can_grow(snap)
        if idle and agent is not None:
            agent.learn(snap)
        elif isinstance(self.placement, Observer):
            self.placement.observe(snap)
        if idle:
            return Plan(keep_running=True)
        jobs = [*snap.running, *snap.pending]
        if not jobs:
            return Plan()
        step = agent.step if agent is not None else self._begin(snap)
        speed, price = np.zeros(len(jobs)), np.zeros(len(jobs))
        sharing = self.sizing is not None and any(j.spec.elastic for j in jobs)
        if agent is not None:
            # with elastic sizing, workers lent to elastic jobs beyond their minimum are room a
            # waiting job can be given: counted, or a newcomer would only ever see a full cluster
            free = room_at_minimum(snap.running, snap.free) if sharing else np.asarray(snap.free)
            for i, j in enumerate(jobs):
                speed[i], price[i] = (agent.running_speed(j.spec, j.allocation) if j.allocation is not None
                                      else agent.predicted(j.spec, free))
        heard = self.net.communicate and agent is not None
        jfeat = job_features(snap, jobs, speed if heard else 0 * speed, price if heard else 0 * price)
        # the teacher waits for better machines only on the placement agent's word
        # and, with length estimates, orders by estimated remaining time instead of attained service
        length = self._lengths.ranks(snap, jobs) if self._lengths is not None else None
        teacher = teacher_scores(jobs, speed if heard else None, length)
        with torch.no_grad():
            msg = agent.msg if agent is not None else torch.zeros(2 * self.net.hidden)
            scores, hid, _ = self.net.order(torch.from_numpy(jfeat), msg, torch.from_numpy(teacher).float())
        scores = scores.numpy()
        if self.mode == "teacher":
            action = teacher
        elif self.mode == "sample":
            action = scores + float(self.net.log_std.detach().exp()) * self.rng.standard_normal(len(jobs))
        else:
            action = scores
        # a waiting job scored below 0 is held back this decision, for at most MAX_WAIT_S in all
        ranked = np.argsort(-action, kind="stable")
        order = [i for i in ranked if action[i] >= 0 or jobs[i].allocation is not None or jobs[i].waited >= MAX_WAIT_S]
        if not order:  # with nothing running, waiting for a better machine waits for nothing: start the best
            order = list(ranked)
        if agent is not None:
            agent.messages = {jobs[i].job_id: (int(i), hid[i]) for i in range(len(jobs))}
        ranked_jobs = [jobs[i] for i in order]
        if sharing:
            # a job that does not fit the nodes at its share shrinks toward its minimum
            allocations = realise(snap, self._sizing(snap).size(snap, ranked_jobs), self.placement,
                                  preempt="minimal", shrink=True)
        else:
            allocations = realise(snap, ((j, j.spec.num_workers, j.spec.num_ps) for j in ranked_jobs),
                                  self.placement, preempt="minimal")
        if self._lengths is not None:
            self._lengths.moved(jobs, allocations)
        if step is not None:
            step.jobs, step.order_action, step.order_teacher = jfeat, action, teacher
            step.picks = {k: v for k, v in step.picks.items() if k in allocations}  # placements that stood
            step.acted = bool(step.picks) or any(
                (j.allocation is None) == (j.job_id in allocations) for j in jobs)  # a start or a stop
        return Plan(allocations=allocations)

    def _can_grow(self, snap: Snapshot) -> bool:
        """Whether elastic sizing could give a running job more now: one is below the size the
        sizing may grow it to (`AdmitThenShare.top`) and some GPU is free."""
        if self.sizing is None or not snap.running or float(np.asarray(snap.free)[:, GPU].sum()) < 1.0 - 1e-9:
            return False
        sizing = self._sizing(snap)
        return any(j.num_workers < sizing.top(j.spec) for j in snap.running)

    def _sizing(self, snap: Snapshot) -> AdmitThenShare:
        """Elastic sizing for this cluster: on one with prices a job never grows past its requested
        size (its user pays for every GPU-hour; on Alibaba's pods growing into idle GPUs cut the mean
        JCT by a fifth for 8.6x the fee), elsewhere idle GPUs are shared out."""
        return self._billed if snap.cluster.price is not None else self.sizing

    def _begin(self, snap: Snapshot):
        """The trajectory's step of this decision when no placement agent opened it (ordering only)."""
        if self.trajectory is None:
            return None
        c = snap.cluster
        zeros = np.zeros(c.num_nodes)
        free = np.asarray(snap.free)
        since = snap.now - self._last if self._last >= 0 else 0.0
        self._last = snap.now
        return self.trajectory.begin(snap, machine_features(snap, zeros, zeros, free),
                                     global_features(snap, zeros, zeros, free, since))


def load(path: Path) -> tuple[DualAgentNet, dict]:
    """The network saved at `path` and its meta (variant, training record)."""
    return load_model(path, DualAgentNet, "a Dual-Agent-style model")


def save(net: DualAgentNet, path: Path, meta: dict) -> None:
    save_model(net, path, meta)


def build(variant: str, net: DualAgentNet, mode: str = "greedy", trajectory: Trajectory | None = None,
          name: str | None = None, elastic: bool = True, lengths: bool | None = None) -> Policy:
    """The policy of a variant around `net` (trained or being trained); `elastic`: elastic jobs
    sized by `AdmitThenShare` (False: at their requested size, as rigid ones); `lengths`: the
    ordering teacher ranks by estimated remaining time (`phases.length_rank`; False: Tiresias'
    attained service, as the models were trained; None: on a cluster of one GPU type only)."""
    if variant not in VARIANTS:
        raise ConfigError(f"unknown dual-agent variant {variant!r}; known: {', '.join(VARIANTS)}")
    label = name or ("dual-agent" if variant == "full" else f"dual-agent-{variant}")
    if variant == "ordering-only":
        return DualAgent(net, SpeedAwarePlacement("gavel-style"), mode, trajectory, label, elastic=elastic,
                         lengths=lengths)
    placement = AgentPlacement(net, estimate_for(variant), mode, trajectory)
    if variant == "placement-only":  # Tiresias' own ordering over the placement agent
        return Named(Tiresias(THRESHOLDS, 8.0, placement), label)
    return DualAgent(net, placement, mode, trajectory, label, elastic=elastic, lengths=lengths)


def trained(variant: str = "full", model: str | None = None, name: str | None = None, elastic: bool = True,
            lengths: bool | None = None) -> Policy:
    """A trained variant (`VARIANTS`): the shipped model, or `model` (a file written by
    `dlsched train dual-agent`), named `name` (default: dual-agent, or dual-agent-<variant>)."""
    if variant not in VARIANTS:
        raise ConfigError(f"unknown dual-agent variant {variant!r}; known: {', '.join(VARIANTS)}")
    path = Path(model) if model else model_path(variant)
    try:
        net, meta = load(path)
    except FileNotFoundError:
        raise ConfigError(f"no Dual-Agent-style model at {path}: train one with `dlsched train dual-agent`") from None
    if meta.get("variant", variant) != variant:
        raise ConfigError(f"{path} was trained as variant {meta.get('variant')!r}, not {variant!r}")
    policy = build(variant, net, name=name, elastic=elastic, lengths=lengths)
    minutes = meta.get("training_seconds", 0.0) / 60.0
    note = (f"{policy.name}: model {path.name} (variant {variant}, trained {minutes:.1f} min on heterogeneous, "
            "fluctuating Gavel-matrix scenarios); machine speeds are learned from what jobs' workers measure")
    if isinstance(policy, DualAgent):
        policy.notes.append(note)
    return policy


def dual_agent(variant: str = "full", model: str | None = None, elastic: bool = True,
               lengths: bool | None = None) -> Policy:
    """Dual-Agent-style scheduling: `variant` one of VARIANTS (full; the ablations no-comm, no-gp,
    static-gp; the single agents ordering-only, placement-only); `model` a file written by
    `dlsched train dual-agent` (default: the shipped model of the variant); `elastic`: elastic
    jobs get a fair share of what the learned order admits (False: their requested size);
    `lengths`: the ordering teacher ranks jobs by their estimated remaining time (False: by
    attained service, Tiresias' order; None, the default: on a cluster of one GPU type only)."""
    return trained(variant, model, elastic=elastic, lengths=lengths)
