"""How the live controller retries a job whose run failed: exponential backoff, then `failed`.

A run that dies without finishing is retried from its checkpoint, but not at once: a job that
fails because of its input or a bad node would otherwise burn through its attempts in a couple of
seconds (issue 17: three retries within ~2 s). The job waits out a backoff that doubles with each
failure in a row (5 s, 10 s, 20 s … capped at 5 min by default), during which no plan may place
it; after `attempts` runs in a row that failed without getting further than the previous one, the
job is marked failed with a one-line reason. A run that got further resets the count (bad luck,
not a broken job). The YAML section is `retry:` in the service config.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class RetryConfig(BaseModel):
    """Backoff between failed runs of a job (the service config's `retry:` section)."""

    model_config = ConfigDict(extra="forbid")

    attempts: int = Field(5, ge=1, le=1000, description="runs in a row that may fail without getting further "
                          "before the job is marked failed")
    backoff_initial: float = Field(5.0, ge=0, le=86400, description="seconds to wait after the first failure")
    backoff_factor: float = Field(2.0, ge=1, le=100, description="each further failure in a row multiplies the wait")
    backoff_max: float = Field(300.0, ge=0, le=86400, description="longest wait between runs, seconds")

    @model_validator(mode="after")
    def _ordered(self) -> "RetryConfig":
        if self.backoff_max < self.backoff_initial:
            raise ValueError(f"backoff_max ({self.backoff_max:g}) must be >= backoff_initial ({self.backoff_initial:g})")
        return self

    def delay(self, failures: int) -> float:
        """Seconds to wait after the `failures`-th failure in a row (1 for the first)."""
        return min(self.backoff_max, self.backoff_initial * self.backoff_factor ** max(0, failures - 1))


def waiting_note(retry_at: float, now: float, attempt: int, attempts: int) -> str:
    """What a job backing off waits for, for people: "retrying in 40 s (attempt 2/5)"."""
    return f"retrying in {max(0.0, retry_at - now):.0f} s (attempt {attempt}/{attempts})"
