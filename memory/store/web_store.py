"""The web page's logins: one-time login tokens and browser sessions, shared by every process
of one agent (`pinch web login` writes a token; the gateway that serves the page redeems it).

    store = SqliteWebAuthStore(db)                       # applies the "web" migration set
    store.add_token(token_hash, now, expires_at)
    store.redeem_token(token_hash, now)                  # True once, before it expires
    store.add_session(session_hash, now, expires_at)
    store.session_alive(session_hash, now); store.end_session(session_hash)

Only hashes are stored (sha256 of the token or session id, made by app/web/auth.py): the
database, a backup of it or a look over the owner's shoulder at `sqlite3` gives nothing that
logs in. Times are POSIX seconds from the caller's clock.
"""

from __future__ import annotations

from typing import Any, Protocol

from memory.store.db import Database
from memory.store.schema import MigrationSet, apply


class WebAuthStore(Protocol):
    """Login tokens and sessions of the web page. What every implementation promises:

    - `redeem_token` is atomic: of two callers presenting the same unused, unexpired token, one
      gets True and marks it used in the same transaction; every later call gets False.
    - A token or session whose `expires_at` ≤ `now` counts as gone.
    - `end_session` ends a session for good (logout); `prune` removes what expired.
    """

    def add_token(self, token_hash: str, now: float, expires_at: float) -> None: ...

    def redeem_token(self, token_hash: str, now: float) -> bool: ...

    def add_session(self, session_hash: str, now: float, expires_at: float) -> None: ...

    def session_alive(self, session_hash: str, now: float) -> bool: ...

    def end_session(self, session_hash: str) -> None: ...

    def prune(self, now: float) -> None: ...


# -- migrations (the "web" set; issue 16, the web control page) --------------------------------


def w001_web_logins(conn: Any) -> None:
    conn.executescript(
        """
        -- One-time login links printed by `pinch web login` (sha256 of the token, never it).
        CREATE TABLE web_login_tokens (
            token_hash TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            used_at REAL
        );
        -- Logged-in browsers (sha256 of the cookie's session id, never it).
        CREATE TABLE web_sessions (
            session_hash TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL
        );
        """
    )


WEB = MigrationSet("web", [w001_web_logins])


class SqliteWebAuthStore:
    """`WebAuthStore` over the agent database (tables `web_login_tokens`, `web_sessions`)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        with db.lock:
            apply(db.conn, WEB)

    def add_token(self, token_hash: str, now: float, expires_at: float) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO web_login_tokens (token_hash, created_at, expires_at) "
                "VALUES (?, ?, ?)",
                (token_hash, now, expires_at),
            )

    def redeem_token(self, token_hash: str, now: float) -> bool:
        with self.db.transaction() as conn:
            cursor = conn.execute(
                "UPDATE web_login_tokens SET used_at = ? "
                "WHERE token_hash = ? AND used_at IS NULL AND expires_at > ?",
                (now, token_hash, now),
            )
            return bool(cursor.rowcount == 1)

    def add_session(self, session_hash: str, now: float, expires_at: float) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO web_sessions (session_hash, created_at, expires_at) VALUES (?, ?, ?)",
                (session_hash, now, expires_at),
            )

    def session_alive(self, session_hash: str, now: float) -> bool:
        rows = self.db.execute(
            "SELECT 1 FROM web_sessions WHERE session_hash = ? AND expires_at > ?",
            (session_hash, now),
        )
        return bool(rows)

    def end_session(self, session_hash: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM web_sessions WHERE session_hash = ?", (session_hash,))

    def prune(self, now: float) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM web_sessions WHERE expires_at <= ?", (now,))
            # Used or expired tokens are kept a day, then go (nothing in them logs in).
            conn.execute("DELETE FROM web_login_tokens WHERE expires_at <= ?", (now - 86400,))
