"""The databases the store, lease and service tests run on: SQLite always, PostgreSQL when
DLSCHED_TEST_PG_URL names a server (`.ci/run` starts one; needs `pip install 'dlsched[postgres]'`).

Each PostgreSQL test gets its own schema (dropped afterwards) through the URL's search_path, so
tests running in parallel (pytest -n 2) on one database never see each other's tables.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

#: A PostgreSQL database the tests may create schemas in, e.g.
#: postgresql+psycopg://user:password@127.0.0.1:5432/test. Without it the tests run on SQLite only.
PG_URL = os.environ.get("DLSCHED_TEST_PG_URL")
KINDS = ["sqlite", "postgresql"]


def _in_schema(url: str, schema: str) -> str:
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}', safe='')}"


def make_db_url(kind: str, tmp_path: Path):
    """A fresh, empty database of `kind` (a generator: the PostgreSQL schema is dropped after)."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'db' / 'dlsched.db'}"  # parent folder created on demand
        return
    if not PG_URL:
        pytest.skip("set DLSCHED_TEST_PG_URL to run the database tests on PostgreSQL too")
    from sqlalchemy import create_engine, text

    schema = f"t_{uuid.uuid4().hex[:16]}"
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield _in_schema(PG_URL, schema)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@pytest.fixture(params=KINDS)
def db_url(request, tmp_path):
    """An empty database URL, once on SQLite and once on PostgreSQL (skipped without a server)."""
    yield from make_db_url(request.param, tmp_path)
