"""A sweep's grid, read from YAML and checked before anything runs (a typo is an error).

    name: small
    policies: [fifo, tiresias, optimus]
    traces: [default]                 # the embedded ITP slice; or paths, or {path, format, limit, name}
    clusters: [null]                  # presets or YAML files; null: the trace's own preset
    loads: [1.0, 1.5]                 # size the cluster to each offered load; null: as given
    seeds: 3                          # 0, 1, 2 (or a list); trace draws and the engine
    reference: fifo                   # paired ratios in the report are to this policy
    policy_options: {tiresias: {...}}

It expands to cells in a stable order (trace, cluster, load, seed, policy), each a `SimCell`
holding exactly the run config `dlsched compare` would use for that one policy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from dlsched.config import Seed, read_yaml_model
from dlsched.run_config import RunConfig, ThroughputConfig, _as_value_error
from dlsched.sim.config import SimConfig
from dlsched.traces.profiles import DEFAULT_PROFILES
from dlsched.sweep.cell import SimCell


class TraceEntry(BaseModel):
    """One trace of the grid: a file (None: the embedded ITP slice), its format and job limit."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(None, min_length=1)
    format: str | None = Field(None, min_length=1)
    limit: PositiveInt | None = None
    name: str | None = Field(None, min_length=1, description="label in the report (default: the file name)")

    @property
    def label(self) -> str:
        return self.name or (Path(self.path).stem if self.path else "default")


class SweepGrid(BaseModel):
    """Every key of a sweep's YAML file; the lists multiply into cells."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("sweep", min_length=1)
    policies: list[str] = Field(min_length=1)
    traces: list[TraceEntry | str] = Field(default_factory=lambda: [TraceEntry()], min_length=1)
    clusters: list[str | None] = Field(default_factory=lambda: [None], min_length=1)
    loads: list[float | None] = Field(default_factory=lambda: [None], min_length=1)
    seeds: PositiveInt | list[Seed] = Field(1, description="N: seeds 0..N-1; or the list of seeds")
    limit: PositiveInt | None = Field(None, description="first N jobs of every trace without its own limit")
    elastic: bool | None = None
    profiles: str = Field(DEFAULT_PROFILES, pattern="^(auto|draw|off)$")
    reference: str | None = Field(None, description="policy the report's paired ratios are to (default: the first)")
    sim: SimConfig = Field(default_factory=SimConfig)
    throughput: ThroughputConfig = Field(default_factory=ThroughputConfig)
    policy_options: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("policies")
    @classmethod
    def _known(cls, names: list[str]) -> list[str]:
        from dlsched.policies.registry import check_policy

        keys = [_as_value_error(check_policy, n) for n in names]
        if len(set(keys)) != len(keys):
            raise ValueError("a policy is listed twice")
        return keys

    @field_validator("traces")
    @classmethod
    def _entries(cls, traces: list[TraceEntry | str]) -> list[TraceEntry | str]:
        return [TraceEntry() if t == "default" else TraceEntry(path=t) if isinstance(t, str) else t for t in traces]

    @field_validator("loads")
    @classmethod
    def _positive(cls, loads: list[float | None]) -> list[float | None]:
        """Every load in the range `--load` accepts (`traces.load.check_load`), checked before any cell runs."""
        from dlsched.core.errors import ConfigError
        from dlsched.traces.load import check_load

        try:
            return [None if x is None else check_load(x) for x in loads]
        except ConfigError as exc:
            raise ValueError(f"{exc} (or null: the cluster as given)") from None

    @model_validator(mode="after")
    def _consistent(self) -> "SweepGrid":
        from dlsched.policies.registry import check_options, check_policy

        options = {}
        for name, opts in self.policy_options.items():
            key = _as_value_error(check_policy, name)
            if key not in self.policies:
                raise ValueError(f"policy_options: {key} is not one of the grid's policies")
            _as_value_error(check_options, key, opts)
            options[key] = opts
        self.policy_options = options
        if self.reference is not None:
            self.reference = _as_value_error(check_policy, self.reference)
            if self.reference not in self.policies:
                raise ValueError(f"reference: {self.reference} is not one of the grid's policies")
        if "seed" in self.sim.model_fields_set:
            raise ValueError("sim.seed: give the seeds as `seeds:` (a count or a list)")
        labels = [t.label for t in self.traces]  # type: ignore[union-attr]
        if len(set(labels)) != len(labels):
            raise ValueError("two traces have the same name; give them distinct `name:`s")
        return self

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)

    @property
    def reference_policy(self) -> str:
        return self.reference or self.policies[0]

    def cells(self, root: Path | None = None, base: Path | None = None) -> list[SimCell]:
        """The grid's cells in a stable order: trace, cluster, load, seed, policy (fastest). A
        relative trace or cluster file is found beside the grid file (`base`), else as given;
        the cells hold absolute paths, so a Ray worker anywhere reads the same file."""
        from dlsched.policies.registry import UTILITY_DRIVEN

        def resolved(name: str | None) -> str | None:
            if name is None or base is None or Path(name).is_absolute() or not (base / name).exists():
                return name
            return str((base / name).resolve())

        driven = tuple(p for p in self.policies if p in UTILITY_DRIVEN)
        out = []
        for trace in self.traces:
            assert isinstance(trace, TraceEntry)
            for cluster in self.clusters:
                for load in self.loads:
                    for seed in self.seed_list:
                        for policy in self.policies:
                            cfg = RunConfig(
                                trace=resolved(trace.path), trace_format=trace.format,
                                cluster=resolved(cluster), load=load,
                                limit=trace.limit or self.limit, elastic=self.elastic, profiles=self.profiles,
                                sim=self.sim.model_copy(update={"seed": seed}), throughput=self.throughput,
                                policies=[policy], policy_options={policy: self.policy_options.get(policy, {})}
                                if policy in self.policy_options else {})
                            out.append(SimCell(cfg.model_dump(mode="json", exclude_defaults=True), policy, driven,
                                               trace.label, str(root) if root else None))
        return out

    def identity(self) -> dict[str, Any]:
        """The grid's content, for telling a folder's earlier grid from this one."""
        return self.model_dump(mode="json")


def load_grid(path: str | Path) -> SweepGrid:
    """The grid in a YAML file; every problem is one ConfigError line naming the file and key."""
    from dlsched.core.errors import ConfigError

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"sweep grid {p} does not exist")
    return read_yaml_model(p, SweepGrid, "sweep grid")
