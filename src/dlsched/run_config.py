"""A run described in a YAML file (`--config`), validated so that a typo is an error, not a default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dlsched.config import read_yaml_model
from dlsched.core.errors import ConfigError
from dlsched.sim.config import SimConfig


class ThroughputConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    duration_alpha: float = Field(0.85, gt=0, le=1, description="scaling exponent of duration-only jobs")
    dl2: str = Field("measured", description="DL2 jobs: 'measured' speed records or 'analytic' model")


class RunConfig(BaseModel):
    """Everything `dlsched simulate/compare` needs; command-line options override file values."""

    model_config = ConfigDict(extra="forbid")

    trace: str | None = None
    trace_format: str | None = None
    cluster: str | None = None
    policies: list[str] | None = None
    limit: int | None = Field(None, gt=0)
    load: float | None = Field(None, gt=0, allow_inf_nan=False,
                               description="size the cluster from its node shapes to this offered load")
    elastic: bool | None = Field(None, description="None: jobs on measured curves elastic, others rigid")
    profiles: str = Field("auto", pattern="^(auto|draw|off)$", description="measured curves: auto, draw or off")
    out: str | None = None
    sim: SimConfig = Field(default_factory=SimConfig)
    throughput: ThroughputConfig = Field(default_factory=ThroughputConfig)
    policy_options: dict[str, dict[str, Any]] = Field(default_factory=dict)


def load_run_config(path: str | Path | None) -> RunConfig:
    if path is None:
        return RunConfig()
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    return read_yaml_model(p, RunConfig, "config file")
