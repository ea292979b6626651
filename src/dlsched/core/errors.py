"""Errors a user can cause. The CLI turns each into one clear line, never a stack trace."""


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
