"""Job utility as a function of completion time (JCT), for utility-maximising policies and metrics.

A utility is any callable `f(jct_seconds) -> float` that is >= 0 and non-increasing: that is all
the simulator (`sim.results`, total utility) and a policy (OASiS' admission, RRH's reward) need,
so policies never depend on a concrete class. The sigmoid of OASiS/CORA is the default shape.

The paper states its utilities in *time slots* (gamma2 per slot, gamma3 in slots) while the
simulator measures JCT in seconds; the factories below take slot units and a slot length and
build the equivalent seconds-based sigmoid, so the number the metrics report is exactly the
paper's f evaluated at the measured JCT (in fractional slots).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from dlsched.core.errors import ConfigError

if TYPE_CHECKING:
    from dlsched.core.job import JobSpec


@runtime_checkable
class Utility(Protocol):
    """What any policy or metric may rely on: utility of finishing `jct` seconds after submission."""

    def __call__(self, jct: float) -> float: ...


@dataclass(frozen=True)
class SigmoidUtility:
    """f(t) = gamma1 / (1 + exp(gamma2 * (t - gamma3))): OASiS's utility of finishing after t seconds.

    gamma1 is the job's priority (maximum utility), gamma2 how sharply utility decays, gamma3 the
    target completion time. gamma2 = 0 gives a time-insensitive job.
    """

    gamma1: float
    gamma2: float
    gamma3: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.gamma1) and self.gamma1 >= 0):
            raise ConfigError(f"utility gamma1 (priority) must be finite and >= 0, got {self.gamma1}")
        if not (math.isfinite(self.gamma2) and self.gamma2 >= 0):
            raise ConfigError(f"utility gamma2 (decay) must be finite and >= 0 (non-increasing utility), got {self.gamma2}")
        if not math.isfinite(self.gamma3):
            raise ConfigError(f"utility gamma3 (target) must be finite, got {self.gamma3}")

    def __call__(self, jct: float) -> float:
        x = self.gamma2 * (jct - self.gamma3)
        if x > 700:
            return 0.0
        return self.gamma1 / (1.0 + math.exp(x))

    def many(self, jct: np.ndarray) -> np.ndarray:
        """Vectorised f, for policies that evaluate every candidate completion time at once."""
        x = np.minimum(self.gamma2 * (np.asarray(jct, dtype=float) - self.gamma3), 700.0)
        return self.gamma1 / (1.0 + np.exp(x))


class UtilityClass(str, Enum):
    """The paper's three job classes (Sec. V-A), told apart only by how fast utility decays."""

    INSENSITIVE = "time-insensitive"
    SENSITIVE = "time-sensitive"
    CRITICAL = "time-critical"


#: gamma2 ranges per class, per slot (OASiS Sec. V-A, after CORA).
GAMMA2_RANGE: dict[UtilityClass, tuple[float, float]] = {
    UtilityClass.INSENSITIVE: (0.0, 0.0),
    UtilityClass.SENSITIVE: (0.01, 1.0),
    UtilityClass.CRITICAL: (4.0, 6.0),
}


def sigmoid_in_slots(priority: float, decay_per_slot: float, target_slots: float, slot_seconds: float) -> SigmoidUtility:
    """The paper's f(t) with t in slots, as a utility of JCT in seconds."""
    if slot_seconds <= 0:
        raise ConfigError(f"slot length must be > 0 seconds, got {slot_seconds}")
    return SigmoidUtility(priority, decay_per_slot / slot_seconds, target_slots * slot_seconds)


def time_insensitive(priority: float, slot_seconds: float = 1.0) -> SigmoidUtility:
    """Constant utility: gamma2 = 0, the job is worth `priority / 2` whenever it finishes."""
    return sigmoid_in_slots(priority, 0.0, 0.0, slot_seconds)


def time_sensitive(priority: float, target_slots: float, decay_per_slot: float = 0.5, slot_seconds: float = 1.0) -> SigmoidUtility:
    lo, hi = GAMMA2_RANGE[UtilityClass.SENSITIVE]
    if not lo <= decay_per_slot <= hi:
        raise ConfigError(f"a time-sensitive job decays by {lo}..{hi} per slot, got {decay_per_slot}")
    return sigmoid_in_slots(priority, decay_per_slot, target_slots, slot_seconds)


def time_critical(priority: float, target_slots: float, decay_per_slot: float = 5.0, slot_seconds: float = 1.0) -> SigmoidUtility:
    lo, hi = GAMMA2_RANGE[UtilityClass.CRITICAL]
    if not lo <= decay_per_slot <= hi:
        raise ConfigError(f"a time-critical job decays by {lo}..{hi} per slot, got {decay_per_slot}")
    return sigmoid_in_slots(priority, decay_per_slot, target_slots, slot_seconds)


def sample_utility(
    rng: np.random.Generator,
    cls: UtilityClass,
    slot_seconds: float,
    priority: tuple[float, float] = (1.0, 100.0),
    target_slots: tuple[float, float] = (1.0, 15.0),
) -> SigmoidUtility:
    """One utility of class `cls` with the paper's ranges (gamma1 in [1,100], gamma3 in [1,15] slots)."""
    g1 = float(rng.uniform(*priority))
    g3 = float(rng.uniform(*target_slots))
    lo, hi = GAMMA2_RANGE[cls]
    g2 = float(rng.uniform(lo, hi)) if hi > lo else lo
    return sigmoid_in_slots(g1, g2, g3, slot_seconds)


def classify(u: Callable[[float], float], slot_seconds: float) -> UtilityClass | None:
    """The class of a sigmoid utility (by its per-slot decay); None for other shapes."""
    if not isinstance(u, SigmoidUtility):
        return None
    g2 = u.gamma2 * slot_seconds
    if g2 == 0:
        return UtilityClass.INSENSITIVE
    return UtilityClass.CRITICAL if g2 >= GAMMA2_RANGE[UtilityClass.CRITICAL][0] else UtilityClass.SENSITIVE


def from_duration(duration: float, priority: float = 1.0, slack: float = 2.0, steepness: float = 4.0) -> SigmoidUtility:
    """A default for trace jobs that declare none: time-sensitive around `slack` x their run time.

    Why this shape: a real trace says nothing about value, so every job is worth the same
    (`priority`), the user's target is `slack` times the job's own duration (so short jobs are
    hurt by queueing as much as long ones, relatively), and utility falls to about
    1/(1 + e^steepness) one further duration past the target.
    """
    if not (duration > 0 and math.isfinite(duration)):
        raise ConfigError(f"a default utility needs a positive duration, got {duration}")
    if slack <= 0 or steepness < 0:
        raise ConfigError("utility slack must be > 0 and steepness >= 0")
    return SigmoidUtility(priority, steepness / duration, slack * duration)


def default_utility(spec: "JobSpec") -> SigmoidUtility:
    """`from_duration` of the job's trace duration (its iterations for a duration-only job)."""
    return from_duration(spec.duration if spec.duration is not None else spec.iterations)


def with_default_utilities(jobs: Sequence["JobSpec"]) -> tuple[list["JobSpec"], int]:
    """The jobs, each one without a utility given `default_utility`; and how many were filled.

    Used before a comparison that includes a utility-driven policy (OASiS, RRH), so that every
    policy in it is scored on the same utilities (a job without one would count NaN, and the
    total utility column would be empty). Jobs that declare a utility are returned unchanged.
    """
    out: list[JobSpec] = []
    filled = 0
    for job in jobs:
        if job.utility is None:
            job = replace(job, utility=default_utility(job))
            filled += 1
        out.append(job)
    return out, filled
