"""Giving back the space a rebuild freed: the agent database after `pinch memory index --force`.

A rebuild writes the new index beside the old one and then drops the old one, so the file keeps
the old pages as free space (2.5 of 6.7 GB at 100k chunks) and SQLite puts later tables, such as
the packed vector matrix, into those scattered holes: reading the vectors from disk then took
≈ 1 s instead of ≈ 0.3-0.6 s (bench/RESULTS.md, 2026-12-01). `compact` first drops what the
embedding cache holds beyond the index's needs (vectors no passage names any more, older than an
hour) and rewrites an older version's wider cached vectors in the cache's form (8-bit codes)
(memory/store/index_embedcache.py), makes sqlite-vec's tables again where deleted rows left a
tenth of their slots behind (vec0 reuses only its last chunk's: memory/store/vec0_pack.py),
then rewrites the file without the holes (SQLite's VACUUM: each table's pages together again).
`reclaimable` says how much that would give back.

On PostgreSQL there is no file to rewrite (autovacuum reuses free space): compacting codes the
passage and cached vectors an older version stored as float32, a batch per transaction
(memory/store/postgres/vector_forms.py), and `reclaimable` is what that saves.

    usage = space_usage(db)          # SpaceUsage(file_bytes=…, free_bytes=…)
    if usage.worth_compacting:
        compact(db)                  # DatabaseError (advice) if another process keeps it busy
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from memory.errors import DatabaseError
from memory.store.backends import backend_of
from memory.store.chunk_text import compress_batch
from memory.store.db import BUSY_TIMEOUT_S, Database, in_batches, is_busy
from memory.store.index_embedcache import cache_slack, prune_orphans, requantise
from memory.store.vec0_pack import dead_slot_bytes, vec0_rows
from memory.store.vector_knn import (
    live_vec0_generations,
    renew_sparse_tables,
    second_copy_bytes,
)

log = logging.getLogger(__name__)

# PostgreSQL: the bytes of the agent's schema (the pool's search_path puts it first), each
# table with its indexes and TOAST.
_SCHEMA_BYTES = (
    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')"
)
# Compact after a rebuild when at least this share of the file is free pages: an old index
# dropped (half the file or more), or a first index's centroid rows once packed (≈ 10 % at 100k
# chunks: 41 of 412 MB, a 3-5 s VACUUM after a build of hours).
COMPACT_FREE_SHARE = 0.10


@dataclass(frozen=True)
class SpaceUsage:
    file_bytes: int
    free_bytes: int

    @property
    def free_share(self) -> float:
        return self.free_bytes / self.file_bytes if self.file_bytes else 0.0

    @property
    def worth_compacting(self) -> bool:
        return self.free_share >= COMPACT_FREE_SHARE


def space_usage(db: Database) -> SpaceUsage:
    """The database file's size and the part of it SQLite holds as free pages (PostgreSQL: the
    agent schema's tables with their indexes, none free — autovacuum reclaims its free space,
    and there is no file to compact)."""
    if backend_of(db) != "sqlite":
        (size,) = db.execute(_SCHEMA_BYTES)[0]
        return SpaceUsage(int(size), 0)
    (size,) = db.execute("PRAGMA page_size")[0]
    (pages,) = db.execute("PRAGMA page_count")[0]
    (free,) = db.execute("PRAGMA freelist_count")[0]
    return SpaceUsage(int(size) * int(pages), int(size) * int(free))


def notes_bytes(db: Database, generation: int) -> int:
    """Bytes of the files the generation indexed (as they were when indexed)."""
    mark = "?" if backend_of(db) == "sqlite" else "%s"
    (total,) = db.execute(
        "SELECT coalesce(sum(size), 0) FROM memory_sources "
        f"WHERE generation = {mark} AND error IS NULL",
        (generation,),
    )[0]
    return int(total)


def reclaimable(db: Database) -> int:
    """Bytes a compaction would give back, about: the free pages, the cached vectors no
    passage names, and what the cache's form saves on its wider (float32) ones
    (≈ 1-2 s at 100k chunks)."""
    if backend_of(db) != "sqlite":  # autovacuum gives free space back: only the float32 vectors
        from memory.store.postgres.vector_forms import vector_slack  # psycopg: on demand

        return vector_slack(db).saving  # type: ignore[arg-type]
    with db.lock:
        slack = cache_slack(db.conn)
        dead = sum(
            dead_slot_bytes(pack)
            for g in live_vec0_generations(db.conn)
            if (pack := vec0_rows(db.conn, g)) is not None
        )
        twice = second_copy_bytes(db.conn)
    return space_usage(db).free_bytes + slack.bytes + dead + twice


def compact(db: Database, *, wait_s: float = BUSY_TIMEOUT_S) -> SpaceUsage:
    """Rewrite the database without its free pages (VACUUM) and return the usage after it
    (PostgreSQL: code the float32 vectors, `compact_vectors`).

    Needs a moment without other writers: it waits up to `wait_s` for one, then raises
    DatabaseError with advice. Searches in other processes go on meanwhile (WAL); their writes
    wait until it is done (seconds at 10k chunks, ≈ 15-30 s at 100k; rewriting an older
    version's float32 cache as codes adds ≈ 30 s at 500k cached vectors, once)."""
    if backend_of(db) != "sqlite":
        from memory.store.postgres.vector_forms import compact_vectors

        done = compact_vectors(db)  # type: ignore[arg-type]
        log.info("Vectors made compact: %d passages, %d cached", done.units, done.cache)
        return space_usage(db)
    with db.lock:
        conn = db.conn
        conn.execute(f"PRAGMA busy_timeout = {int(wait_s * 1000)}")
        try:
            with db.transaction() as tx:
                pruned = prune_orphans(tx)
                # the keyword index's segments merged into one b-tree (smaller, as a rebuild
                # leaves many)
                tx.execute("INSERT INTO memory_fts(memory_fts) VALUES ('optimize')")
                # sqlite-vec's tables made again where deleted rows left many slots behind
                renewed = renew_sparse_tables(tx) if db.vec_version else 0
            rewritten = requantise(db)
            compress_texts(db)
            if renewed:
                log.info("Vector index: %d table(s) made again without deleted rows", renewed)
            if pruned or rewritten:
                log.info(
                    "Embedding cache: %d unused vectors dropped, %d made compact", pruned, rewritten
                )
            conn.execute("VACUUM")
            # The rewrite went through the WAL: fold it back so the file is the whole story.
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except Exception as exc:
            cause = exc.__cause__ if isinstance(exc, DatabaseError) else exc
            if is_busy(exc) or (isinstance(cause, Exception) and is_busy(cause)):
                raise DatabaseError(
                    f"Could not compact {db.path} now: another process is writing to it (a "
                    "Pinch gateway or chat?). Nothing changed; run `pinch memory compact` "
                    "again when it is idle."
                ) from exc
            raise
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    return space_usage(db)


def compress_texts(db: Database) -> int:
    """Compress the chunk texts still stored plain (written before the index had a text
    dictionary, or by an older version), a batch per transaction; returns how many."""
    return in_batches(db, compress_batch)


def compact_if_worth_it(db: Database) -> SpaceUsage | None:
    """Compact when at least COMPACT_FREE_SHARE of the file is free (after a rebuild); best
    effort: a busy database is logged and left for `pinch memory compact`. None: not done."""
    before = space_usage(db)
    if not before.worth_compacting:
        return None
    log.info(
        "Compacting %s: %d of %d bytes free after a rebuild",
        db.path,
        before.free_bytes,
        before.file_bytes,
    )
    try:
        return compact(db)
    except DatabaseError as exc:
        log.warning("%s", exc)
        return None
