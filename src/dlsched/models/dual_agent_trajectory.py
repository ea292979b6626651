"""One episode of the Dual-Agent-style agents, as the training needs it: per decision what each
agent saw, what it did, what its teacher would have done, and the team's reward.

The shared reward (MAPPO: one reward for both agents) of the interval between decision k and
k+1 is  −(t_{k+1} − t_k) · N_k / 3600 − fee_weight · (fees accrued in it),  N_k the jobs in the
system after decision k (it is constant in between: every arrival and completion is a decision),
so an episode's return is −(total JCT in hours) − fee_weight · (total fee in USD): Decima's reward
with the fee added, as the Dual-Agent abstract's two objectives ask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dlsched.core.snapshot import Snapshot


@dataclass
class Pick:
    """One placement: the machines picked one after another for one job."""

    job_pos: int  # the job's row in its step's job features (-1: no ordering agent)
    features: list[np.ndarray] = field(default_factory=list)  # (N, PICK_FEATURES) per pick
    masks: list[np.ndarray] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    teacher: list[int] = field(default_factory=list)


@dataclass
class Step:
    t: float
    machines: np.ndarray  # (N, MACHINE_FEATURES)
    glob: np.ndarray  # (GLOBAL_FEATURES,)
    jobs: np.ndarray | None = None  # (J, JOB_FEATURES), None without an ordering agent
    order_action: np.ndarray | None = None  # the (noisy) scores the order followed
    order_teacher: np.ndarray | None = None
    picks: dict[str, Pick] = field(default_factory=dict)  # by job id: the last placement that stood
    acted: bool = False  # a job started or stopped: a decision the agents are credited for
    reward: float = 0.0


class Trajectory:
    """Steps of one episode; `begin` is called once per decision (by whichever agent sees it first)."""

    def __init__(self, fee_weight: float = 0.0):
        self.fee_weight = fee_weight
        self.steps: list[Step] = []
        self._snap: Snapshot | None = None
        self._in_system = 0
        self._fees_done = 0.0
        self._fee_total = 0.0

    def _fees(self, snap: Snapshot) -> float:
        """Fees accrued so far: of jobs that left (folded in once) and of jobs still in the system."""
        self._fees_done += sum(j.fee for j in snap.finished)
        return self._fees_done + sum(j.fee for j in snap.running) + sum(j.fee for j in snap.pending)

    def begin(self, snap: Snapshot, machines: np.ndarray, glob: np.ndarray) -> Step:
        """The step of this decision (made once per snapshot), after rewarding the previous one."""
        if snap is self._snap:
            return self.steps[-1]
        fees = self._fees(snap)
        if self.steps:
            prev = self.steps[-1]
            prev.reward = (-(snap.now - prev.t) * self._in_system / 3600.0
                           - self.fee_weight * (fees - self._fee_total))
        self._fee_total = fees
        self._snap = snap
        self._in_system = snap.num_pending + snap.num_running
        step = Step(snap.now, machines, glob)
        self.steps.append(step)
        return step

    def close(self, end_time: float, result_fee: float) -> None:
        """The last interval: to the run's end (every job done), with the run's total fee."""
        if self.steps:
            prev = self.steps[-1]
            prev.reward = (-(end_time - prev.t) * self._in_system / 3600.0
                           - self.fee_weight * (result_fee - self._fee_total))

    @property
    def total_reward(self) -> float:
        return float(sum(s.reward for s in self.steps))
