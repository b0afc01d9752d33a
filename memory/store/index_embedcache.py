"""The embedding cache, as stored: `embedding_cache` rows, one vector per (provider, model, text
hash), so a text is embedded once per model. When and in what batches texts are embedded is
decided in memory/index/embedcache.py.

It is also where a passage's vector lives: a packed passage names its cache row by id
(memory/store/passage_pack.py), an older passage row by id and hash (`cached_vectors`), so each
vector is stored once. A row has an explicit id (`INTEGER PRIMARY KEY AUTOINCREMENT`, since
migration m014: a VACUUM keeps it, a deleted row's id is never handed out again). Since m016 a
row holds nothing else but its model, its key and its vector — 369 bytes at 384 dimensions, 11
rows to a 4 KB page: `model_id` names the provider, model and width (`embedding_models`), the
key is the first 14 bytes of the text's SHA-256 (memory/store/content_hash.py `cache_key`;
handed out as the hex text a hash came in as), and when a row was written is told by its id
(`embedding_cache_writes`, below) rather than by a time in every row. Vectors are handed in and
out as float32 blobs and stored as 7-bit codes around their model's center (or 8-, 6- or 4-bit
codes: memory/store/cache_codec.py `CACHE_BITS`); rows written in another form read the same,
and wider ones are rewritten by `requantise` (and by migration m011).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from memory.store.cache_codec import (
    encode_for_cache,
    float32_from_cache,
    shrink_batch,
    stored_size_sql,
    wide_vectors,
)
from memory.store.content_hash import StoredHash, cache_key, cache_key_sql
from memory.store.db import Database, in_batches
from memory.store.passage_pack import named_cache_ids

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
    a float32 vector of the key's width as 7-bit codes around the model's center, or 8-bit: it
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
        with self.db.lock:
            found = lookup(self.db.conn, key.provider, key.model, hashes, key.dimensions)
            if not found:
                return {}
            floats = float32_from_cache(self.db.conn, _triple(key), [b for _, b in found.values()])
        return {str(h): f for h, f in zip(found, floats, strict=True)}

    def put(self, conn: Any, key: ModelKey, vectors: Sequence[tuple[str, bytes]]) -> None:
        if not vectors:
            return
        stored = encode_for_cache(conn, _triple(key), [v for _, v in vectors])
        latest = {cache_key(h): blob for (h, _), blob in zip(vectors, stored, strict=True)}
        # (provider, model, hash) is unique by this: the row a key has, at any width, is
        # replaced in place, keeping its id, which passages name (memory/store/passage_pack.py);
        # the others are new.
        there = lookup(conn, key.provider, key.model, list(latest))
        model = model_id(conn, key.provider, key.model, key.dimensions, create=True)
        (last,) = conn.execute(_LAST_ID).fetchone()
        conn.executemany(
            "UPDATE embedding_cache SET model_id = ?, vector = ? WHERE id = ?",
            [(model, latest[k], rowid) for k, (rowid, _) in there.items()],
        )
        conn.executemany(
            "INSERT INTO embedding_cache(model_id, chunk_hash, vector) VALUES (?, ?, ?)",
            [(model, k, blob) for k, blob in latest.items() if k not in there],
        )
        _note_written(conn, min([int(last), *(rowid - 1 for rowid, _ in there.values())]))


def model_id(
    conn: Any, provider: str, model: str, dimensions: int, create: bool = False
) -> int | None:
    """The number the cache's rows name (provider, model, width) by (`embedding_models`); None
    when nothing was cached for it (made now when `create`, inside the caller's transaction)."""
    row = conn.execute(
        "SELECT id FROM embedding_models WHERE provider = ? AND model = ? AND dimensions = ?",
        (provider, model, dimensions),
    ).fetchone()
    if row is None and create:
        cur = conn.execute(
            "INSERT INTO embedding_models(provider, model, dimensions) VALUES (?, ?, ?)",
            (provider, model, dimensions),
        )
        return int(cur.lastrowid)
    return None if row is None else int(row[0])


def lookup(
    conn: Any,
    provider: str,
    model: str,
    hashes: Sequence[StoredHash],
    dimensions: int | None = None,
) -> dict[StoredHash, tuple[int, bytes]]:
    """{hash: (id, stored vector)} of the cached rows among `hashes` (as given: hex text or
    stored bytes; each looked up by its `cache_key`) under the model at that width, or at any
    width (None). Found through the index on the key's first 8 bytes (migration m013: the
    cache has no index of its whole key), each row's whole key compared."""
    found: dict[StoredHash, tuple[int, bytes]] = {}
    if dimensions is None:
        models = [
            int(i)
            for (i,) in conn.execute(
                "SELECT id FROM embedding_models WHERE provider = ? AND model = ?",
                (provider, model),
            )
        ]
    else:
        mid = model_id(conn, provider, model, dimensions)
        models = [] if mid is None else [mid]
    if not models:
        return found
    wanted = {cache_key(h): h for h in hashes}
    keys = list(wanted)
    mmarks = ",".join("?" for _ in models)
    for i in range(0, len(keys), LOOKUP_BATCH):
        part = keys[i : i + LOOKUP_BATCH]
        marks = ",".join("?" for _ in part)
        prefixes = list(dict.fromkeys(k[:KEY_PREFIX] for k in part))
        pmarks = ",".join("?" for _ in prefixes)
        for rowid, k, blob in conn.execute(
            "SELECT id, chunk_hash, vector FROM embedding_cache "
            f"WHERE substr(chunk_hash, 1, {KEY_PREFIX}) IN ({pmarks}) AND chunk_hash IN ({marks}) "
            f"AND model_id IN ({mmarks})",
            (*prefixes, *part, *models),
        ):
            found[wanted[bytes(k) if isinstance(k, memoryview) else k]] = (int(rowid), blob)
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
    """The cache ids of `hashes` by the generation's model (inside the caller's
    transaction: passages name them)."""
    key = _generation_key(conn, generation)
    if key is None or None in key:
        return {}
    found = lookup(conn, str(key[0]), str(key[1]), hashes, int(key[2]))
    return {str(h): rowid for h, (rowid, _) in found.items()}


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
    """`cached_vectors` as stored (coded or float32 blobs), and the generation's model
    (whose center decodes the centered ones: cache_codec.center_of)."""
    with db.lock:
        key = _generation_key(db.conn, generation)
        mid = None
        if key is not None and None not in key:
            mid = model_id(db.conn, str(key[0]), str(key[1]), int(key[2]))
    if key is None:
        return {}, None
    wanted = {cache_key(h): h for h in hashes}
    found: dict[StoredHash, bytes] = {}
    known = list(dict.fromkeys(r for r in rows if r is not None)) if mid is not None else []
    for i in range(0, len(known), LOOKUP_BATCH):
        part = known[i : i + LOOKUP_BATCH]
        marks = ",".join("?" for _ in part)
        # (checked by key: the row a passage named is its text's, of the model it was
        # indexed with, unless a VACUUM renumbered the rows — then the key finds it below)
        for k, blob in db.execute(
            # (unary +: found by id, not through the key index)
            f"SELECT chunk_hash, vector FROM embedding_cache WHERE id IN ({marks}) "
            "AND +model_id = ?",
            (*part, mid),
        ):
            h = wanted.get(bytes(k) if isinstance(k, memoryview) else k)
            if h is not None:
                found[h] = blob
    unique = [h for h in wanted.values() if h not in found]
    if unique and mid is not None:
        with db.lock:
            located = lookup(db.conn, str(key[0]), str(key[1]), unique, int(key[2]))
        found.update({h: blob for h, (_, blob) in located.items()})
    return found, key


# ---- what a compaction gives back (memory/store/compact.py) ---------------------------------

# A cached vector no passage names is kept this long: another process may have cached it and
# not yet written the passages that name it (a sync caches each batch before the file's rows).
ORPHAN_GRACE_S = 3600.0
# How recently a row was written is told by its id, not by a time in every row (5 bytes of each
# before m016): `embedding_cache_writes` holds, for each minute something was cached in, an id
# every row written then (inserted, or replaced in place) is above. A row a minute, those of the
# last grace period and a minute kept.
_MINUTE = 60
_LAST_ID = (
    "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'embedding_cache'), 0), "
    "coalesce((SELECT max(id) FROM embedding_cache), 0))"
)


def _note_written(conn: Any, after: int) -> None:
    """Record that rows with ids above `after` were written now (the caller's transaction)."""
    minute = int(time.time() // _MINUTE)
    conn.execute(
        "INSERT INTO embedding_cache_writes(minute, after_id) VALUES (?, ?) ON CONFLICT (minute) "
        "DO UPDATE SET after_id = min(after_id, excluded.after_id)",
        (minute, after),
    )
    conn.execute(
        "DELETE FROM embedding_cache_writes WHERE minute < ?",
        (minute - int(ORPHAN_GRACE_S // _MINUTE) - 1,),
    )


def _recent_after(conn: Any, now: float | None) -> int | None:
    """The id every row written within the grace period before `now` is above (None: no row
    was written within it)."""
    cutoff = (now if now is not None else time.time()) - ORPHAN_GRACE_S
    (after,) = conn.execute(
        "SELECT min(after_id) FROM embedding_cache_writes WHERE minute >= ?",
        (int(cutoff // _MINUTE),),
    ).fetchone()
    return None if after is None else int(after)


@dataclass(frozen=True)
class CacheSlack:
    """What the cache holds beyond what the index needs, in bytes of vector data."""

    orphan_rows: int  # vectors no passage of the index names (older than the grace period)
    orphan_bytes: int
    float_rows: int  # vectors stored wider than the cache's form (by an older version)
    float_saving: int  # bytes the cache's form saves

    @property
    def bytes(self) -> int:
        return self.orphan_bytes + self.float_saving


# Cached vectors (`c`) no passage row names by hash (the packed passages name theirs by id,
# checked apart: passage_pack.named_cache_ids).
_UNNAMED_BY_HASH = f"c.chunk_hash NOT IN (SELECT {cache_key_sql('hash')} FROM memory_units)"
# What a row takes besides its key and vector: its cell (≈ 13 bytes with the cell pointer) and
# its entry in the key index (≈ 17).
_ROW_OVERHEAD = 30
_NO_ID_ABOVE = (1 << 63) - 1  # SQLite's largest id: every row is at or below it


def _orphans(conn: Any, now: float | None, named: np.ndarray) -> list[tuple[int, int]]:
    """(id, bytes) of the cached vectors no passage names, older than the grace period
    (`named`: the ids packed passages name)."""
    after = _recent_after(conn, now)
    rows = conn.execute(
        f"SELECT c.id, length(c.vector) + length(c.chunk_hash) + {_ROW_OVERHEAD} "
        f"FROM embedding_cache c WHERE c.id <= ? AND {_UNNAMED_BY_HASH}",
        (after if after is not None else _NO_ID_ABOVE,),
    ).fetchall()
    if not rows:
        return []
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    unnamed = ~np.isin(ids, named)
    return [r for r, keep in zip(rows, unnamed.tolist(), strict=True) if keep]


def cache_slack(conn: Any, now: float | None = None) -> CacheSlack:
    """How many cached vectors no passage names, how many are still float32, and their bytes.
    (One pass over the cache and the packed passages' ids: 5-6 s at 100k chunks on a busy
    2-core machine, where the probe of 945k passage hashes before m014 took 10.)"""
    named = named_cache_ids(conn)
    orphans = _orphans(conn, now, named)
    wide = conn.execute(
        f"SELECT c.id, length(c.vector) - {stored_size_sql()}, {_UNNAMED_BY_HASH} "
        f"FROM embedding_cache c JOIN embedding_models m ON m.id = c.model_id "
        f"WHERE {wide_vectors()}"
    ).fetchall()
    by_id = set(named.tolist()) if wide else set()
    used = [saving for i, saving, unnamed in wide if not unnamed or i in by_id]
    return CacheSlack(len(orphans), sum(int(b) for _, b in orphans), len(used), int(sum(used)))


def prune_orphans(conn: Any, now: float | None = None) -> int:
    """Delete cached vectors no passage names (older than the grace period), inside the
    caller's transaction; returns how many. A text indexed again later is embedded again."""
    ids = [i for i, _ in _orphans(conn, now, named_cache_ids(conn))]
    for i in range(0, len(ids), LOOKUP_BATCH):
        part = ids[i : i + LOOKUP_BATCH]
        conn.execute(
            f"DELETE FROM embedding_cache WHERE id IN ({','.join('?' for _ in part)})", part
        )
    return len(ids)


def requantise(db: Database) -> int:
    """Rewrite cached vectors an older version stored wider (float32, 8-bit codes) in the
    cache's form (7-bit codes by default), a batch per transaction; returns how many."""
    return in_batches(db, shrink_batch)
