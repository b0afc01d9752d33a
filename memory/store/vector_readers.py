"""Read-only connections to the agent database for vector search, beside the main one.

SQLite releases Python's GIL while it works, so a search's vector reads on a connection of their
own run on the other core while the keyword query runs on the main one.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from typing import Any

from memory.store.db import Database


def open_plain_reader(db: Database) -> Any:
    """A bare read-only connection to `db`'s file through the same driver (no extension: it
    reads tables only). The caller closes it."""
    driver = importlib.import_module(type(db.conn).__module__)
    conn = driver.connect(str(db.path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.execute("PRAGMA query_only = ON")
    return conn


def open_reader(db: Database) -> Database:
    """A second, read-only `Database` on `db`'s file through the same driver (with sqlite-vec
    when `db` has it). The caller closes it."""
    driver = importlib.import_module(type(db.conn).__module__)
    conn = driver.connect(str(db.path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.execute("PRAGMA query_only = ON")
    vec = None
    if db.vec_version:
        with contextlib.suppress(Exception):
            import sqlite_vec

            conn.enable_load_extension(True)
            sqlite_vec.load(conn)
            conn.enable_load_extension(False)
            vec = db.vec_version
    return Database(db.path, conn, db.driver, db.sqlite_version, vec)


class SharedReader:
    """One read connection (`open_reader`), opened on first use and shared by a store's
    searches; thread-safe."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._conn: Database | None = None
        self._lock = threading.Lock()

    def get(self) -> Database:
        with self._lock:
            if self._conn is None:
                self._conn = open_reader(self.db)
            return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
