"""The Dual-Agent-style placement agent as a Placement phase: machines picked one at a time by a
pointer network over the machines' predicted speeds (see `rl.dual_agent_net`).

It is a phase like any other (the realiser calls `place`), so it serves under the ordering agent
(`policies.dual_agent`) and under Tiresias' ordering (the placement-only single-agent baseline).
Each decision it is told what the snapshot shows (`observe`): the machine-speed estimate learns
from what running jobs' workers measured (the RW-OU GP, or nothing: every machine at its type's
profile speed), and the machines are encoded once for all of the decision's placements.

A job's workers go to the picked machine as far as they fit, then to the next pick among machines
of the same GPU type while one has room (a synchronous job runs at its slowest machine: mixing
types only slows it);
parameter servers go to the job's machines first, else wherever they fit.
"""

from __future__ import annotations

import numpy as np
import torch

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import Snapshot
from dlsched.framework.packing import ps_beside
from dlsched.policies.phases.speed_aware import SpeedAwarePlacement
from dlsched.models.dual_agent_features import (
    PRICE_WEIGHT, RISK, Affinity, global_features, machine_features, pick_features, teacher_pick, worker_room,
)
from dlsched.models.dual_agent_net import DualAgentNet
from dlsched.models.dual_agent_trajectory import Pick, Step, Trajectory

MODES = ("greedy", "sample", "teacher")


class AgentPlacement:
    """Placement phase (and Observer, Resets) driven by `net`'s placement head."""

    name = "placement-agent"

    def __init__(self, net: DualAgentNet, estimate=None, mode: str = "greedy", trajectory: Trajectory | None = None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.net, self.estimate, self.mode, self.trajectory = net, estimate, mode, trajectory
        # the teacher: the speed-aware placement planning with the same estimate (mean - RISK × sd);
        # it feeds and resets the estimate for both of them
        self.teacher = SpeedAwarePlacement("teacher", estimate, risk=RISK, price_weight=PRICE_WEIGHT)
        self.rng = np.random.default_rng(0)
        self.reset()

    def reset(self) -> None:
        self.teacher.reset()
        self.affinity = Affinity()
        self._cluster: Cluster | None = None
        self.messages: dict[str, tuple[int, torch.Tensor]] = {}  # job id -> (row, ordering agent's message)
        self.step: Step | None = None
        self._last = -1.0

    def seed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    # ------------------------------------------------------------------ once per decision
    def learn(self, snap: Snapshot) -> None:
        """The machine-speed estimate learns what the snapshot shows (and nothing is encoded: the
        ordering agent calls this alone when no job waits, so nothing is placed)."""
        self.teacher.observe(snap)

    def observe(self, snap: Snapshot) -> None:
        c = snap.cluster
        self.learn(snap)
        if self.estimate is not None:
            mean, sd = self.estimate.speeds(snap.now, c)
            self.mu, self.sd = np.log(mean), np.asarray(sd, dtype=float)
        else:
            self.mu, self.sd = np.zeros(c.num_nodes), np.zeros(c.num_nodes)
        if c is not self._cluster:
            self._cluster, self.types = c, np.array([str(t) for t in c.gpu_type.tolist()], dtype=object)
        self.snap = snap
        self.mfeat = machine_features(snap, self.mu, self.sd, np.asarray(snap.free))
        with torch.no_grad():
            self.menc, self.msg = self.net.machines(torch.from_numpy(self.mfeat))
        self.messages = {}
        if self.trajectory is not None:
            since = snap.now - self._last if self._last >= 0 else 0.0
            self.step = self.trajectory.begin(snap, self.mfeat, global_features(snap, self.mu, self.sd,
                                                                               np.asarray(snap.free), since))
        self._last = snap.now

    def _planned(self, spec: JobSpec) -> np.ndarray:
        """(N,) log of the job's planned relative speed on each machine: type affinity + the
        estimate's mean less RISK × its sd (as the teacher plans)."""
        return self.affinity.of(self.snap.profile, spec, self.snap.cluster) + self.mu - RISK * self.sd

    def predicted(self, spec: JobSpec, free: np.ndarray) -> tuple[float, float]:
        """The placement agent's word on a job for the ordering agent: the best relative speed a
        machine with room offers it now (type affinity × planned speed) and that machine's price share.

        When no machine has room, the word is the best machine of the cluster: the job waits for
        room, not for a better machine, and the order decides whether it gets room (the realiser
        preempts lower-ranked jobs for it). Read as speed 0 (as it was), the ordering teacher held
        every such job back as if only a slow machine were free, so no waiting job ever preempted:
        on ITP cluster03's first 200 rigid jobs on a homogeneous cluster (itp-small, and at load
        0.8) dual-agent's mean JCT was 5.69 and 11.05 h against DRF's 5.11 and 8.91; with this
        word 5.09 and 8.66 (docs/DECISIONS.md)."""
        score = self._planned(spec)
        ok = worker_room(free, spec, self.snap.cluster) > 0
        if not ok.any():
            ok = worker_room(self.snap.cluster.capacity, spec, self.snap.cluster) > 0
        if not ok.any():
            return 0.0, 0.0
        i = int(np.argmax(np.where(ok, score, -np.inf)))
        return float(np.exp(score[i])), float(self.mfeat[i, 4])

    def running_speed(self, spec: JobSpec, alloc: Allocation) -> tuple[float, float]:
        """The same for a running job on its own machines (its slowest one)."""
        score = self._planned(spec)
        nodes = list(alloc.nodes)
        return float(np.exp(score[nodes].min())), float(self.mfeat[nodes, 4].max())

    # ------------------------------------------------------------------ one job
    def place(self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int) -> Allocation | None:
        aff = self.affinity.of(self.snap.profile, spec, cluster)
        room = worker_room(free, spec, cluster)
        chosen = np.zeros(cluster.num_nodes, dtype=bool)
        row, msg = self.messages.get(spec.job_id, (-1, None))
        if msg is None:
            msg = torch.zeros(self.net.hidden)
        pick = Pick(row)
        have: dict[int, tuple[int, int]] = {}
        remaining, first = workers, None
        taught = self.teacher.place(cluster, free, spec, workers, ps)
        # the teacher's allocation as picks: its machines, most workers first
        lesson = [] if taught is None else [n for _, n in sorted(
            ((-w, n) for n, w in zip(taught.nodes, taught.workers) if w > 0))]
        if self.mode == "teacher" and taught is None:
            return None
        while remaining > 0:
            mask = (room > 0) & ~chosen & np.isfinite(aff)
            if first is not None and (mask & (self.types == first)).any():
                mask &= self.types == first  # mixing types only when this one has no room left
            if not mask.any():
                return None
            pf = pick_features(aff, room, remaining, chosen, first, self.types)
            i = len(pick.actions)
            if self.mode == "teacher":  # its allocation exactly, machine by machine
                teach = lesson[i]
                mask = mask.copy()
                mask[teach] = True
            elif i < len(lesson) and mask[lesson[i]]:
                teach = lesson[i]
            else:
                teach = teacher_pick(aff, self.mu, self.sd, room, remaining, mask)
            a = teach if self.mode == "teacher" else self._choose(pf, msg, mask, teach)
            pick.features.append(pf)
            pick.masks.append(mask)
            pick.actions.append(a)
            pick.teacher.append(teach)
            k = int(min(room[a], remaining))
            if self.mode == "teacher" and taught is not None:
                k = dict(zip(taught.nodes, taught.workers))[a]
            have[a] = (k, 0)
            remaining -= k
            chosen[a], first = True, self.types[a]
        if self.mode == "teacher" and taught is not None:
            alloc = taught
        elif ps > 0:  # PSs beside the workers, the shared rule
            w_all = np.zeros(cluster.num_nodes, dtype=np.int64)
            w_all[list(have)] = [w for w, _ in have.values()]
            p_all = ps_beside(free, spec, w_all, list(have), ps)
            if p_all is None:
                return None
            alloc = Allocation.from_counts(w_all, p_all)
        else:
            alloc = Allocation.of(have)
        profile = self.snap.profile
        if profile is not None and profile.supports(spec) and not profile.rate(spec, alloc, cluster) > 0:
            return None  # the profile says it would make no progress there: it waits
        if self.mode != "teacher" and self.teacher.too_slow(cluster, spec, alloc):
            return None  # the teacher's consolidation patience: it waits for room to place it well
        if self.step is not None:
            self.step.picks[spec.job_id] = pick
            self.step.acted = True
        return alloc

    def _choose(self, pf: np.ndarray, msg: torch.Tensor, mask: np.ndarray, teach: int) -> int:
        with torch.no_grad():
            logits = self.net.pick_logits(torch.from_numpy(pf), torch.from_numpy(self.mfeat), self.menc, msg,
                                          torch.from_numpy(mask), teach)
        if self.mode == "greedy":
            return int(torch.argmax(logits))
        p = torch.softmax(logits, 0).numpy().astype(float)
        return int(self.rng.choice(len(p), p=p / p.sum()))
