"""A run described in a YAML file (`--config`), validated so that a typo is an error, not a default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlsched.config import flag_problem, read_yaml_model
from dlsched.core.errors import ConfigError
from dlsched.sim.config import SimConfig


class ThroughputConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    duration_alpha: float = Field(0.85, gt=0, le=1, description="scaling exponent of duration-only jobs")
    dl2: str = Field("measured", description="DL2 jobs: 'measured' speed records or 'analytic' model")


class RunConfig(BaseModel):
    """Everything `dlsched simulate/compare` needs; command-line options override file values."""

    model_config = ConfigDict(extra="forbid")

    trace: str | None = Field(None, min_length=1)
    trace_format: str | None = Field(None, min_length=1)
    cluster: str | None = Field(None, min_length=1)
    policies: list[str] | None = Field(None, min_length=1)
    limit: int | None = Field(None, gt=0)
    load: float | None = Field(None, gt=0, allow_inf_nan=False,
                               description="size the cluster from its node shapes to this offered load")
    elastic: bool | None = Field(None, description="None: jobs on measured curves elastic, others rigid")
    profiles: str = Field("auto", pattern="^(auto|draw|off)$", description="measured curves: auto, draw or off")
    variability: str | None = Field(None, pattern="^(steady|static|fluctuating|strong)$",
                                    description="machines' speeds (hetero.speeds): static spread, fluctuation and "
                                    "stragglers drawn by the seed, with per-GPU-type prices; None: as the cluster says")
    out: str | None = None
    sim: SimConfig = Field(default_factory=SimConfig)
    throughput: ThroughputConfig = Field(default_factory=ThroughputConfig)
    policy_options: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("policies")
    @classmethod
    def _known_policies(cls, names: list[str] | None) -> list[str] | None:
        from dlsched.policies.registry import check_policy

        return None if names is None else [_as_value_error(check_policy, n) for n in names]

    @field_validator("policy_options")
    @classmethod
    def _known_options(cls, options: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """A misspelled policy name or option here is an error with a did-you-mean, not an
        option silently never applied."""
        from dlsched.policies.registry import check_options, check_policy

        out = {}
        for name, opts in options.items():
            key = _as_value_error(check_policy, name)
            _as_value_error(check_options, key, opts)
            out[key] = opts
        return out


def _as_value_error(fn, *args):
    """Call a registry check inside a validator: its ConfigError becomes the ValueError pydantic
    reports under the key's path (and the file's name)."""
    try:
        return fn(*args)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


#: Command-line options that override a run config's keys.
FLAGS: dict[str, str] = {
    "trace": "--trace", "trace_format": "--trace-format", "cluster": "--cluster", "policies": "--policies",
    "limit": "--limit", "elastic": "--elastic/--rigid", "profiles": "--profiles", "seed": "--seed",
    "variability": "--variability",
}  # fmt: skip


def with_flags(cfg: RunConfig, **flags: Any) -> RunConfig:
    """`cfg` with the command line's values on top (None: not given), validated by the same rules
    as the file, so `--limit 0` or `--seed -1` is the same one-line error as `limit: 0` would be."""
    data = cfg.model_dump(exclude_unset=True)
    for key, value in flags.items():
        if key not in FLAGS:
            raise TypeError(f"no run-config flag {key!r}")
        if value is None:
            continue
        if key == "seed":
            data["sim"] = {**data.get("sim", {}), "seed": value}
        else:
            data[key] = value
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(x) for x in err["loc"]]
        key = "seed" if loc[:2] == ["sim", "seed"] else loc[0] if loc else ""
        given = flags.get(key)
        flag = FLAGS.get(key) if given is not None else None
        where = f"{flag}: " if flag else f"{'.'.join(loc)}: "
        got = f", got {given!r}" if flag else ""
        raise ConfigError(f"{where}{flag_problem(exc)}{got}") from None


def load_run_config(path: str | Path | None) -> RunConfig:
    if path is None:
        return RunConfig()
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"run config {p} does not exist")
    return read_yaml_model(p, RunConfig, "run config")
