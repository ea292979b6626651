"""The service's persistent record of jobs, their events and a few settings (SQLAlchemy 2.0).

The store is the only thing the REST API and the controller share: the API adds jobs and cancel
requests, the controller reads them and writes each job's status back. Keeping that channel in a
database (an SQLite file by default, PostgreSQL by URL) means a restarted service knows every job
it had, and the two sides never need to call each other.

Every method opens its own short session, so the store can be used from the API's worker threads
and the controller's thread at once. Updates write only the columns they are given (an UPDATE of
those columns, not a read-modify-write of the whole row), so the controller publishing progress
cannot undo a cancel request the API wrote a moment before.

The pieces around it: `views.py` (what it hands out: JobView, EventView, statuses, ids),
`schema.py` (the tables and their migration), `engine.py` (opening a URL, masking its
password).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterable

from sqlalchemy import select, update
from sqlalchemy.exc import DatabaseError, IntegrityError
from sqlalchemy.orm import sessionmaker

from dlsched.core.errors import ConfigError
from dlsched.live.spec import TrainJob
from dlsched.live.store.engine import _make_engine, mask_url, scrub
from dlsched.live.store.schema import (
    LEASE_FIELDS, _LEASE_ROW, _add_missing_columns, _Base, _Event, _Job, _Lease, _Meta,
)
from dlsched.live.store.views import (
    DELETABLE, JOB_STATUSES, RETRYABLE, UPDATABLE, EventView, JobView, WrongState, format_job_id, parse_job_id,
)


def _view(row: _Job) -> JobView:
    fields = {f: getattr(row, f) for f in UPDATABLE | {"submitted_at"}}
    return JobView(id=format_job_id(row.seq), spec=TrainJob.model_validate(row.spec), **fields)


def _status_filter(statuses: Iterable[str] | None) -> list:
    """The WHERE clause of "only jobs in `statuses`" (none: all jobs); an unknown status is a ValueError."""
    if statuses is None:
        return []
    wanted = [statuses] if isinstance(statuses, str) else list(statuses)
    bad = [x for x in wanted if x not in JOB_STATUSES]
    if bad:
        raise ValueError(f"unknown job status {bad[0]!r}; known: {', '.join(JOB_STATUSES)}")
    return [_Job.status.in_(wanted)]


def _checked_update(job_id: str, fields: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    bad = sorted(set(fields) - UPDATABLE)
    if bad:
        raise ValueError(f"cannot update job field(s) {', '.join(bad)}; updatable: {', '.join(sorted(UPDATABLE))}")
    if "status" in fields and fields["status"] not in JOB_STATUSES:
        raise ValueError(f"unknown job status {fields['status']!r}; known: {', '.join(JOB_STATUSES)}")
    if "nodes" in fields:
        fields = {**fields, "nodes": [str(n) for n in (fields["nodes"] or [])]}
    seq = parse_job_id(job_id)
    if seq is None:
        raise KeyError(f"no job {job_id!r}")
    return seq, fields


class Store:
    """Jobs, events and settings in one database. Safe to share between threads."""

    def __init__(self, url: str):
        self.url = url
        self.shown_url = mask_url(url)  # what messages may show of it
        self.engine = _make_engine(url)
        # SQLite allows one writer; serialising our own writes avoids busy retries between the
        # API's threads and the controller (other processes still wait on busy_timeout).
        self._write_lock = threading.RLock()
        try:
            _Base.metadata.create_all(self.engine)
            _add_missing_columns(self.engine)
        except DatabaseError as exc:  # unreachable server, bad credentials, a file that is not SQLite...
            self.engine.dispose()
            raise ConfigError(f"cannot open the database {self.shown_url}: {scrub(exc.orig, url)}") from None
        self._session = sessionmaker(self.engine, expire_on_commit=False)

    # ------------------------------------------------------------------ jobs
    def add(self, job: TrainJob, now: float | None = None, *, dljob: str | None = None) -> JobView:
        """Record a submitted job as queued; its id is the next in a sequence never reused.

        `dljob`: the job comes from that DLJob (`<namespace>/<uid>`); if a job of it is stored
        already, that job is returned and nothing is added (checked in the same transaction: a
        DLJob seen twice, e.g. by a restarted sync, is one job)."""
        now = time.time() if now is None else float(now)
        with self._write_lock, self._session.begin() as s:
            if dljob is not None:
                known = s.scalars(select(_Job).where(_Job.dljob == dljob).order_by(_Job.seq)).first()
                if known is not None:
                    return _view(known)
            row = _Job(name=job.name, spec=job.model_dump(mode="json"), status="queued", submitted_at=now,
                       dljob=dljob)
            s.add(row)
            s.flush()
            s.add(_Event(job_seq=row.seq, time=now, kind="submitted", message=f"{job.model} x{job.steps} steps"))
            return _view(row)

    def get(self, job_id: str) -> JobView | None:
        seq = parse_job_id(job_id)
        if seq is None:
            return None
        with self._session() as s:
            row = s.get(_Job, seq)
            return _view(row) if row is not None else None

    def list(self, statuses: Iterable[str] | None = None) -> list[JobView]:
        """Jobs oldest first, optionally only those in `statuses`."""
        stmt = select(_Job).where(*_status_filter(statuses)).order_by(_Job.seq)
        with self._session() as s:
            return [_view(r) for r in s.scalars(stmt)]

    def page(self, statuses: Iterable[str] | None = None, limit: int = 100, offset: int = 0,
             newest_first: bool = False) -> tuple[list[JobView], int]:
        """One page of `list`: at most `limit` jobs after skipping `offset`, oldest or newest first,
        and how many jobs match in all (what a client needs to page on)."""
        from sqlalchemy import func

        cond = _status_filter(statuses)
        order = _Job.seq.desc() if newest_first else _Job.seq
        stmt = select(_Job).where(*cond).order_by(order).limit(max(0, int(limit))).offset(max(0, int(offset)))
        with self._session() as s:
            total = int(s.scalar(select(func.count()).select_from(_Job).where(*cond)) or 0)
            return [_view(r) for r in s.scalars(stmt)], total

    def retry(self, job_id: str, now: float | None = None) -> JobView:
        """Queue a failed or cancelled job again; it resumes from its checkpoint (its job dir and
        steps are kept). KeyError: no such job; WrongState: not failed or cancelled."""
        seq = parse_job_id(job_id)
        now = time.time() if now is None else float(now)
        with self._write_lock, self._session.begin() as s:
            row = s.get(_Job, seq, with_for_update=True) if seq is not None else None
            if row is None:
                raise KeyError(f"no job {job_id!r}")
            if row.status not in RETRYABLE:
                raise WrongState(f"job {job_id} is {row.status}: only a failed or cancelled job can be retried")
            was = row.status
            s.execute(update(_Job).where(_Job.seq == seq).values(
                status="queued", finished_at=None, reason="", cancel_requested=False, waiting_reason="",
                workers=0, ps=0, nodes=[]))
            s.add(_Event(job_seq=seq, time=now, kind="retried",
                         message=f"was {was}: queued again, resumes from its checkpoint (step {row.steps_done})"))
            return _view(s.get(_Job, seq, populate_existing=True))

    def delete(self, job_id: str) -> JobView:
        """Remove an ended job, its events and its settings from the store; returns what it was.
        KeyError: no such job; WrongState: it has not ended (cancel it first)."""
        from sqlalchemy import delete

        seq = parse_job_id(job_id)
        with self._write_lock, self._session.begin() as s:
            row = s.get(_Job, seq, with_for_update=True) if seq is not None else None
            if row is None:
                raise KeyError(f"no job {job_id!r}")
            if row.status not in DELETABLE:
                raise WrongState(f"job {job_id} is {row.status}: only an ended job "
                                 f"({', '.join(sorted(DELETABLE))}) can be deleted; cancel it first")
            view = _view(row)
            s.execute(delete(_Event).where(_Event.job_seq == seq))
            s.execute(delete(_Meta).where(_Meta.key == f"alloc:{job_id}"))
            s.execute(delete(_Job).where(_Job.seq == seq))
            return view

    def update(self, job_id: str, **fields: Any) -> JobView:
        """Write the given JobView fields of one job. Unknown jobs are a KeyError, fields a ValueError."""
        seq, fields = _checked_update(job_id, fields)
        with self._write_lock, self._session.begin() as s:
            if fields:
                s.execute(update(_Job).where(_Job.seq == seq).values(**fields))
            row = s.get(_Job, seq, populate_existing=True)
            if row is None:
                raise KeyError(f"no job {job_id!r}")
            return _view(row)

    def update_many(self, updates: dict[str, dict[str, Any]]) -> None:
        """`update` for many jobs in one transaction (the controller's per-round progress: one
        commit instead of one per running job). Rows are not read back."""
        rows = [{"seq": seq, **fields} for seq, fields in (_checked_update(j, f) for j, f in updates.items())]
        if not rows:
            return
        with self._write_lock, self._session.begin() as s:
            for row in rows:
                seq = row.pop("seq")
                if row:
                    s.execute(update(_Job).where(_Job.seq == seq).values(**row))

    def dljob_links(self) -> dict[str, str]:
        """job id -> `<namespace>/<uid>` of the DLJob that stands for it, for every job that has one."""
        stmt = select(_Job.seq, _Job.dljob).where(_Job.dljob.is_not(None))
        with self._session() as s:
            return {format_job_id(seq): uid for seq, uid in s.execute(stmt)}

    def link_dljob(self, job_id: str, dljob: str) -> None:
        """Record `dljob` (`<namespace>/<uid>`) as the DLJob that mirrors a job submitted elsewhere
        (KeyError: no such job)."""
        seq = parse_job_id(job_id)
        with self._write_lock, self._session.begin() as s:
            if seq is None or s.execute(update(_Job).where(_Job.seq == seq).values(dljob=dljob)).rowcount != 1:
                raise KeyError(f"no job {job_id!r}")

    def request_cancel(self, job_id: str) -> JobView | None:
        """Flag the job for the controller to cancel (idempotent); None if there is no such job."""
        seq = parse_job_id(job_id)
        if seq is None:
            return None
        with self._write_lock, self._session.begin() as s:
            row = s.get(_Job, seq)
            if row is None:
                return None
            if not row.cancel_requested:
                s.execute(update(_Job).where(_Job.seq == seq).values(cancel_requested=True))
                s.add(_Event(job_seq=seq, time=time.time(), kind="cancel-requested"))
                row = s.get(_Job, seq, populate_existing=True)
            return _view(row)

    # ------------------------------------------------------------------ events
    def add_event(self, job_id: str, kind: str, message: str = "", data: dict | None = None,
                  now: float | None = None) -> None:
        seq = parse_job_id(job_id)
        if seq is None:
            raise KeyError(f"no job {job_id!r}")
        now = time.time() if now is None else float(now)
        with self._write_lock, self._session.begin() as s:
            if s.get(_Job, seq) is None:
                raise KeyError(f"no job {job_id!r}")
            s.add(_Event(job_seq=seq, time=now, kind=kind, message=message, data=dict(data or {})))

    def events(self, job_id: str | None = None, limit: int = 1000) -> list[EventView]:
        """The newest `limit` events (of one job, or of all), oldest first."""
        stmt = select(_Event).order_by(_Event.id.desc()).limit(max(0, int(limit)))
        if job_id is not None:
            seq = parse_job_id(job_id)
            if seq is None:
                return []
            stmt = stmt.where(_Event.job_seq == seq)
        with self._session() as s:
            rows = list(s.scalars(stmt))
        return [EventView(job_id=format_job_id(r.job_seq), time=r.time, kind=r.kind, message=r.message or "",
                          data=dict(r.data or {})) for r in reversed(rows)]

    # ------------------------------------------------------------------ settings
    def get_meta(self, key: str) -> str | None:
        with self._session() as s:
            row = s.get(_Meta, key)
            return row.value if row is not None else None

    def set_meta(self, key: str, value: str) -> None:
        with self._write_lock, self._session.begin() as s:
            s.merge(_Meta(key=key, value=str(value)))

    # ------------------------------------------------------------------ the owner's lease
    def lease_holder(self) -> dict[str, Any] | None:
        """The lease row (LEASE_FIELDS), or None when no service owns the store."""
        with self._session() as s:
            row = s.get(_Lease, _LEASE_ROW)
            return {f: getattr(row, f) for f in LEASE_FIELDS} if row is not None else None

    def lease_swap(self, expected_owner: str | None, owner: dict[str, Any]) -> bool:
        """Write `owner` as the lease holder if the holder is still `expected_owner` (None: no
        holder); False when someone else got there first. A compare-and-swap on the owner id, so
        of two services taking over one stale lease exactly one wins, on SQLite and PostgreSQL."""
        values = {f: owner[f] for f in LEASE_FIELDS}
        with self._write_lock:
            try:
                with self._session.begin() as s:
                    if expected_owner is None:
                        s.add(_Lease(id=_LEASE_ROW, **values))
                        return True
                    done = s.execute(update(_Lease).where(_Lease.id == _LEASE_ROW,
                                                          _Lease.owner_id == expected_owner).values(**values))
                    return done.rowcount == 1
            except IntegrityError:  # another service inserted the row first
                return False

    def lease_renew(self, owner_id: str, heartbeat_at: float) -> bool:
        """Move the heartbeat of our lease; False when it is no longer ours."""
        with self._write_lock, self._session.begin() as s:
            done = s.execute(update(_Lease).where(_Lease.id == _LEASE_ROW, _Lease.owner_id == owner_id)
                             .values(heartbeat_at=heartbeat_at))
            return done.rowcount == 1

    def lease_release(self, owner_id: str) -> None:
        """Give the lease up (only if it is still ours)."""
        from sqlalchemy import delete

        with self._write_lock, self._session.begin() as s:
            s.execute(delete(_Lease).where(_Lease.id == _LEASE_ROW, _Lease.owner_id == owner_id))

    # ------------------------------------------------------------------ counts, lifetime
    def counts(self) -> dict[str, int]:
        """Jobs per status (every status present, zero when none): what /metrics exports."""
        from sqlalchemy import func

        out = dict.fromkeys(JOB_STATUSES, 0)
        with self._session() as s:
            for status, n in s.execute(select(_Job.status, func.count()).group_by(_Job.status)):
                out[status] = int(n)
        return out

    def close(self) -> None:
        self.engine.dispose()
