"""`[store]`: which database holds the agent's stores. A leaf module (pydantic only), so
app/config.py can hold it.

    [store]
    backend = "postgres"            # default "sqlite": one file per agent, nothing to run
    # dsn from the environment:     PINCH_STORE__DSN=postgresql://pinch:PASSWORD@db:5432/pinch

The DSN may carry a password, so it is a secret: a DSN with a password is refused in
config.toml (set PINCH_STORE__DSN, or keep the password in ~/.pgpass), it is a `SecretStr`
(never printed by the settings' repr), and `redacted_dsn` is what any message may show.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

StoreBackend = Literal["sqlite", "postgres"]
SECRET_FIELDS = {"store": ("dsn",)}  # like channel_config.SECRET_FIELDS: environment only
# The password of a URL DSN (scheme://user:PASSWORD@host) and of a key/value one (password=…).
# A password is taken up to the authority's last '@', so one holding a raw '@' is hidden whole.
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)([^\s/?#]*)(@)", re.IGNORECASE)
_URL_AUTHORITY = re.compile(r"^\s*[a-z][a-z0-9+.-]*://([^/?#]*)", re.IGNORECASE)
_KV_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def dsn_has_password(dsn: str) -> bool:
    """Whether `dsn` (URL or key=value form) carries a non-empty password."""
    url = _URL_PASSWORD.search(dsn)
    return bool(url and url.group(2)) or bool(_KV_PASSWORD.search(dsn))


def dsn_problem(dsn: str) -> str | None:
    """Why `dsn` cannot be used as written (one line, nothing of it shown), or None: a URL whose
    user or password holds a raw '@' reaches the wrong host, with part of the password shown in
    the driver's error."""
    url = _URL_AUTHORITY.match(dsn)
    if url and url.group(1).count("@") > 1:
        return (
            "The DSN's password (or user) holds an '@': in a postgresql:// URL write each '@' "
            "in it as %40 (URL-encoded), then run it again."
        )
    return None


def redacted_dsn(dsn: str) -> str:
    """`dsn` with its password replaced by "[redacted]" (what a message or log may show)."""
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + ("[redacted]" if m.group(2) else "") + "@", dsn)
    return _KV_PASSWORD.sub(lambda m: m.group(1) + "[redacted]", text)


class StoreConfig(BaseModel):
    """`[store]` (env PINCH_STORE__BACKEND, PINCH_STORE__DSN, PINCH_STORE__POOL_MAX_SIZE)."""

    model_config = ConfigDict(extra="forbid")

    backend: StoreBackend = "sqlite"
    # libpq connection string or URL; needed for "postgres". Environment only when it carries
    # a password: PINCH_STORE__DSN.
    dsn: SecretStr | None = None
    pool_min_size: int = Field(default=1, ge=0, le=64)  # connections kept open per process
    pool_max_size: int = Field(default=8, ge=1, le=256)  # at most this many at once
    connect_timeout_s: float = Field(default=10.0, gt=0, le=300)  # waiting for a free connection

    @model_validator(mode="after")
    def _postgres_needs_a_dsn(self) -> StoreConfig:
        if self.backend == "postgres" and not (self.dsn and self.dsn.get_secret_value().strip()):
            raise ValueError(
                'backend = "postgres" needs a connection string: set PINCH_STORE__DSN (or one '
                "agent's own PINCH_AGENTS__NAME__STORE__DSN), e.g. "
                "PINCH_STORE__DSN=postgresql://pinch:PASSWORD@localhost:5432/pinch"
            )
        problem = dsn_problem(self.dsn.get_secret_value()) if self.dsn else None
        if problem:
            raise ValueError(problem)
        if self.pool_min_size > self.pool_max_size:
            raise ValueError("pool_min_size must not be larger than pool_max_size")
        return self

    def dsn_text(self) -> str:
        """The DSN itself (a secret: hand it to the driver, never to a message)."""
        return self.dsn.get_secret_value() if self.dsn else ""
