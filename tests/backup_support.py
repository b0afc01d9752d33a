"""Helpers for the backup tests: a home with one of everything, and what a database and a
workspace hold (rows and file hashes), to compare a home with its restored copy."""

from __future__ import annotations

import hashlib
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from app.automations.jobs import Jobs, NewJob, Schedule, Target
from app.cli.main import main
from app.config import Settings, load_settings
from memory.lifecycle.intents import IntentStore
from memory.store.db import open_database, sqlite_driver
from memory.store.intents_store import IntentScope
from memory.store.jobs_store import SqliteJobStore
from memory.store.pairing_store import SqlitePairingStore
from memory.store.sessions import SessionKey

TABLES = {
    "sessions": "id",
    "transcript_events": "session_id, seq",
    "jobs": "id",
    "intents": "id",
    "approved_senders": "channel, sender_id",
    "memory_chunks": "id",
}


def pinch(*args: str, ok: bool = True) -> Result:
    result = CliRunner().invoke(main, list(args))
    if ok:
        assert result.exit_code == 0, result.output
    return result


def seed(settings: Settings, *, events: int = 6) -> None:
    """One job, one standing intent, one approved sender and a conversation in the home."""
    db = open_database(settings.database_path, vector_backend="numpy")
    try:
        now = datetime.now(UTC)
        Jobs(SqliteJobStore(db)).create(
            NewJob(
                Schedule("cron", "0 9 * * *", "UTC", now),
                "reminder",
                "water the plants",
                Target("telegram", "111"),
                "main:telegram:direct:owner",
                owner_private=True,
            ),
            now,
        )
        key = SessionKey.owner_main("main")
        IntentStore.open(db).create(
            IntentScope.of(key, "owner"), ["hangzhou"], "confirm the ticket", now=time.time()
        )
        pairing = SqlitePairingStore(db)
        pairing.create_request(
            "telegram", "500", "Pat", "ABCD2345", time.time(), ttl_s=3600, max_pending=3
        )
        pairing.decide("ABCD2345", approve=True, now=time.time())
    finally:
        db.close()
    from memory.store.sessions import SqliteSessionStore

    db = open_database(settings.database_path, vector_backend="numpy")
    try:
        store = SqliteSessionStore(db)
        session = store.current(SessionKey.owner_main("main"))
        for i in range(events):
            store.append(session.id, "user", {"text": f"message {i} about the green kettle"})
    finally:
        db.close()


def rows(database: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the tables a restore must keep, in key order."""
    conn = sqlite_driver().connect(f"file:{database}?mode=ro", uri=True)
    try:
        present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return {
            table: [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY {order}")]
            for table, order in TABLES.items()
            if table in present
        }
    finally:
        conn.close()


def file_hashes(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def modes(folder: Path) -> set[int]:
    """The permission bits of `folder` and everything in it."""
    return {os.stat(p).st_mode & 0o777 for p in [folder, *folder.rglob("*")]}


def settings_for(home: Path, monkeypatch: Any) -> Settings:
    monkeypatch.setenv("PINCH_HOME", str(home))
    return load_settings()
