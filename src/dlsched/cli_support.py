"""What every dlsched command shares: the consoles and the user-error wrapper."""

from __future__ import annotations

from functools import wraps
from typing import Any, Callable

import typer
from rich.console import Console
from rich.markup import escape

from dlsched.core.errors import DlschedError, TraceError

console = Console()
if not console.is_terminal:  # piped or in CI: rich would assume 80 columns and squash the table
    console = Console(width=160)
err_console = Console(stderr=True)


def _error(message: str) -> None:
    """One error, never wrapped: a `file:row: column: problem` line must stay whole to be grepped,
    and its text is printed as is (a path with brackets is not rich markup)."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def friendly(fn: Callable) -> Callable:
    """Turn our errors (and missing files) into one clear line and exit code 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TraceError as exc:
            _error(str(exc))
            for line in exc.problems:
                err_console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except DlschedError as exc:
            _error(str(exc))
            raise typer.Exit(2) from None
        except FileNotFoundError as exc:
            _error(f"no such file: {exc.filename or exc}")
            raise typer.Exit(2) from None

    return wrapper
