"""What every dlsched command shares: the consoles and the user-error wrapper."""

from __future__ import annotations

from functools import wraps
from pathlib import Path
from typing import Any, Callable

import typer
from rich.console import Console
from rich.markup import escape

from dlsched.core.errors import DlschedError, TraceError
from dlsched.core.text import visible

console = Console()
if not console.is_terminal:  # piped or in CI: rich would assume 80 columns and squash the table
    console = Console(width=160)
err_console = Console(stderr=True)


def safe(text: object) -> str:
    """User text (a job name, a reason, a file name) made safe to print on a rich console: every
    control or invisible formatting character is shown as its escape (`\\x1b`, `\\n`, `\\u202e`), so
    it cannot recolour the terminal, move the cursor or fake a line, and rich markup is escaped, so
    `[red]` prints as typed. Every command prints user text through this one function."""
    return escape(visible(text))


def _error(message: str) -> None:
    """One error, never wrapped: a `file:row: column: problem` line must stay whole to be grepped,
    and its text goes through `safe` (a path with brackets is not rich markup)."""
    shown = "\n".join(safe(line) for line in str(message).split("\n"))  # our own line breaks stay
    err_console.print(f"[bold red]error:[/] {shown}", highlight=False, soft_wrap=True)


def friendly(fn: Callable) -> Callable:
    """Turn our errors (and missing files) into one clear line and exit code 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TraceError as exc:
            _error(str(exc))
            for line in exc.problems:
                err_console.print(f"  {safe(line)}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except DlschedError as exc:
            _error(str(exc))
            raise typer.Exit(2) from None
        except FileNotFoundError as exc:
            _error(f"no such file: {exc.filename or exc}")
            raise typer.Exit(2) from None

    return wrapper


def use_shared_traces(traces: Path | str | None, what: str) -> Path:
    """The shared traces folder a command cannot run without (`--traces`, $DLSCHED_TRACES or the
    checkout's), exported as $DLSCHED_TRACES so that the models, workloads and worker processes it
    starts all read the same one; a one-line error naming `what` needs it when there is none."""
    import os

    from dlsched.core.errors import ConfigError
    from dlsched.paths import traces_dir

    root = traces_dir(traces)
    if root is None:
        raise ConfigError(f"{what} needs the shared traces (Gavel's throughput matrix and jobs): pass --traces or "
                          "set DLSCHED_TRACES")
    os.environ["DLSCHED_TRACES"] = str(root)
    return root
