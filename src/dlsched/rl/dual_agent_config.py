"""What `dlsched train dual-agent` does (`DualAgentTrainConfig`) and the episodes it plays.

An episode: a scenario's heterogeneous, fluctuating cluster (`hetero.scenarios`: machine speed
factors and their changes drawn from the seed) and a window of Gavel's Philly-derived jobs at the
scenario's load, simulated on Gavel's measured throughput matrix. Training, validation and test
draw from disjoint seed ranges, so the experiment's workloads are never seen in training.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dlsched.config import Seed
from dlsched.policies.dual_agent import VARIANTS

if TYPE_CHECKING:
    from dlsched.throughput.gavel_matrix import GavelMatrix

#: Machine speed changes are drawn this far ahead (an episode of 120 jobs at load 0.8 ends well within).
HORIZON_S = 30 * 24 * 3600.0


class DualAgentTrainConfig(BaseModel):
    """Everything one training does; the defaults trained the shipped models."""

    model_config = ConfigDict(extra="forbid")

    variant: str = Field("full", description="which policy: " + "; ".join(f"{k}: {v}" for k, v in VARIANTS.items()))
    scenarios: tuple[str, ...] = Field(("fluctuating", "static", "types"), description="training scenarios (hetero.scenarios), in turn")
    validation_scenario: str = "fluctuating"
    jobs: int = Field(120, ge=2, description="jobs per episode")
    hidden: int = Field(32, ge=4)
    fee_weight: float = Field(0.05, ge=0, description="reward = -(JCT hours) - fee_weight * (fee USD)")
    warmup_episodes: int = Field(16, ge=0, description="episodes of the teachers' decisions recorded for the warm-up")
    warmup_epochs: int = Field(40, ge=0)
    warmup_lr: float = Field(3e-3, gt=0)
    rl_iterations: int = Field(30, ge=0, description="PPO iterations (0: warm-up only)")
    episodes_per_iteration: int = Field(4, ge=1)
    ppo_epochs: int = Field(4, ge=1)
    lr: float = Field(3e-4, gt=0)
    clip: float = Field(0.2, gt=0)
    entropy: float = Field(0.003, ge=0, description="bonus on the placement agent's entropy")
    gae_lambda: float = Field(0.95, ge=0, le=1)
    validate_every: int = Field(5, ge=1)
    validation_episodes: int = Field(10, ge=1)
    train_seeds: tuple[Seed, Seed] = (10_000, 20_000)
    validation_seeds: tuple[Seed, Seed] = (5_000, 5_100)
    seed: Seed = 0

    @field_validator("variant")
    @classmethod
    def _variant(cls, v: str) -> str:
        if v not in VARIANTS:
            raise ValueError(f"unknown variant {v!r}; known: {', '.join(VARIANTS)}")
        return v

    @field_validator("scenarios")
    @classmethod
    def _scenarios(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        from dlsched.hetero.scenarios import SCENARIOS
        bad = [s for s in v if s not in SCENARIOS]
        if bad or not v:
            raise ValueError(f"unknown scenario {bad[0] if bad else '(none)'}; known: {', '.join(SCENARIOS)}")
        return v


@lru_cache(maxsize=1)
def gavel_matrix() -> "GavelMatrix":
    """Gavel's measured matrix, read once per process (every episode runs on it)."""
    from dlsched.throughput.gavel_matrix import GavelMatrix
    return GavelMatrix()


def episode(scenario: str, seed: int, jobs: int):
    """(jobs, cluster, node events, throughput model) of one seeded episode of a scenario."""
    from dlsched.hetero import scenarios

    sc = scenarios.SCENARIOS[scenario]
    cluster, events = scenarios.build(sc, seed, horizon_s=HORIZON_S)
    work = scenarios.workload(sc, cluster, seed, jobs=jobs)
    return work, cluster, events, gavel_matrix()
