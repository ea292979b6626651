"""A run described in a YAML file (`--config`), validated so that a typo is an error, not a default."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dlsched.core.errors import ConfigError
from dlsched.sim.config import SimConfig

M = TypeVar("M", bound=BaseModel)


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
    elastic: bool = False
    out: str | None = None
    sim: SimConfig = Field(default_factory=SimConfig)
    throughput: ThroughputConfig = Field(default_factory=ThroughputConfig)
    policy_options: dict[str, dict[str, Any]] = Field(default_factory=dict)


def describe_validation_error(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        msg = "unknown key (typo?)" if e["type"] == "extra_forbidden" else e["msg"]
        lines.append(f"{source}: {loc}: {msg}")
    return "\n".join(lines)


def read_yaml_model(path: Path, model: type[M], what: str) -> M:
    """Read a YAML mapping into a pydantic model; every problem is a ConfigError naming the key."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, str(path))) from None


def load_run_config(path: str | Path | None) -> RunConfig:
    if path is None:
        return RunConfig()
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    return read_yaml_model(p, RunConfig, "config file")
