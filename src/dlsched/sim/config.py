"""Simulator settings (pydantic, so a typo in a config file is an error, not a silent default)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from dlsched.config import Seed


class SimConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: Seed = Field(0, description="seed for every random choice of the engine and policies")
    restart_overhead: float = Field(
        10.0, ge=0, description="seconds a job pauses when resized, migrated or resumed after preemption "
        "(checkpoint-restart; DL2 measured 11-16 s for MXNet)"
    )
    startup_overhead: float = Field(0.0, ge=0, description="seconds a job pauses on its first start")
    max_time: float | None = Field(None, gt=0, description="stop the run at this simulated time")
    loss_noise: float = Field(0.01, ge=0, description="relative noise of the synthetic training-loss curves")
