"""Reading the YAML files users give dlsched: run, service and DL2 training configs, cluster,
nodes and job files.

Every YAML read in the package goes through `read_yaml`, so every way a file can be bad (missing,
unreadable, not UTF-8, not YAML) is one `ConfigError` line that names the file, never a traceback.
`read_yaml_model` adds validation into a pydantic model, where a typo is an error, not a default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from dlsched.core.errors import ConfigError

M = TypeVar("M", bound=BaseModel)

#: Largest seed any dlsched command takes: the live job spec's bound (a 31-bit integer), so a
#: seed that works in the simulator works for the trainer too.
SEED_MAX = 2**31 - 1
#: A seed, wherever one is given (command line, run config, DL2 training config): NumPy refuses
#: negative seeds, so a negative one is an input error, not a traceback.
Seed = Annotated[int, Field(ge=0, le=SEED_MAX, description=f"random seed, 0..{SEED_MAX}")]


def read_yaml(path: str | Path, what: str) -> Any:
    """The parsed content of a YAML (or JSON) file; `what` says which file it is in errors
    ("config file", "nodes file"...). An empty file is None."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} "
                          f"at offset {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path}: not valid YAML: {_yaml_problem(exc)}") from None
    except (ValueError, TypeError, OverflowError) as exc:
        # PyYAML's constructors raise these for a well-formed scalar they cannot build:
        # `2001-02-30` (no such date), `!!int x`, an integer of more than 4,300 digits
        raise ConfigError(f"{what} {path}: not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ConfigError(f"{what} {path}: not valid YAML: nested too deeply") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's message on one line: `line L, column C: problem` when it has a position."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return " ".join(str(exc).split())


def validation_problems(err: ValidationError, top: str = "(top level)") -> list[str]:
    """One `key.path: problem` line per pydantic error (an unknown key says "typo?"); `top`
    names an error of the whole object."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or top
        msg = "unknown key (typo?)" if e["type"] == "extra_forbidden" else e["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {msg}")
    return lines


def describe_validation_error(err: ValidationError, source: str) -> str:
    """One `source: key.path: problem` line per pydantic error."""
    return "\n".join(f"{source}: {line}" for line in validation_problems(err))


def read_yaml_model(path: str | Path, model: type[M], what: str) -> M:
    """Read a YAML mapping into a pydantic model; every problem is a ConfigError naming the file
    (and the key, for a bad value). An empty file gives the model's defaults."""
    data = read_yaml(path, what)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, str(path))) from None


def check_flag(value: Any, kind: Any, flag: str) -> Any:
    """`value` of a command-line option validated as the pydantic type `kind` (e.g. `Seed`); a
    ConfigError `--flag: problem, got value` otherwise, so options outside a model are checked by
    the same rules as the model fields they feed."""
    try:
        return TypeAdapter(kind).validate_python(value)
    except ValidationError as exc:
        raise ConfigError(f"{flag}: {flag_problem(exc)}, got {value!r}") from None


def flag_problem(exc: ValidationError) -> str:
    """pydantic's first message, lower-cased to read after `--flag: `."""
    msg = exc.errors()[0]["msg"].removeprefix("Value error, ")
    return msg[:1].lower() + msg[1:]
