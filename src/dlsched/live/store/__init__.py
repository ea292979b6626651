"""The job store (SQLAlchemy: SQLite or PostgreSQL), its schema and views, and the leases that
make one service its only owner."""

from dlsched.live.store.jobs import Store

__all__ = ["Store"]
