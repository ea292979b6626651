"""What every dlsched command shares: the consoles and the user-error wrapper."""

from __future__ import annotations

from functools import wraps
from typing import Any, Callable

import typer
from rich.console import Console

from dlsched.core.errors import DlschedError, TraceError

console = Console()
if not console.is_terminal:  # piped or in CI: rich would assume 80 columns and squash the table
    console = Console(width=160)
err_console = Console(stderr=True)


def friendly(fn: Callable) -> Callable:
    """Turn our errors (and missing files) into one clear line and exit code 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TraceError as exc:
            err_console.print(f"[bold red]error:[/] {exc}")
            for line in exc.problems:
                err_console.print(f"  {line}", markup=False, highlight=False)
            raise typer.Exit(2) from None
        except DlschedError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", markup=True, highlight=False)
            raise typer.Exit(2) from None
        except FileNotFoundError as exc:
            err_console.print(f"[bold red]error:[/] no such file: {exc.filename or exc}")
            raise typer.Exit(2) from None

    return wrapper
