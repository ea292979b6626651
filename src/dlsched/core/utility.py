"""Job utility as a function of completion time (JCT), for utility-maximising policies and metrics."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SigmoidUtility:
    """f(t) = gamma1 / (1 + exp(gamma2 * (t - gamma3))): OASiS's utility of finishing after t seconds.

    gamma1 is the job's priority (maximum utility), gamma2 how sharply utility decays, gamma3 the
    target completion time. gamma2 = 0 gives a time-insensitive job.
    """

    gamma1: float
    gamma2: float
    gamma3: float

    def __call__(self, jct: float) -> float:
        x = self.gamma2 * (jct - self.gamma3)
        if x > 700:
            return 0.0
        return self.gamma1 / (1.0 + math.exp(x))
