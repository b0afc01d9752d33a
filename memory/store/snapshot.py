"""Consistent copies of a live agent database, and what a backup's manifest says about one.

    snapshots = SqliteSnapshots()                  # behind `DatabaseSnapshots`
    snapshots.copy(live, copy)                     # SQLite's online backup API, one moment
    facts = snapshots.facts(copy)                  # row counts and applied migrations
    newer = unknown_migrations(facts.migrations)   # what this code could not read

The copy is taken with SQLite's online backup API in one step, inside one read transaction: in
WAL mode (open_database sets it) a reader never blocks a writer, so the gateway's turns keep
committing while the copy runs (their commits go to the WAL; the copy sees the database as it
was when it started). A file copy of a live database could catch half a transaction; this
cannot. The copy is left in rollback-journal mode (one self-contained file) and checked with
`PRAGMA quick_check` before anyone archives it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from common.private_files import PRIVATE_FILE_MODE
from memory.errors import DatabaseCorruptError, DatabaseError
from memory.store.db import BUSY_TIMEOUT_S, corruption_advice, sqlite_driver
from memory.store.schema import MigrationSet

STEP_PAGES = 2048  # pages copied per step (8 MB at SQLite's default 4 KB page)
BUSY_PAUSE_S = 0.01  # how long a step that found the database busy waits before trying again

# What a manifest counts, by the name it gives them: (table, condition).
COUNTED: dict[str, tuple[str, str]] = {
    "transcript_events": ("transcript_events", ""),
    "sessions": ("sessions", ""),
    "chunks": (
        "memory_chunks",
        "WHERE generation = (SELECT id FROM memory_generations WHERE state = 'active')",
    ),
    "jobs": ("jobs", ""),
    "intents": ("intents", ""),
    "pairing_approvals": ("approved_senders", ""),
}


@dataclass(frozen=True)
class DatabaseFacts:
    """What a backup records of one database: counts (None: the table does not exist yet) and
    the applied migrations of each migration set, by the set's name."""

    counts: dict[str, int | None]
    migrations: dict[str, list[str]] = field(default_factory=dict)
    sqlite_version: str = ""  # the SQLite that wrote it ("" for another engine)
    engine: str = "sqlite"  # or "postgresql <server version>"


class DatabaseSnapshots(Protocol):
    """Consistent copies of a live agent database and what a manifest records of one.

    `copy` makes a new file holding the database as it was at one moment, without blocking
    its writers for longer than a turn can wait, and raises DatabaseCorruptError if the copy is
    damaged; `facts` reads counts and applied migrations without changing the file."""

    def copy(self, source: Path, dest: Path) -> None: ...

    def facts(self, path: Path) -> DatabaseFacts: ...


class SqliteSnapshots:
    """`DatabaseSnapshots` of SQLite files (`snapshot_database`, `database_facts`)."""

    def copy(self, source: Path, dest: Path) -> None:
        snapshot_database(source, dest)

    def facts(self, path: Path) -> DatabaseFacts:
        return database_facts(path)


@contextlib.contextmanager
def _connect(path: Path, *, read_only: bool) -> Iterator[Any]:
    driver = sqlite_driver()
    target = f"file:{path}?mode=ro" if read_only else str(path)
    try:
        conn = driver.connect(target, uri=read_only, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except driver.Error as exc:
        raise DatabaseError(f"Cannot open the database {path}: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        yield conn
    finally:
        conn.close()


def snapshot_database(source: Path, dest: Path) -> None:
    """Copy the live database at `source` to the new file `dest` (0600), consistently, without
    blocking its writers; raise DatabaseCorruptError (with advice) if the copy is damaged."""
    driver = sqlite_driver()
    fd = dest.open("xb")  # a new file, never somebody else's
    fd.close()
    dest.chmod(PRIVATE_FILE_MODE)
    try:
        with _connect(source, read_only=False) as src, _connect(dest, read_only=False) as out:
            # One read transaction for every step: the copy is of one moment, and a write by
            # another process between steps cannot restart it (which, on a busy gateway,
            # could never end).
            src.execute("BEGIN")
            src.execute("SELECT count(*) FROM sqlite_master").fetchone()
            # Each step's pages go to disk before the next (fdatasync): a copy that let hundreds
            # of MB of dirty pages pile up would stall every other writer of the disk (the
            # gateway's commits among them) while the kernel wrote them back.
            with dest.open("rb") as handle:
                src.backup(
                    out,
                    pages=STEP_PAGES,
                    sleep=BUSY_PAUSE_S,
                    progress=lambda *_: os.fdatasync(handle.fileno()),
                )
            src.execute("COMMIT")
            # The commits made meanwhile waited in the WAL (a reader's snapshot keeps them
            # there); write them back here, so no turn's commit pays for that checkpoint.
            src.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            out.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
            problems = [str(r[0]) for r in out.execute("PRAGMA quick_check").fetchall()]
    except driver.Error as exc:
        raise DatabaseError(f"Could not copy the database {source}: {exc}") from exc
    if problems != ["ok"]:
        raise DatabaseCorruptError(corruption_advice(source, "; ".join(problems[:3])))


def database_facts(path: Path) -> DatabaseFacts:
    """Counts and applied migrations of the (closed, or live) database at `path`, read only."""
    driver = sqlite_driver()
    try:
        with _connect(path, read_only=True) as conn:
            conn.execute("BEGIN")  # one snapshot for every count
            tables = {
                str(r[0])
                for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
            counts: dict[str, int | None] = {}
            for name, (table, where) in COUNTED.items():
                needs = {table, "memory_generations"} if where else {table}
                counts[name] = (
                    int(conn.execute(f"SELECT count(*) FROM {table} {where}").fetchone()[0])
                    if needs <= tables
                    else None
                )
            migrations: dict[str, list[str]] = {}
            if "schema_migrations" in tables:
                rows = conn.execute(
                    "SELECT owner, name FROM schema_migrations ORDER BY owner, applied_at, name"
                )
                for owner, name in rows:
                    migrations.setdefault(str(owner), []).append(str(name))
            version = str(conn.execute("SELECT sqlite_version()").fetchone()[0])
            conn.execute("COMMIT")
    except driver.Error as exc:
        raise DatabaseError(f"Cannot read the database {path}: {exc}") from exc
    return DatabaseFacts(counts, migrations, version)


def known_migrations() -> dict[str, set[str]]:
    """Every migration this code knows, by migration set: the sets defined in memory/store/
    (found by looking, so a new set is known without being listed anywhere)."""
    import memory.store as package
    from memory.store.migrations import memory_set

    sets: list[MigrationSet] = [memory_set()]
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        sets += [v for v in vars(module).values() if isinstance(v, MigrationSet)]
    known: dict[str, set[str]] = {}
    for found in sets:
        known.setdefault(found.name, set()).update(m.__name__ for m in found.migrations)
    return known


def unknown_migrations(
    applied: Mapping[str, list[str]], known: Mapping[str, set[str]] | None = None
) -> list[str]:
    """The applied migrations ("set/name") this code does not know: a newer Pinch made them.
    `known`: the migrations to compare with (default: the SQLite sets, `known_migrations`)."""
    known = known_migrations() if known is None else known
    return [
        f"{owner}/{name}"
        for owner, names in sorted(applied.items())
        for name in names
        if name not in known.get(owner, set())
    ]
