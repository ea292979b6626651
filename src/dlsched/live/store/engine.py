"""Opening the database a URL names, without ever showing its password.

`_make_engine` turns a URL into an engine (an SQLite file with WAL, or a server such as
PostgreSQL) and every way that can go wrong into one `ConfigError` line; `mask_url` and `scrub`
are what every message and log line shows of a URL or of a driver's error. Kept apart from the
store's queries because it is about connecting and secrets, not jobs.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from dlsched.core.errors import ConfigError

#: user:password@ of a URL: everything up to the last @ is the secret (an unencoded password may
#: hold @ or /, and SQLAlchemy would then parse part of it as the host: so no parser is trusted here).
_PASSWORD = re.compile(r"(?P<keep>//[^/?#@:]*:)(?P<secret>.*)@", re.S)


def mask_url(url: str) -> str:
    """`url` with its password replaced by ***, even when it does not parse: what every message
    and log line shows of a database URL (a malformed one must not echo its secret)."""
    return _PASSWORD.sub(lambda m: f"{m['keep']}***@", str(url))


def scrub(text: str, url: str) -> str:
    """`text` (a driver's or parser's error) on one line, with `url`'s password (raw or decoded) masked."""
    from urllib.parse import unquote

    m = _PASSWORD.search(str(url))
    secrets = {m["secret"], unquote(m["secret"])} if m else set()
    try:
        secrets.add(make_url(url).password or "")
    except (ArgumentError, ValueError, TypeError):
        pass
    text = " ".join(str(text).split())
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _make_engine(url: str) -> Engine:
    shown = mask_url(url)
    secret = _PASSWORD.search(url)
    if secret and "@" in secret["secret"]:  # SQLAlchemy would take what follows the first @ for the host
        raise ConfigError(f"bad database URL {shown}: its password holds an '@'; percent-encode it as %40")
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ConfigError(f"bad database URL {shown}: {scrub(exc, url)}") from None
    if parsed.get_backend_name() != "sqlite":
        try:
            return create_engine(url, pool_pre_ping=True)
        except ImportError as exc:
            hint = " (pip install 'dlsched[postgres]')" if parsed.get_backend_name() == "postgresql" else ""
            raise ConfigError(f"no database driver for {parsed.drivername!r}: {scrub(exc, url)}{hint}") from None
        except (ArgumentError, ValueError) as exc:  # NoSuchModuleError: a scheme SQLAlchemy has no dialect for
            raise ConfigError(f"bad database URL {shown}: {scrub(exc, url)} (expected e.g. sqlite:///path/dlsched.db or "
                              "postgresql+psycopg://user@host/db)") from None
    memory = parsed.database in (None, "", ":memory:")
    if not memory:
        try:
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the folder of the database {shown}: {exc}") from None
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 30},
        # one shared connection for an in-memory database, or every session would see its own
        **({"poolclass": StaticPool} if memory else {}),
    )

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record) -> None:  # WAL: the API reads while the controller writes
        cur = dbapi_conn.cursor()
        if not memory:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    return engine
