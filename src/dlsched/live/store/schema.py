"""The store's tables (SQLAlchemy declarative models) and the one migration they need.

Jobs, their events, settings (`dlsched_meta`) and the owner's lease row. `create_all` only
creates missing tables, so `_add_missing_columns` brings a store made by an older version up to
date. The names are the store's own: only `store.py` uses them; everything else sees
`views.py`.
"""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Double, ForeignKey, Integer, String, Text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class _Base(DeclarativeBase):
    pass


class _Job(_Base):
    __tablename__ = "dlsched_jobs"
    # AUTOINCREMENT on SQLite (a serial on PostgreSQL): ids are never handed out twice, even
    # after the newest job's row was deleted by hand.
    __table_args__ = {"sqlite_autoincrement": True}

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str | None] = mapped_column(Text, nullable=True)
    spec: Mapped[dict] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), index=True)
    submitted_at: Mapped[float] = mapped_column(Double)
    started_at: Mapped[float | None] = mapped_column(Double, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Double, nullable=True)
    steps_done: Mapped[int] = mapped_column(Integer, default=0)
    loss: Mapped[float | None] = mapped_column(Double, nullable=True)
    steps_per_s: Mapped[float | None] = mapped_column(Double, nullable=True)
    workers: Mapped[int] = mapped_column(Integer, default=0)
    ps: Mapped[int] = mapped_column(Integer, default=0)
    nodes: Mapped[list] = mapped_column(JSON, default=list)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str] = mapped_column(Text, default="")
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    job_dir: Mapped[str | None] = mapped_column(Text, nullable=True)
    # nullable, no default: `_add_missing_columns` adds it to an older store as NULL (not known)
    run_time_s: Mapped[float | None] = mapped_column(Double, nullable=True)
    # server_default: `_add_missing_columns` adds it to a store made before it existed
    waiting_reason: Mapped[str] = mapped_column(Text, default="", server_default="")
    # `<namespace>/<uid>` of the DLJob that stands for this job on Kubernetes: its source, or its mirror
    # when the job came through the REST API; NULL: none (yet). The DLJob door's key (live/api/dljobs.py)
    dljob: Mapped[str | None] = mapped_column(String(128), nullable=True, index=True)


class _Event(_Base):
    __tablename__ = "dlsched_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_seq: Mapped[int] = mapped_column(ForeignKey("dlsched_jobs.seq", ondelete="CASCADE"), index=True)
    time: Mapped[float] = mapped_column(Double)
    kind: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text, default="")
    data: Mapped[dict] = mapped_column(JSON, default=dict)


class _Meta(_Base):
    __tablename__ = "dlsched_meta"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class _Lease(_Base):
    """At most one row: the service that owns this store (see `dlsched.live.store.lease`)."""

    __tablename__ = "dlsched_lease"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # always 1: the primary key makes it one row
    owner_id: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(Text)
    pid: Mapped[int] = mapped_column(Integer)
    proc_started: Mapped[float] = mapped_column(Double)
    port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    since: Mapped[float] = mapped_column(Double)
    heartbeat_at: Mapped[float] = mapped_column(Double)
    ttl: Mapped[float] = mapped_column(Double)
    pid_ns: Mapped[str] = mapped_column(Text, default="", server_default="")


#: The columns of the lease row, as `Store.lease_holder` returns them.
LEASE_FIELDS: tuple[str, ...] = ("owner_id", "host", "pid", "proc_started", "port", "since", "heartbeat_at", "ttl",
                                 "pid_ns")
_LEASE_ROW = 1


def _add_missing_columns(engine: Engine) -> None:
    """Add columns this version declares to tables an older version created (`create_all` only
    creates missing tables). Every such column has a server default, so old rows get a value."""
    from sqlalchemy import inspect, text

    insp = inspect(engine)
    with engine.begin() as conn:
        for table in _Base.metadata.sorted_tables:
            have = {c["name"] for c in insp.get_columns(table.name)}
            for col in table.columns:
                if col.name in have:
                    continue
                kind = col.type.compile(dialect=engine.dialect)
                default = col.server_default.arg if col.server_default is not None else None
                clause = f" NOT NULL DEFAULT '{default}'" if isinstance(default, str) else ""
                conn.execute(text(f'ALTER TABLE {table.name} ADD COLUMN {col.name} {kind}{clause}'))
