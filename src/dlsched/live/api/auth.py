"""Optional bearer-token authentication of the API, and the secrets the service and CLI read.

Without a token the API is open, which is why it binds 127.0.0.1 by default. With a token (from a
file, `--token-file` / `token_file:`, or the DLSCHED_TOKEN environment variable; never a flag, so
it is not visible in `ps`), every request that changes something (POST, PUT, PATCH, DELETE: submit
and cancel today, and whatever endpoint is added later by its method) needs
`Authorization: Bearer <token>`, else 401. Reads stay open (the status page, job lists, metrics)
unless `auth: all`, which closes every API route (`/healthz` stays open for liveness probes,
FastAPI's own `/docs` and `/openapi.json` too: they describe the API, not its jobs).

The check is one app-level FastAPI dependency, so a route added later is covered by its method
without anyone remembering to add it. Tokens are compared with `secrets.compare_digest`.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from dlsched.core.errors import ConfigError

log = logging.getLogger("dlsched.auth")

TOKEN_ENV = "DLSCHED_TOKEN"
AuthScope = Literal["writes", "all"]
#: Methods that change something: they need the token whenever one is set.
WRITE_METHODS: frozenset[str] = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Always open, whatever the scope: liveness probes carry no token.
OPEN_PATHS: frozenset[str] = frozenset({"/healthz"})


def read_secret_file(path: Path, what: str) -> str:
    """The one line of secret in `path` (a token, a database URL), stripped; one-line errors.
    Warns when other users may read the file."""
    path = Path(path).expanduser()
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise ConfigError(f"{what} {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} {path}: cannot be read ({exc.__class__.__name__}: "
                          f"{getattr(exc, 'strerror', None) or 'not UTF-8 text'})") from None
    if not text:
        raise ConfigError(f"{what} {path}: empty")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s %s can be read by other users (mode %s): chmod 600 it", what, path, oct(mode & 0o777))
    return text


def resolve_token(token_file: Path | None, env: Mapping[str, str] = os.environ) -> str | None:
    """The API token: from `token_file` if given, else DLSCHED_TOKEN, else None (no authentication)."""
    if token_file is not None:
        return read_secret_file(token_file, "token file")
    value = env.get(TOKEN_ENV)
    if value is None:
        return None
    if not value.strip():
        raise ConfigError(f"{TOKEN_ENV} is set but empty: unset it, or give it the token")
    return value.strip()


@dataclass(frozen=True)
class ApiAuth:
    """A token and what it guards; `create_app(..., auth=ApiAuth(...))` installs the check."""

    token: str = field(repr=False)  # never in a log line or a traceback
    scope: AuthScope = "writes"

    def __post_init__(self) -> None:
        if not self.token:
            raise ValueError("an empty token would let every request in")
        if self.scope not in ("writes", "all"):
            raise ValueError(f"unknown auth scope {self.scope!r}: 'writes' or 'all'")

    def needs_token(self, method: str, path: str) -> bool:
        if path in OPEN_PATHS:
            return False
        return self.scope == "all" or method.upper() in WRITE_METHODS

    def dependencies(self) -> list[Any]:
        """The app-level dependency list for FastAPI(dependencies=...)."""
        bearer = HTTPBearer(auto_error=False, description=(
            "the service's token; needed for POST/PUT/PATCH/DELETE" + (" and every read" if self.scope == "all" else "")))
        expected = self.token.encode()

        def check_token(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
            if not self.needs_token(request.method, request.url.path):
                return
            given = credentials.credentials.encode() if credentials is not None else b""
            if not given or not secrets.compare_digest(given, expected):
                problem = "wrong token" if given else "this service needs a token"
                raise HTTPException(401, f"{problem}: send Authorization: Bearer <token>",
                                    headers={"WWW-Authenticate": "Bearer"})

        return [Depends(check_token)]
