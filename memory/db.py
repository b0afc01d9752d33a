"""Opening the agent SQLite file: driver choice, sqlite-vec, WAL, and migrations.

The stock `sqlite3` of many Python builds cannot load extensions; then `pysqlite3` (a wheel with
its own SQLite) is tried, and if sqlite-vec still cannot load, vector search runs in-process with
numpy. `Database.vector_backend` says which, and `pinch memory status` reports it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory.errors import DatabaseError
from memory.migrations import apply_migrations
from memory.workspace import PRIVATE_FILE_MODE, make_private_dirs

BUSY_TIMEOUT_S = 10.0  # how long a write waits for another process's write to finish


def _locked_message(path: Path) -> str:
    return (
        f"The agent database {path} is locked by another process (is a Pinch gateway "
        "running?). Stop it or wait, then try again."
    )


def _is_busy(exc: Exception) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def _load_driver(want_extensions: bool) -> tuple[Any, str]:
    """The DB-API module to use: stdlib sqlite3 if it can load extensions, else pysqlite3."""
    if want_extensions:
        probe = sqlite3.connect(":memory:")
        try:
            if hasattr(probe, "enable_load_extension"):
                return sqlite3, "sqlite3"
        finally:
            probe.close()
        try:
            import pysqlite3.dbapi2 as pysqlite3

            return pysqlite3, "pysqlite3"
        except ImportError:
            pass
    return sqlite3, "sqlite3"


def _try_load_vec(conn: Any) -> str | None:
    """Load sqlite-vec into `conn`; return its version, or None with the reason swallowed."""
    try:
        import sqlite_vec

        conn.enable_load_extension(True)
        try:
            sqlite_vec.load(conn)
        finally:
            conn.enable_load_extension(False)
        return str(conn.execute("SELECT vec_version()").fetchone()[0])
    except Exception:
        return None


@dataclass
class Database:
    """One connection to the agent database, shared by the threads of one process.

    SQLite connections are not safe for concurrent use from several threads, so every use
    goes through `lock` (an RLock): `with db.lock: ...` or the `transaction()` helper.
    """

    path: Path
    conn: Any
    driver: str
    sqlite_version: str
    vec_version: str | None
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def vector_backend(self) -> str:
        return "sqlite-vec" if self.vec_version else "numpy"

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """BEGIN IMMEDIATE … COMMIT (ROLLBACK on error), holding the process-level lock."""
        with self.lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except Exception as exc:
                if _is_busy(exc):
                    raise DatabaseError(_locked_message(self.path)) from exc
                raise
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            else:
                self.conn.execute("COMMIT")

    def execute(self, sql: str, params: Any = ()) -> list[Any]:
        with self.lock:
            return list(self.conn.execute(sql, params).fetchall())

    def close(self) -> None:
        with self.lock:
            self.conn.close()


def _make_private(path: Path) -> None:
    """Create the database file 0600 if missing and tighten it and its -wal/-shm files.

    SQLite gives the -wal and -shm files the mode of the database file, so a private database
    keeps its journal private too.
    """
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, PRIVATE_FILE_MODE))
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        # Not ours to change (another owner, a folder): SQLite's own error will say more.
        with contextlib.suppress(FileNotFoundError, PermissionError):
            st = name.stat()
            if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077:
                os.chmod(name, PRIVATE_FILE_MODE)


def open_database(path: Path, *, vector_backend: str = "auto") -> Database:
    """Open (creating if needed) and migrate the agent database at `path`.

    Raises DatabaseError with advice when the file is not a database, is locked, or its
    folder cannot be created.
    """
    want_vec = vector_backend in ("auto", "sqlite-vec")
    driver, name = _load_driver(want_vec)
    try:
        make_private_dirs(path.parent)
        _make_private(path)
    except OSError as exc:
        raise DatabaseError(
            f"Cannot create {path.parent}: {exc.strerror}. Check PINCH_HOME."
        ) from exc
    try:
        conn = driver.connect(
            str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        vec = _try_load_vec(conn) if want_vec else None
        if vector_backend == "sqlite-vec" and vec is None:
            conn.close()
            raise DatabaseError(
                "sqlite-vec could not be loaded by this Python's SQLite. Install pysqlite3-binary "
                '(x86_64) or set [memory] vector_backend = "auto" to use the in-process search.'
            )
        apply_migrations(conn)
    except driver.DatabaseError as exc:
        message = str(exc)
        if _is_busy(exc):
            raise DatabaseError(_locked_message(path)) from exc
        if "not a database" in message or "malformed" in message:
            raise DatabaseError(
                f"{path} is not a valid SQLite database ({message}). Your memory files are "
                f"untouched: move the file aside (mv {path} {path}.broken) and run "
                "`pinch memory index` to rebuild the index from them."
            ) from exc
        raise DatabaseError(f"Cannot open the agent database {path}: {message}") from exc
    version = conn.execute("SELECT sqlite_version()").fetchone()[0]
    return Database(path=path, conn=conn, driver=name, sqlite_version=version, vec_version=vec)
