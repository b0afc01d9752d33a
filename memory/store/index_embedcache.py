"""The embedding cache, as stored: `embedding_cache` rows, one vector per (provider, model, text
hash), so a text is embedded once per model. When and in what batches texts are embedded is
decided in memory/index/embedcache.py.

It is also where a passage's vector lives: `memory_units` rows name their passage's hash and
search reads the vector from here (`cached_vectors`), so each vector is stored once. Vectors are
handed in and out as float32 blobs and stored as 8-bit codes (or 4-bit codes around their
model's center: memory/store/cache_codec.py `CACHE_BITS`); rows written in another form read the
same, and wider ones are rewritten by `requantise` (and by migration m011). Keys are kept as
the hash's 32 bytes (memory/store/content_hash.py `stored_hash`) and handed out as the hex text
they came in as.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memory.store.cache_codec import (
    encode_for_cache,
    float32_from_cache,
    shrink_batch,
    stored_size_sql,
    wide_vectors,
)
from memory.store.content_hash import StoredHash, stored_hash
from memory.store.db import Database, in_batches

LOOKUP_BATCH = 500  # hashes per lookup query (SQLite's bound-parameter limit is far above)
# The cache's key index holds the first bytes of the hash alone (migration m013: 8 bytes
# instead of provider, model and all 32 — ≈ 27 MB less at 100k chunks): lookups name the prefix
# and the whole hash, and compare the whole key on the rows the prefix finds.
KEY_PREFIX = 8


@dataclass(frozen=True)
class ModelKey:
    """Which model's vectors: a vector is reused only for the same provider, model and size."""

    provider: str
    model: str
    dimensions: int


class EmbeddingCacheRepository(Protocol):
    """Cached vectors by (provider, model, text hash).

    Promises: (provider, model, hash) is unique — `put` replaces an existing vector; a lookup
    returns only vectors of the same provider, model and dimensions, as float32 blobs (SQLite keeps
    a float32 vector of the key's width as 4-bit codes around the model's center, or 8-bit: it
    comes back close to what went in, memory/store/cache_codec.py; other blobs come back as they
    went in); `put` writes
    inside the caller's transaction, so a batch is cached with whatever else that transaction
    commits.
    """

    def count(self) -> int: ...

    def get(self, key: ModelKey, hashes: Sequence[str]) -> dict[str, bytes]:
        """The cached vectors among `hashes` (missing ones left out), by hash."""
        ...

    def put(self, conn: Any, key: ModelKey, vectors: Sequence[tuple[str, bytes]]) -> None:
        """Store (hash, vector) pairs, replacing what was cached for those hashes."""
        ...


class SqliteEmbeddingCache:
    """EmbeddingCacheRepository on the agent SQLite file."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM embedding_cache")[0][0])

    def get(self, key: ModelKey, hashes: Sequence[str]) -> dict[str, bytes]:
        wanted = {stored_hash(h): h for h in hashes}
        with self.db.lock:
            found = lookup(self.db.conn, key.provider, key.model, list(wanted), key.dimensions)
            if not found:
                return {}
            names = [wanted[k] for k in found]
            floats = float32_from_cache(self.db.conn, _triple(key), [b for _, b in found.values()])
        return dict(zip(names, floats, strict=True))

    def put(self, conn: Any, key: ModelKey, vectors: Sequence[tuple[str, bytes]]) -> None:
        now = time.time()
        stored = encode_for_cache(conn, _triple(key), [v for _, v in vectors])
        latest = {stored_hash(h): blob for (h, _), blob in zip(vectors, stored, strict=True)}
        # (provider, model, hash) is unique by this: the row a key has is replaced in place,
        # keeping its rowid, which passages name (`memory_units.cache_row`); the others are new.
        there = lookup(conn, key.provider, key.model, list(latest))
        conn.executemany(
            "UPDATE embedding_cache SET dimensions = ?, vector = ?, created_at = ? WHERE rowid = ?",
            [(key.dimensions, latest[k], now, rowid) for k, (rowid, _) in there.items()],
        )
        conn.executemany(
            "INSERT INTO embedding_cache VALUES (?, ?, ?, ?, ?, ?)",
            [
                (key.provider, key.model, k, key.dimensions, blob, now)
                for k, blob in latest.items()
                if k not in there
            ],
        )


def lookup(
    conn: Any, provider: str, model: str, keys: Sequence[StoredHash], dimensions: int | None = None
) -> dict[StoredHash, tuple[int, bytes]]:
    """{stored hash: (rowid, stored vector)} of the cached rows among `keys` under the model
    (and width, when given). Found through the index on the hash's first 8 bytes (migration
    m013: the cache has no index of its whole key), each row's whole key compared."""
    found: dict[StoredHash, tuple[int, bytes]] = {}
    width = "" if dimensions is None else "AND dimensions = ? "
    for i in range(0, len(keys), LOOKUP_BATCH):
        part = list(dict.fromkeys(keys[i : i + LOOKUP_BATCH]))
        marks = ",".join("?" for _ in part)
        prefixes = list(dict.fromkeys(k[:KEY_PREFIX] for k in part))
        pmarks = ",".join("?" for _ in prefixes)
        for rowid, k, blob in conn.execute(
            "SELECT rowid, chunk_hash, vector FROM embedding_cache "
            f"WHERE substr(chunk_hash, 1, {KEY_PREFIX}) IN ({pmarks}) AND chunk_hash IN ({marks}) "
            f"AND provider = ? AND model = ? {width}",
            (*prefixes, *part, provider, model, *(() if dimensions is None else (dimensions,))),
        ):
            found[bytes(k) if isinstance(k, memoryview) else k] = (int(rowid), blob)
    return found


def _triple(key: ModelKey) -> tuple[str, str, int]:
    return key.provider, key.model, key.dimensions


def _generation_key(conn: Any, generation: int) -> tuple[Any, Any, Any] | None:
    row = conn.execute(
        "SELECT identity FROM memory_generations WHERE id = ?", (generation,)
    ).fetchone()
    if row is None:
        return None
    identity = json.loads(row[0])
    return identity.get("provider"), identity.get("model"), identity.get("dimensions")


def cache_rows(conn: Any, generation: int, hashes: Sequence[str]) -> dict[str, int]:
    """The cache rowids of `hashes` by the generation's model (inside the caller's
    transaction: passages name them)."""
    key = _generation_key(conn, generation)
    if key is None or key[0] is None or key[1] is None:
        return {}
    wanted = {stored_hash(h): h for h in hashes}
    found = lookup(conn, str(key[0]), str(key[1]), list(wanted), key[2])
    return {wanted[k]: rowid for k, (rowid, _) in found.items()}


def cached_vectors(
    db: Database, generation: int, hashes: Sequence[StoredHash], rows: Sequence[int | None] = ()
) -> dict[StoredHash, bytes]:
    """The vectors (as float32 blobs) of `hashes` (as stored: `memory_units.hash`,
    content_hash.stored_hash) by the model the generation was built with, keyed by the stored
    hash; those not cached are left out. `rows`: the cache rowids the
    passages name (None: unknown), read first — one lookup by rowid each, checked against the
    hash — and the rest by hash. `db` may be a read connection."""
    found, key = stored_vectors(db, generation, hashes, rows)
    if not found or key is None:
        return found
    with db.lock:
        floats = float32_from_cache(db.conn, key, list(found.values()))
    return dict(zip(found, floats, strict=True))


def stored_vectors(
    db: Database, generation: int, hashes: Sequence[StoredHash], rows: Sequence[int | None] = ()
) -> tuple[dict[StoredHash, bytes], tuple[str, str, int] | None]:
    """`cached_vectors` as stored (4-bit, 8-bit or float32 blobs), and the generation's model
    (whose center decodes the 4-bit ones: cache_codec.center_of)."""
    with db.lock:
        key = _generation_key(db.conn, generation)
    if key is None:
        return {}, None
    found: dict[StoredHash, bytes] = {}
    known = list(dict.fromkeys(r for r in rows if r is not None))
    for i in range(0, len(known), LOOKUP_BATCH):
        part = known[i : i + LOOKUP_BATCH]
        marks = ",".join("?" for _ in part)
        # (checked by hash: the row a passage named is its text's, of the model it was
        # indexed with, unless a VACUUM renumbered the rows — then the hash finds it below)
        found.update(
            db.execute(
                # (unary +: found by rowid, not through the key index)
                f"SELECT chunk_hash, vector FROM embedding_cache WHERE rowid IN ({marks}) "
                "AND +provider = ? AND +model = ? AND +dimensions = ?",
                (*part, *key),
            )
        )
    unique = [h for h in {stored_hash(h) for h in hashes} if h not in found]
    if unique and key[0] is not None and key[1] is not None:
        with db.lock:
            located = lookup(db.conn, str(key[0]), str(key[1]), unique, key[2])
        found.update({h: blob for h, (_, blob) in located.items()})
    return found, key


# ---- what a compaction gives back (memory/store/compact.py) ---------------------------------

# A cached vector no passage names is kept this long: another process may have cached it and
# not yet written the passages that name it (a sync caches each batch before the file's rows).
ORPHAN_GRACE_S = 3600.0


@dataclass(frozen=True)
class CacheSlack:
    """What the cache holds beyond what the index needs, in bytes of vector data."""

    orphan_rows: int  # vectors no passage of the index names (older than the grace period)
    orphan_bytes: int
    float_rows: int  # vectors still float32 or 8-bit (written by an older version)
    float_saving: int  # bytes their 4-bit form saves

    @property
    def bytes(self) -> int:
        return self.orphan_bytes + self.float_saving


_ORPHANS = (
    "FROM embedding_cache WHERE created_at < ? "
    "AND chunk_hash NOT IN (SELECT hash FROM memory_units)"
)


def cache_slack(conn: Any, now: float | None = None) -> CacheSlack:
    """How many cached vectors no passage names, how many are still float32, and their bytes.
    (≈ 1-2 s at 100k chunks: one pass over the passages' hashes.)"""
    cutoff = (now if now is not None else time.time()) - ORPHAN_GRACE_S
    orphans, orphan_bytes = conn.execute(
        f"SELECT count(*), coalesce(sum(length(vector) + length(chunk_hash) + 40), 0) {_ORPHANS}",
        (cutoff,),
    ).fetchone()
    floats, saving = conn.execute(
        f"SELECT count(*), coalesce(sum(length(vector) - {stored_size_sql()}), 0) "
        f"FROM embedding_cache WHERE {wide_vectors()} "
        "AND chunk_hash IN (SELECT hash FROM memory_units)"
    ).fetchone()
    return CacheSlack(int(orphans), int(orphan_bytes), int(floats), int(saving))


def prune_orphans(conn: Any, now: float | None = None) -> int:
    """Delete cached vectors no passage names (older than the grace period), inside the
    caller's transaction; returns how many. A text indexed again later is embedded again."""
    cutoff = (now if now is not None else time.time()) - ORPHAN_GRACE_S
    return int(conn.execute(f"DELETE {_ORPHANS}", (cutoff,)).rowcount)


def requantise(db: Database) -> int:
    """Rewrite cached vectors an older version stored wider (float32, 8-bit codes) in the
    cache's form (4-bit codes), a batch per transaction; returns how many."""
    return in_batches(db, shrink_batch)
