"""Gavel-style heterogeneity-aware placement ("Gavel-lite"): type-level throughputs, no per-machine view.

What of Gavel (OSDI'20) this is: Gavel knows each job's measured throughput on each GPU type (its
K80/P100/V100 matrix; here `Snapshot.profile`, the same kind of type-level model) and places jobs
where that throughput is highest, optionally per dollar (its cost policies). What it is not:
Gavel solves an LP over per-round time fractions of every job on every type and realises them with
round-based priorities; this is the greedy, throughput-normalised placement the research note
(dualagent.md §2.2/§4.5) calls Gavel-lite, under Tiresias ordering so only placement differs from
the other heterogeneity baselines. It sees no per-machine variation: every machine of a type is
assumed nominal (`SpeedAwarePlacement(estimate=None)`), so a straggler is as good as any other.
"""

from __future__ import annotations

from dlsched.core.policy import Named, Policy
from dlsched.policies.phases.speed_aware import SpeedAwarePlacement
from dlsched.policies.tiresias import THRESHOLDS, Tiresias


def gavel_style(
    per_dollar: bool = False,
    min_efficiency: float = 0.8,
    thresholds: tuple[float, ...] = THRESHOLDS,
    promote_knob: float = 8.0,
) -> Policy:
    """Tiresias ordering + type-throughput placement; `per_dollar`: rate per USD/hour when priced;
    `min_efficiency`: a waiting job does not start on a shape slower than this share of its
    packed rate (consolidation patience, `SpeedAwarePlacement`), 0: off."""
    placement = SpeedAwarePlacement(name="gavel-style", estimate=None, per_dollar=per_dollar,
                                    min_efficiency=min_efficiency)
    return Named(Tiresias(tuple(thresholds), promote_knob, placement), "gavel-style")
