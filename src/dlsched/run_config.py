"""A run described in a YAML file (`--config`), validated so that a typo is an error, not a default.

Every report carries the run config that re-runs it (`dump_run_config`: run.yaml beside the
report), with whatever the run decided pinned (the trace's absolute path and format, the policies,
the load, the traces root, every simulation option) and a `provenance` block (version, commit,
trace checksum, command) that the loader reads back but no run uses.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlsched.config import flag_problem, read_yaml_model
from dlsched.core.errors import ConfigError
from dlsched.sim.config import SimConfig
from dlsched.traces.profiles import DEFAULT_PROFILES


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
    profiles: str = Field(DEFAULT_PROFILES, pattern="^(auto|draw|off)$",
                          description="measured curves: draw (default: named models on their curve, every other "
                          "duration-only job on a drawn one), auto (named models only; other jobs rigid, as "
                          "recorded) or off")
    variability: str | None = Field(None, pattern="^(steady|static|fluctuating|strong)$",
                                    description="machines' speeds (hetero.speeds): static spread, fluctuation and "
                                    "stragglers drawn by the seed, with per-GPU-type prices; None: as the cluster says")
    seeds: int = Field(1, ge=1, le=100, description="run every policy with this many seeds (sim.seed, sim.seed + 1, "
                       "...) and report the means with 95% Student-t intervals")
    out: str | None = None
    traces: str | None = Field(None, min_length=1, description="shared traces folder (--traces): measured "
                               "throughput tables, DL2 constants, Pollux profiles; None: $DLSCHED_TRACES, else "
                               "../shared/traces beside the checkout")
    sim: SimConfig = Field(default_factory=SimConfig)
    throughput: ThroughputConfig = Field(default_factory=ThroughputConfig)
    policy_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    provenance: dict[str, Any] | None = Field(None, description="what a report's run.yaml records about the run "
                                              "that wrote it (version, commit, trace checksum, command); never "
                                              "changes a run")

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
    "variability": "--variability", "traces": "--traces", "seeds": "--seeds",
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
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
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


#: The run config a report writes beside itself; RUN_FILE_ALT when the folder already holds a
#: run.yaml that dlsched did not write (the user's own config is never replaced).
RUN_FILE = "run.yaml"
RUN_FILE_ALT = "run.dlsched.yaml"
_MARK = "# dlsched run config written with a report"
#: What re-running a simulation's run.yaml gives (the promise tests/test_reproduce.py holds it to).
EXACT = "gives this report's jobs.csv byte for byte, given the same dlsched and trace: see Code and Trace"
_SEEDED = "engine, policies, profile draws (--profiles draw), machine speeds (--variability), generated traces"


def written_run_config(path: Path) -> bool:
    """Whether `path` is a run config a report wrote (its first line is dlsched's mark)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.readline().startswith(_MARK)
    except OSError:
        return False


def pinned(cfg: RunConfig, *, policies: Sequence[str] | None, load: float | None = None,
           traces: Path | None = None) -> RunConfig:
    """`cfg` as the run used it, so that it re-runs the same from any folder: the trace's absolute
    path and its format (detected, if the run detected it), a cluster file's absolute path,
    `policies` (the names that ran, defaults included; None keeps cfg's), the load (`load`, the
    command line's, else cfg's), the traces root the run used, no output folder (a re-run picks its
    own) and no provenance (it describes one run)."""
    from dlsched.presets import PRESETS
    from dlsched.traces import detect_format

    trace, fmt = cfg.trace, cfg.trace_format
    if trace is not None:
        fmt = fmt or detect_format(trace)
        if Path(trace).exists():
            trace = str(Path(trace).absolute())
    cluster = cfg.cluster
    if cluster is not None and cluster not in PRESETS and Path(cluster).expanduser().is_file():
        cluster = str(Path(cluster).expanduser().absolute())
    data = cfg.model_dump(mode="json")
    data.update(trace=trace, trace_format=fmt, cluster=cluster, load=cfg.load if load is None else load,
                traces=None if traces is None else str(Path(traces).absolute()), out=None, provenance=None)
    if policies is not None:
        data["policies"] = list(policies)
    return RunConfig.model_validate(data)


@dataclass(frozen=True)
class RunRecord:
    """The run config a report wrote (`path`), the config in it, its provenance, and the command
    that re-runs it; `rows()` is the same for the report's page."""

    path: Path
    config: RunConfig
    provenance: dict[str, Any]
    rerun: str
    rerun_gives: str = EXACT

    def rows(self) -> list[tuple[str, str]]:
        """(label, text) pairs for the page: everything needed to tell what ran and to run it again."""
        c, p = self.config, self.provenance
        git = p.get("git")
        code = f"dlsched {p['dlsched']}, " + (
            f"git commit {git['commit']}" + {True: " with uncommitted changes", False: " (clean)"}.get(git["dirty"], "")
            if git else "not run from a git checkout (no commit)")
        t = p["trace"]
        trace = f"{t['path']}" + (f", format {c.trace_format}" if c.trace_format else "") + (
            f", sha256 {t['sha256']} ({t['bytes']:,} bytes)" if t.get("sha256") else f" ({t.get('note', 'no file')})")
        workload = {k: getattr(c, k) for k in ("limit", "load", "elastic", "profiles", "variability", "cluster")}
        workload.update(elastic="auto" if c.elastic is None else c.elastic, cluster=c.cluster or "the trace's own")
        options = "; ".join(f"{n}: {_pairs(o)}" for n, o in c.policy_options.items()) or "none (the defaults)"
        return [
            ("Re-run", f"{self.rerun}  ({self.rerun_gives})"),
            ("Command", f"{p['command'] or '(not run from the command line)'}  (in {p['cwd']})"),
            ("Code", code),
            ("Trace", trace),
            ("Seed", f"{c.sim.seed} (drives the {_SEEDED})"),
            ("Simulation", _pairs(c.sim.model_dump()) + "  (times in seconds)"),
            ("Workload", _pairs(workload)),
            ("Policies", ", ".join(c.policies) if c.policies else "as the command names them"),
            ("Policy options", options),
            ("Throughput", _pairs(c.throughput.model_dump())),
            ("Traces root", c.traces or "none (only the throughput tables shipped with dlsched)"),
            ("Python", f"{p['python']} on {p['platform']}"),
        ]


def _pairs(values: dict[str, Any]) -> str:
    """`key = value; ...` in the run config's own key names, so a reader finds them in run.yaml."""
    def show(v: Any) -> str:
        if v is None:
            return "unset"
        if isinstance(v, bool):
            return str(v).lower()
        return f"{v:g}" if isinstance(v, float) else str(v)

    return "; ".join(f"{k} = {show(v)}" for k, v in values.items())


def dump_run_config(cfg: RunConfig, folder: Path, *, policies: Sequence[str] | None, load: float | None = None,
                    traces: Path | None = None, rerun: str = "dlsched simulate --config {run}",
                    rerun_gives: str = EXACT, extra: dict[str, Any] | None = None) -> RunRecord:
    """Write the run config that re-runs this run into `folder` (run.yaml; run.dlsched.yaml when a
    run.yaml dlsched did not write is there) and return its record for the report's page.

    The config is `pinned(cfg, ...)` with every key written out, defaults included (every
    simulation option shows its value), plus a `provenance` block: dlsched's version, the git
    commit and whether the checkout was dirty, the trace's sha256, the seed, the command as run
    and its working folder (`extra` adds keys, e.g. a replay's options). `rerun` is the command
    that re-runs it, `{run}` standing for the file's path, and `rerun_gives` what that gives."""
    import yaml

    from dlsched import provenance as prov

    folder = Path(folder)
    path = folder / RUN_FILE
    if path.exists() and not written_run_config(path):
        path = folder / RUN_FILE_ALT
    config = pinned(cfg, policies=policies, load=load, traces=traces)
    record = RunRecord(path, config, {
        "dlsched": prov.version(),
        "git": prov.git_state(),
        "command": prov.command_line(),
        "cwd": os.getcwd(),
        "trace": _trace_facts(config.trace),
        "seed": config.sim.seed,
        "python": platform.python_version(),
        "platform": platform.platform(),
        **(extra or {}),
    }, rerun.format(run=path), rerun_gives)
    body = yaml.safe_dump({**config.model_dump(mode="json", exclude={"out", "provenance"}),
                           "provenance": record.provenance}, sort_keys=False, allow_unicode=True, width=1000)
    head = (f"{_MARK}; re-run it: {rerun.format(run='<this file>')}\n"
            "# Every key the run used is written out; `provenance` records what ran and is never used by a run.\n")
    path.write_text(head + body, encoding="utf-8")
    return record


def _trace_facts(trace: str | None) -> dict[str, Any]:
    """The trace a run read: its path, sha256 and size (the embedded slice's file when `trace` is
    None; a generated workload has no file, and says so)."""
    from dlsched import provenance as prov

    if trace is None:
        from dlsched.traces.embedded import DATA_FILE, data_path

        where = data_path()
        facts: dict[str, Any] = {"path": f"embedded:{DATA_FILE}", "file": str(where)}
    else:
        where = Path(trace)
        facts = {"path": trace}
    if not where.exists():
        return {**facts, "sha256": None, "note": "generated, no file"}
    size = sum(f.stat().st_size for f in where.rglob("*") if f.is_file()) if where.is_dir() else where.stat().st_size
    return {**facts, "sha256": prov.sha256(where), "bytes": size}
