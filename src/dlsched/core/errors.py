"""Errors a user can cause. The CLI turns each into one clear line, never a stack trace."""

from __future__ import annotations

import difflib
from typing import Iterable


def did_you_mean(word: str, choices: Iterable[str], n: int = 1) -> str:
    """` (did you mean 'x'?)` for the closest of `choices` to a mistyped `word`, else ''; every
    unknown name (policy, preset, column, key) is suggested the same way."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=n)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


class DlschedError(Exception):
    """Base class: anything raised for bad input or configuration."""


class ConfigError(DlschedError):
    """A bad config value, preset, policy name or option."""


class TraceError(DlschedError):
    """A trace file that cannot be read; `problems` holds `file:row: column: problem` lines."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = problems or []


class PlanError(DlschedError):
    """A policy produced a plan the engine refuses to apply (a policy bug, named precisely)."""
