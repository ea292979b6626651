"""What the store hands out and accepts: a job and an event as the API returns them (`JobView`,
`EventView`), the job statuses, the ids (`job-000001`) and the error of an operation on a job in
the wrong status.

These are the store's vocabulary, shared by the store, the API, the status page and the
controller; they hold no database code (the tables are in `schema.py`), so reading them
needs no SQLAlchemy.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field, computed_field

from dlsched.live.spec import TrainJob

JobStatusName = Literal["queued", "running", "done", "failed", "cancelled", "rejected"]
JOB_STATUSES: tuple[str, ...] = get_args(JobStatusName)
#: Statuses a job never leaves.
FINISHED: frozenset[str] = frozenset({"done", "failed", "cancelled", "rejected"})

_ID_PREFIX = "job-"


class JobView(BaseModel):
    """One job as the API returns it and the controller reads it."""

    id: str = Field(description="assigned by the service, e.g. job-000001; never reused")
    name: str | None = None
    spec: TrainJob
    status: JobStatusName
    submitted_at: float = Field(description="unix time")
    started_at: float | None = Field(None, description="unix time of the first start")
    finished_at: float | None = Field(None, description="unix time it ended")
    steps_done: int = 0
    loss: float | None = None
    steps_per_s: float | None = None
    workers: int = 0
    ps: int = 0
    nodes: list[str] = []
    attempt: int = 0
    restarts: int = 0
    reason: str = ""
    cancel_requested: bool = False
    job_dir: str | None = Field(None, description="absolute path, on the service's machine, of the folder its "
                                "runs write (checkpoints, progress, logs); set when it first starts, kept after "
                                "it ends")
    run_time_s: float | None = Field(None, description="seconds it held a running allocation, summed over its "
                                     "runs; written each time a run ends (None: it never ran)")
    waiting_reason: str = Field("", description="why a queued job waits (the resource that blocks it, the "
                                "policy's choice, a back-off); empty unless queued")

    @computed_field(description="seconds from submit to its end (queueing included); None until it ended")
    @property
    def duration_s(self) -> float | None:
        """Submit → end: what a user waited for the job, the live service's JCT. Computed, not
        stored, so it can never disagree with the two times it comes from."""
        if self.finished_at is None or self.status not in FINISHED:
            return None
        return max(0.0, self.finished_at - self.submitted_at)


class EventView(BaseModel):
    """Something that happened to a job (submitted, started, resized, failed-run, done...)."""

    job_id: str
    time: float
    kind: str
    message: str = ""
    data: dict = {}


#: Statuses `Store.retry` puts back in the queue, and those `Store.delete` may remove.
RETRYABLE: frozenset[str] = frozenset({"failed", "cancelled"})
DELETABLE: frozenset[str] = FINISHED


class WrongState(Exception):
    """The job exists but is not in a status the operation applies to (HTTP 409)."""


#: JobView fields `Store.update` may write.
UPDATABLE: frozenset[str] = frozenset(JobView.model_fields) - {"id", "spec", "submitted_at"}


def format_job_id(seq: int) -> str:
    return f"{_ID_PREFIX}{seq:06d}"


def parse_job_id(job_id: str) -> int | None:
    """The row number behind an id, or None for anything that is not exactly one of our ids."""
    if not isinstance(job_id, str) or not job_id.startswith(_ID_PREFIX):
        return None
    digits = job_id[len(_ID_PREFIX):]
    if not digits.isascii() or not digits.isdigit():
        return None
    seq = int(digits)
    return seq if format_job_id(seq) == job_id and 0 < seq < 2**62 else None
