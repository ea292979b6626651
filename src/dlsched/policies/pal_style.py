"""PAL-style variability-aware placement: type-level throughputs × measured per-machine speed.

What of PAL (SC'22) this is: PAL profiles each GPU's performance-variability score and places
jobs on the machines measured fastest, avoiding outliers. Here the scores are running means of
what jobs' workers measured on each node (`estimators.node_speeds.RunningMeanSpeeds`), multiplied
into the type-level profile (`SpeedAwarePlacement`), so a machine measured slow is avoided once a
job has run there. Like PAL's performance classes, factors are rounded to `resolution` (0.1) so
machines a few % apart tie and best-fit consolidation decides (without it, chasing 2% differences
fragments the cluster and spreads multi-GPU jobs). What it is not: PAL clusters scores with
K-means and weighs locality against variability with a lookup table; and it learns nothing about a node no job has used
(there it assumes nominal speed). Tiresias ordering, so only placement differs from the others.
"""

from __future__ import annotations

import math

from dlsched.core.policy import Named, Policy
from dlsched.estimators.node_speeds import RunningMeanSpeeds
from dlsched.policies.phases.speed_aware import SpeedAwarePlacement
from dlsched.policies.tiresias import THRESHOLDS, Tiresias


def pal_style(
    halflife_s: float = math.inf,
    risk: float = 0.0,
    per_dollar: bool = False,
    resolution: float = 0.1,
    min_efficiency: float = 0.8,
    thresholds: tuple[float, ...] = THRESHOLDS,
    promote_knob: float = 8.0,
) -> Policy:
    """Tiresias ordering + placement by type throughput × measured machine speed (`halflife_s`:
    forget old measurements; `risk`: plan with mean - risk×sd; `resolution`: factors closer than
    this are one performance class, so consolidation decides between them; `min_efficiency`: a
    waiting job does not start on a shape slower than this share of its packed rate, 0: off)."""
    placement = SpeedAwarePlacement(name="pal-style", estimate=RunningMeanSpeeds(halflife_s=halflife_s),
                                    risk=risk, per_dollar=per_dollar, resolution=resolution,
                                    min_efficiency=min_efficiency)
    return Named(Tiresias(tuple(thresholds), promote_knob, placement), "pal-style")
