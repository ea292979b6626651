"""Where a result came from: the dlsched version and commit, a checksum of the input, the command.

A report that cannot say which code and which trace made it cannot be reproduced or trusted, so
every report records these (`run_config.dump_run_config` writes them into its run.yaml and onto
its page). Each function answers with what it can find and never fails a run: no git, an installed
wheel or a command started from Python give `None`, not an error.
"""

from __future__ import annotations

import hashlib
import importlib
import shlex
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from dlsched.paths import source_checkout

_CHUNK = 1 << 20
_GIT_TIMEOUT_S = 10.0


def version() -> str:
    """dlsched's installed version (the package metadata, else the source's `__version__`)."""
    try:
        return metadata.version("dlsched")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare source tree
        from dlsched import __version__

        return __version__


def git_state() -> dict[str, object] | None:
    """`{"commit": sha, "dirty": bool}` of the checkout the package runs from; dirty when a tracked
    file differs from the commit (untracked files do not change what ran). None for an installed
    wheel, a checkout without git metadata, or no usable `git` program."""
    checkout = source_checkout()
    if checkout is None or not (checkout / ".git").exists():
        return None

    def git(*args: str) -> str | None:
        try:
            res = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True,
                                 timeout=_GIT_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return res.stdout if res.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit or not commit.strip():
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


def sha256(path: str | Path) -> str:
    """The sha256 of a file; of a folder (DL2's per-day traces), over its files' relative paths and
    contents in sorted order, so the same files give the same sum wherever the folder lies."""
    p = Path(path)
    h = hashlib.sha256()
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    for f in files:
        if p.is_dir():
            h.update(f.relative_to(p).as_posix().encode() + b"\0")
        with open(f, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
    return h.hexdigest()


def command_line() -> str | None:
    """The `dlsched ...` command being run, rebuilt from the command-line parser's context: the
    subcommand and every option given on the command line (long names, values as parsed), so it
    is the same whether dlsched runs from a shell or inside a test. None outside a command."""
    ctx = _current_context()
    if ctx is None:
        return None
    chain = []
    while ctx is not None:
        chain.append(ctx)
        ctx = ctx.parent
    chain.reverse()
    parts = ["dlsched"]
    for i, c in enumerate(chain):
        if i:
            parts.append(c.info_name or "")
        for param in c.command.params:
            source = c.get_parameter_source(param.name) if param.name else None
            if getattr(source, "name", None) in ("COMMANDLINE", "ENVIRONMENT"):
                parts += _given(param, c.params.get(param.name))
    return shlex.join(parts)


def _current_context() -> Any:
    """The click context of the command being run. Typer >= 0.20 runs on its own copy of click
    (`typer._click`), older ones on click itself: ask both, so either works."""
    for name in ("typer._click.globals", "click.globals"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        ctx = module.get_current_context(silent=True)
        if ctx is not None:
            return ctx
    return None


def _given(param: Any, value: Any) -> list[str]:
    """One parsed parameter back as command-line words (by its kind's name, which both clicks share)."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if param.param_type_name == "argument":
        return [str(v) for v in values if v is not None]
    opt = max(param.opts, key=len)
    if param.is_flag:
        if param.secondary_opts:
            return [opt if value else max(param.secondary_opts, key=len)]
        return [opt] if value else []
    return [w for v in values if v is not None for w in (opt, str(v))]
