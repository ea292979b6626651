"""Dorm (Sun et al., IEEE SmartComp 2017) as OASiS' evaluation describes it: at every arrival and
completion, re-optimise the worker/PS counts of all unfinished jobs with an MILP that maximises
resource utilisation under fairness and adjustment-overhead constraints; all jobs are admitted.

Why an MILP solver: the counts interact through shared capacity, integrality and the limit on how
many running jobs may be resized at once; HiGHS (`highspy`) solves it, bounded by `time_limit`
seconds and a 1% gap (its best incumbent is used; with none, the current counts are kept).

The model (per event, J unfinished jobs; n_i workers, p_i PSs, x_i runs, c_i resized):
- maximise  sum_i sum_r (n_i w_i^r / Cw^r + p_i s_i^r / Cp^r) / R   (utilisation)
            + 1e-4 * sum_i x_i * (J - age rank_i) / J                (older first on ties)
- capacity per pool, aggregated over its servers: sum_i n_i w_i^r <= Cw^r, sum_i p_i s_i^r <= Cp^r
  (one pool when workers and PSs share the servers);
- gang and PS rules: min_i x_i <= n_i <= max_i x_i, x_i <= p_i <= n_i for PS jobs, and the PSs carry
  the workers' bandwidth, p_i B_i >= n_i b_i (OASiS jobs; other PS jobs keep their requested ratio);
- fairness: job i's dominant share n_i max_r(w_i^r / Cw^r) <= max((1 + theta) / J, its minimum gang's
  share), i.e. no job exceeds its equal share by more than a factor 1 + theta, unless it is a running
  job left at its size (otherwise more jobs than the resize budget could be over share: infeasible);
- adjustment overhead: a running job's count changes only if c_i = 1, and sum_i c_i <= max(1, kappa *
  running jobs).
Counts are then placed onto servers (running jobs at an unchanged size keep their nodes) task by
task on the least-loaded node; a job that does not fit after all (fragmentation) shrinks or waits.
"""

from __future__ import annotations

import math
import os
import sys

import highspy
import numpy as np
from scipy import sparse

from dlsched.core.cluster import GPU
from dlsched.core.errors import ConfigError
from dlsched.core.job import Architecture
from dlsched.core.plan import Plan
from dlsched.core.policy import Policy
from dlsched.core.snapshot import JobState, Snapshot
from dlsched.policies.phases.placement import PLACEMENTS
from dlsched.policies.phases.realise import realise
from dlsched.framework.scoring import dominant_share
from dlsched.throughput.oasis_model import MODEL_KEY


class Dorm(Policy):
    """See the module docstring."""

    name = "dorm"

    def __init__(self, theta: float = 0.5, kappa: float = 0.3, time_limit: float = 1.0, placement: str = "least-loaded"):
        if theta < 0 or not 0 < kappa <= 1 or time_limit <= 0:
            raise ConfigError("Dorm: need theta >= 0, 0 < kappa <= 1 and time_limit > 0")
        if placement not in PLACEMENTS:
            raise ConfigError(f"Dorm: unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
        self.theta, self.kappa, self.time_limit = theta, kappa, time_limit
        self.placement = PLACEMENTS[placement]

    def reset(self, cluster, seed: int) -> None:
        cap = cluster.capacity
        gpu = cap[:, GPU] > 0
        self.split = bool(gpu.any() and (~gpu).any())
        self.cw = cap[gpu].sum(axis=0) if self.split else cap.sum(axis=0)
        self.cp = cap[~gpu].sum(axis=0) if self.split else self.cw
        self.solves = 0
        self.fallbacks = 0

    # ------------------------------------------------------------------ the MILP
    def _counts(self, jobs: list[JobState]) -> dict[str, tuple[int, int]] | None:
        J = len(jobs)
        R = len(self.cw)
        n_i, p_i, x_i = np.arange(J), J + np.arange(J), 2 * J + np.arange(J)
        c_i = 3 * J + np.arange(J)
        nv = 4 * J
        lo, hi, cost = np.zeros(nv), np.zeros(nv), np.zeros(nv)
        rows: list[tuple[dict[int, float], float, float]] = []  # ({col: coef}, lower, upper)
        inv_w = np.divide(1.0, self.cw, out=np.zeros(R), where=self.cw > 0)
        inv_p = np.divide(1.0, self.cp, out=np.zeros(R), where=self.cp > 0)
        running = 0
        for i, j in enumerate(jobs):
            s = j.spec
            w, p = np.asarray(s.worker_demand), np.asarray(s.ps_demand)
            is_ps = s.arch is Architecture.PS
            hi[n_i[i]], hi[p_i[i]], hi[x_i[i]], hi[c_i[i]] = s.max_workers, s.max_ps if is_ps else 0, 1, 1
            cost[n_i[i]] = float((w * inv_w).sum()) / R
            cost[p_i[i]] = float((p * (inv_w if not self.split else inv_p)).sum()) / R
            cost[x_i[i]] = 1e-4 * (J - i) / J
            rows.append(({n_i[i]: 1.0, x_i[i]: -s.min_workers}, 0.0, np.inf))
            rows.append(({n_i[i]: 1.0, x_i[i]: -s.max_workers}, -np.inf, 0.0))
            if is_ps:
                rows.append(({p_i[i]: 1.0, x_i[i]: -float(s.min_ps)}, 0.0, np.inf))
                rows.append(({p_i[i]: 1.0, n_i[i]: -1.0}, -np.inf, 0.0))
                if s.model == MODEL_KEY:
                    ratio = float(s.extra["worker_gbps"]) / float(s.extra["ps_gbps"])
                else:
                    ratio = s.num_ps / s.num_workers
                rows.append(({p_i[i]: 1.0, n_i[i]: -ratio}, 0.0, np.inf))
            dom = float(dominant_share(w, self.cw))
            prev = j.allocation.num_workers if j.allocation is not None else 0
            if dom > 0:  # a running job left at its size is exempt (changing it is what c_i limits)
                cap_share = max((1.0 + self.theta) / J, s.min_workers * dom)
                rows.append(({n_i[i]: dom, c_i[i]: dom * prev}, -np.inf, cap_share + dom * prev + 1e-9))
            if j.allocation is not None:
                running += 1
                rows.append(({n_i[i]: 1.0, c_i[i]: -float(s.max_workers)}, -np.inf, float(prev)))
                rows.append(({n_i[i]: 1.0, c_i[i]: float(prev)}, float(prev), np.inf))
            else:
                hi[c_i[i]] = 0
        for r in range(R):
            wrow = {int(n_i[i]): j.spec.worker_demand[r] for i, j in enumerate(jobs) if j.spec.worker_demand[r] > 0}
            prow = {int(p_i[i]): j.spec.ps_demand[r] for i, j in enumerate(jobs) if j.spec.ps_demand[r] > 0}
            if self.split:
                if wrow:
                    rows.append((wrow, -np.inf, float(self.cw[r])))
                if prow:
                    rows.append((prow, -np.inf, float(self.cp[r])))
            else:
                both = dict(wrow)
                for k, v in prow.items():
                    both[k] = both.get(k, 0.0) + v
                if both:
                    rows.append((both, -np.inf, float(self.cw[r])))
        if running:
            rows.append(({int(c_i[i]): 1.0 for i in range(J)}, -np.inf, float(max(1, math.floor(self.kappa * running)))))
        return self._solve(jobs, nv, lo, hi, cost, rows, n_i, p_i)

    def _solve(self, jobs, nv, lo, hi, cost, rows, n_i, p_i) -> dict[str, tuple[int, int]] | None:
        r_idx, c_idx, vals = [], [], []
        for k, (coefs, _, _) in enumerate(rows):
            for c, v in coefs.items():
                r_idx.append(k)
                c_idx.append(int(c))
                vals.append(float(v))
        A = sparse.csc_matrix((vals, (r_idx, c_idx)), shape=(len(rows), nv))
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = nv, len(rows)
        lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, lo, hi
        lp.row_lower_ = np.array([r[1] for r in rows])
        lp.row_upper_ = np.array([r[2] for r in rows])
        lp.sense_ = highspy.ObjSense.kMaximize
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
        lp.integrality_ = [highspy.HighsVarType.kInteger] * nv
        h = _quiet_highs()
        h.setOptionValue("time_limit", float(self.time_limit))
        h.setOptionValue("mip_rel_gap", 0.01)
        h.setOptionValue("threads", 1)
        h.passModel(lp)
        h.run()
        self.solves += 1
        info = h.getInfo()
        if info.primal_solution_status != 2:  # no feasible incumbent
            self.fallbacks += 1
            return None
        x = np.round(np.asarray(h.getSolution().col_value)).astype(int)
        return {j.job_id: (int(x[n_i[i]]), int(x[p_i[i]])) for i, j in enumerate(jobs)}

    # ------------------------------------------------------------------ per event
    def schedule(self, snap: Snapshot) -> Plan:
        jobs = sorted(snap.running + snap.pending, key=lambda j: j.rank)
        if not jobs:
            return Plan()
        counts = self._counts(jobs)
        if counts is None:  # keep what runs, start nothing
            return Plan(allocations={j.job_id: j.allocation for j in snap.running})
        sized = [(j, *counts[j.job_id]) for j in jobs if counts[j.job_id][0] > 0]
        # running jobs at an unchanged size first, so they keep their nodes
        sized.sort(key=lambda t: (not (t[0].allocation is not None and t[0].num_workers == t[1] and t[0].num_ps == t[2]), t[0].rank))
        allocations = realise(snap, sized, self.placement, preempt="minimal", shrink=True)
        return Plan(allocations=allocations)


def dorm(theta: float = 0.5, kappa: float = 0.3, time_limit: float = 1.0, placement: str = "least-loaded") -> Dorm:
    """Dorm with fairness slack `theta`, resize budget `kappa` (share of running jobs) and MILP `time_limit` s."""
    return Dorm(theta, kappa, time_limit, placement)


def _quiet_highs() -> highspy.Highs:
    """A HiGHS instance whose banner goes to stderr: HiGHS prints it from the C++ constructor the
    first time in a process, before any option can be set, and on stdout it broke
    `dlsched simulate --format json` (stdout must stay JSON)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    h.setOptionValue("output_flag", False)
    return h
