"""Opening the agent SQLite file: driver choice, sqlite-vec, WAL, and migrations.

The stock `sqlite3` of many Python builds cannot load extensions; then `pysqlite3` (a wheel with
its own SQLite) is tried, and if sqlite-vec still cannot load, vector search runs in-process with
numpy. `Database.vector_backend` says which, and `pinch memory status` reports it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from common.private_files import PRIVATE_FILE_MODE, make_private_dirs
from memory.errors import DatabaseCorruptError, DatabaseError, NewerSchemaError
from memory.store.cjk_keywords import CJK_KEYWORDS
from memory.store.migrations import apply_migrations
from memory.store.schema import apply

T = TypeVar("T")

BUSY_TIMEOUT_S = 10.0  # how long a write waits for another process's write to finish
# What SQLite says about a damaged file: "database disk image is malformed", "file is not a
# database", "database corruption at line …", "malformed database schema".
_CORRUPTION_WORDS = ("malformed", "not a database", "corrupt")
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


def corruption_advice(path: Path | str, detail: str) -> str:
    """One paragraph for a damaged database: what happened, what to do, what is lost."""
    return (
        f"The agent database {path} is damaged, not a valid SQLite database ({detail}). Your "
        "memory files are safe. Move the "
        f"database aside (mv {path} {path}.broken) and run `pinch memory index`: the index is "
        "rebuilt from your files. Lost with the old file: conversation transcripts and chat "
        "history not yet saved to memory files (try `sqlite3 FILE.broken .recover` to rescue "
        "them) and the embedding cache (recomputed)."
    )


def is_corruption(exc: BaseException) -> bool:
    """True for SQLite's "the file is damaged" errors, from sqlite3 or pysqlite3."""
    if isinstance(exc, DatabaseCorruptError):
        return True
    if isinstance(exc, DatabaseError) or not any(
        c.__name__ == "DatabaseError" for c in type(exc).__mro__
    ):
        return False  # not from an SQLite driver
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+: SQLITE_CORRUPT, SQLITE_NOTADB
    if isinstance(code, int) and code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return True
    message = str(exc).lower()
    return any(word in message for word in _CORRUPTION_WORDS)


def as_corruption(exc: BaseException, path: Path | str) -> DatabaseCorruptError | None:
    """`exc` as a DatabaseCorruptError with advice if it reports a damaged file, else None."""
    if isinstance(exc, DatabaseCorruptError):
        return exc
    if is_corruption(exc):
        return DatabaseCorruptError(corruption_advice(path, str(exc)))
    return None


def _locked_message(path: Path) -> str:
    return (
        f"The agent database {path} is locked by another process (is a Pinch gateway "
        "running?). Stop it or wait, then try again."
    )


def opened_when_free(open_: Callable[[], T], *, tries: int = 5, first_wait_s: float = 1.0) -> T:
    """`open_()` (something that opens an agent database), tried again while another process
    holds the database's lock — several gateways starting at once create and migrate the same
    agents' databases — waiting 1, 2, 4, 8 s between tries (beyond each try's own busy
    timeout); the last try's DatabaseError otherwise."""
    wait = first_wait_s
    for _ in range(tries - 1):
        try:
            return open_()
        except DatabaseError as exc:
            if "locked by another process" not in str(exc):
                raise
        time.sleep(wait)
        wait *= 2
    return open_()


def is_busy(exc: Exception) -> bool:
    """Whether SQLite refused because another connection holds the lock it needs."""
    return "locked" in str(exc) or "busy" in str(exc)


def _load_driver(want_extensions: bool) -> tuple[Any, str]:
    """The DB-API module to use: stdlib sqlite3 if it can load extensions, else pysqlite3.

    One SQLite library per process, whatever the caller wants: two copies of SQLite in one
    process don't see each other's POSIX locks on the same file (closing one library's
    descriptor drops the other's locks), which can let another process write under a reader
    or, for writers, damage the database. `want_extensions` is kept for callers' clarity."""
    del want_extensions
    return _process_driver()


def sqlite_driver() -> Any:
    """The DB-API module this process uses for SQLite (see `_load_driver`): a store that opens
    a connection of its own (a backup's copy) must use the same one."""
    return _process_driver()[0]


@functools.cache
def _process_driver() -> tuple[Any, str]:
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
    # What a store keeps with the connection it belongs to, by the store's name (recall signals
    # waiting for the write lock, say), so every store object on this database shares it.
    store_state: dict[str, Any] = field(default_factory=dict)

    @property
    def vector_backend(self) -> str:
        return "sqlite-vec" if self.vec_version else "numpy"

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """BEGIN IMMEDIATE … COMMIT (ROLLBACK on error), holding the process-level lock.

        A damaged file surfaces as DatabaseCorruptError (with advice), whichever statement met it.
        """
        with self.lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except Exception as exc:
                if is_busy(exc):
                    raise DatabaseError(_locked_message(self.path)) from exc
                raise self._corrupt_or(exc) from exc
            try:
                yield self.conn
            except BaseException as exc:
                with contextlib.suppress(Exception):  # a damaged file may refuse this too
                    self.conn.execute("ROLLBACK")
                if isinstance(exc, Exception):
                    raise self._corrupt_or(exc) from exc
                raise
            else:
                try:
                    self.conn.execute("COMMIT")
                except Exception as exc:
                    raise self._corrupt_or(exc) from exc

    def execute(self, sql: str, params: Any = ()) -> list[Any]:
        """All rows of one statement; DatabaseCorruptError (with advice) if the file is damaged."""
        with self.lock:
            try:
                return list(self.conn.execute(sql, params).fetchall())
            except Exception as exc:
                raise self._corrupt_or(exc) from exc

    def quick_check(self) -> list[str]:
        """Problems `PRAGMA quick_check` finds (empty: the file is sound). Reads every page."""
        with self.lock:
            try:
                rows = self.conn.execute("PRAGMA quick_check").fetchall()
            except Exception as exc:
                if is_corruption(exc):
                    return [str(exc)]
                raise
        found = [str(r[0]) for r in rows]
        return [] if found == ["ok"] else found

    def check_integrity(self) -> None:
        """Raise DatabaseCorruptError with advice if `quick_check` finds a problem."""
        problems = self.quick_check()
        if problems:
            detail = problems[0] if len(problems) == 1 else f"{problems[0]}; +{len(problems) - 1}"
            raise DatabaseCorruptError(corruption_advice(self.path, detail))

    def _corrupt_or(self, exc: Exception) -> Exception:
        return as_corruption(exc, self.path) or exc

    def close(self) -> None:
        with self.lock:
            self.conn.close()


def in_batches(db: Database, batch: Callable[[Any, int], tuple[int, int | None]]) -> int:
    """Run `batch(conn, after)` a transaction at a time until it says it is done; returns the
    rows it changed in all. `batch` handles the rows after key `after` and returns (rows
    changed, the last key it saw — None when nothing was left): a long rewrite never holds the
    write lock for long, and an interruption loses at most one batch's work (redone next time)."""
    done, last = 0, 0
    while True:
        with db.transaction() as conn:
            n, seen = batch(conn, last)
        done += n
        if seen is None:
            return done
        last = seen


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


def quick_check_read_only(path: Path, *, timeout_s: float = 5.0) -> list[str]:
    """Problems `PRAGMA quick_check` finds in the file at `path` (empty: it is sound), on a
    read-only connection: nothing is created or changed, no migration runs."""
    driver, _ = _load_driver(False)
    try:
        conn = driver.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout_s)
        try:
            rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check").fetchall()]
        finally:
            conn.close()
    except driver.DatabaseError as exc:
        return [str(exc)]
    return [] if rows == ["ok"] else rows


def _set_wal(conn: Any, driver: Any) -> None:
    """Switch a new database to WAL. The switch needs the exclusive lock, and SQLite answers
    BUSY at once, without its busy handler (so as not to deadlock), when the read it began
    meets another connection's write — several gateways creating one agent's database at
    once: tried again for up to the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except driver.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


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
            f"Cannot create {exc.filename or path}: {exc.strerror}. Check that its folder can be "
            "made and written to (the agent's own database: under PINCH_HOME)."
        ) from exc
    try:
        conn = driver.connect(
            str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        _set_wal(conn, driver)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        vec = _try_load_vec(conn) if want_vec else None
        if vector_backend == "sqlite-vec" and vec is None:
            conn.close()
            raise DatabaseError(
                "sqlite-vec could not be loaded by this Python's SQLite. Install pysqlite3-binary "
                '(x86_64) or set [memory] vector_backend = "auto" to use the in-process search.'
            )
        try:
            apply_migrations(conn)
            apply(conn, CJK_KEYWORDS)  # rewrites memory_fts, which the memory set made first
        except NewerSchemaError as exc:
            conn.close()  # nothing written: the check comes before any migration
            raise NewerSchemaError(f"{path}: {exc}") from None
    except driver.DatabaseError as exc:
        message = str(exc)
        if is_busy(exc):
            raise DatabaseError(_locked_message(path)) from exc
        if is_corruption(exc):
            raise DatabaseCorruptError(corruption_advice(path, message)) from exc
        raise DatabaseError(f"Cannot open the agent database {path}: {message}") from exc
    version = conn.execute("SELECT sqlite_version()").fetchone()[0]
    return Database(path=path, conn=conn, driver=name, sqlite_version=version, vec_version=vec)
