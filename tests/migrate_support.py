"""Helpers for the `pinch migrate` tests: an agent with something in every table (a real index
of real files with the bundled USE embeddings, a conversation, jobs, intents, pairing, the queue,
dream runs, recall signals, lineage, web logins), and the hashes of what a database holds."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from app.config import Settings, load_settings
from memory.index.index import MemoryIndex
from memory.store.db import open_database
from memory.store.dreaming_schema import apply_dreaming_migrations
from memory.store.dreams_store import SqliteDreamRuns
from memory.store.forget_store import SessionErasure, SqliteForgetStore
from memory.store.intents_store import SqliteIntentRepository
from memory.store.jobs_store import SqliteJobStore
from memory.store.lineage import LineageStore
from memory.store.postgres.migrations import PG_SETS
from memory.store.postgres.transfer import open_postgres_source
from memory.store.queue_store import Delivery, LeaseHolder, SqliteQueueStore
from memory.store.recall_signals import RecallSignal, SqliteRecallSignals
from memory.store.transfer import RowsHash, TransferSource
from memory.store.transfer_sqlite import open_sqlite_source
from memory.store.vector_pack import SqliteMatrixPack
from memory.store.web_store import SqliteWebAuthStore
from tests.backup_support import seed
from tests.conftest import use_config

FILES = {
    "MEMORY.md": "# Memory\n\nThe owner's green kettle lives on the second shelf.\n\n"
    "Ça ﬁnit à l'Hôtel ¨x½ İstanbul ＡＢＣ１２ e\u0301te\u0301 naïve Straße.\n",
    "USER.md": "# User\n\nPrefers tea without sugar. 喜欢杭州的龙井茶。\n",
    "memory/2026-11-20.md": "# 2026-11-20\n\nBooked the train to Hangzhou for Friday.\n",
    "memory/2026-11-21.md": "# 2026-11-21\n\nThe dentist moved the appointment to Tuesday.\n",
}
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # the same decay for every search
QUERIES = ("green kettle", "train to Hangzhou", "龙井茶", "dentist appointment")
# PostgreSQL has the web page's tables once its "web" set exists (helper pgwire adds it).
PG_HAS_WEB = any(s.name == "web" for s in PG_SETS)


def make_agent(home: Path) -> Settings:
    """The default agent in `home` with its workspace indexed and every store written to."""
    settings = load_settings()
    workspace = settings.workspace_dir
    for rel, text in FILES.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(text, encoding="utf-8")
    index = MemoryIndex.open(workspace, settings.database_path, use_config())
    try:
        index.sync()
    finally:
        index.close()
    seed(settings)
    db = open_database(settings.database_path, vector_backend="numpy")
    try:
        now = time.time()
        queue = SqliteQueueStore(db)
        queue.accept("telegram", "u1", "main:telegram:direct:1", "owner", '{"text": "hi"}', now)
        apply_dreaming_migrations(db)  # as the dream's own code does first
        runs = SqliteDreamRuns(db)
        runs.finish_run(
            runs.start_run("deep", started_at=now),
            finished_at=now + 1,
            promoted=0,
            model_calls=1,
            tokens=42,
            write=None,
            outcome="nothing recurred often enough",
        )
        signals = SqliteRecallSignals(db)
        signals.add([RecallSignal("MEMORY.md", 1, 3, "h1", "owner", "q1", "2026-11-20", 0.8, now)])
        signals.flush()
        with db.transaction() as conn:  # the packed copy a big index's searches read
            generation = max(int(t.rsplit("_g", 1)[1]) for t in _matrix_tables(conn))
            SqliteMatrixPack().write(conn, generation, 1)
        queue.record_delivery(1, 0, Delivery("telegram", "1", "m1", None), now)
        holder = LeaseHolder("gw-1", 4242, "host", "telegram")
        queue.acquire_lease("main:telegram:direct:1", holder, now, 60.0, lambda _: True)
        runs.acquire_lease("nightly", "gw-1", now=now, lease_s=600.0)
        job_store = SqliteJobStore(db)
        job = job_store.jobs()[0]
        assert job.next_run_utc is not None
        job_store.claim(job.id, job.next_run_utc, None, datetime.now(UTC), run_for=job.next_run_utc)
        intents = SqliteIntentRepository(db)
        intents.fire_all([intents.intents()[0].id], now=now, session_key="k", excerpt="e")
        SqliteForgetStore(db).erase(
            SessionErasure("gone-session", "main:telegram:direct:9", now, [{"events": 3}])
        )
        LineageStore(db).record("s1", "daily_entry", path="memory/2026-11-20.md", detail={"a": 1})
        if PG_HAS_WEB:
            web = SqliteWebAuthStore(db)
            web.add_token("t" * 64, now, now + 600)
            web.add_session("s" * 64, now, now + 3600)
    finally:
        db.close()
    return settings


def _matrix_tables(conn: object) -> list[str]:
    rows = conn.execute(  # type: ignore[attr-defined]
        "SELECT name FROM sqlite_master WHERE name LIKE 'memory_matrix_g%'"
    ).fetchall()
    return [str(r[0]) for r in rows]


def search(db_path: Path, workspace: Path) -> list[tuple[str, int, int, float]]:
    """What each of QUERIES finds in the index of `db_path` (path, lines, score)."""
    index = MemoryIndex.open(workspace, db_path, use_config())
    try:
        found = []
        for query in QUERIES:
            for hit in index.search(query, record=False, now=NOW):
                found.append((hit.path, hit.start_line, hit.end_line, round(hit.score, 6)))
        return found
    finally:
        index.close()


def hashes(source: TransferSource) -> dict[str, tuple[int, str]]:
    """Each logical table's rows and hash, as `pinch migrate` compares them."""
    found = {}
    for table, columns in source.inventory().tables.items():
        seen = RowsHash()
        for rows in source.rows(table, columns, 500):
            seen.add(rows)
        found[table] = (seen.rows, seen.hexdigest())
    return found


@contextlib.contextmanager
def sqlite_hashes(path: Path) -> Iterator[dict[str, tuple[int, str]]]:
    with open_sqlite_source(path) as source:
        yield hashes(source)


def postgres_hashes(dsn: str, schema: str) -> dict[str, tuple[int, str]]:
    with open_postgres_source(dsn, schema) as source:
        return hashes(source)
