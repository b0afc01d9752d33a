"""The embedding cache, as stored: `embedding_cache` rows, one vector per (provider, model, text
hash), so a text is embedded once per model. When and in what batches texts are embedded is
decided in memory/index/embedcache.py.

It is also where a passage's vector lives: a packed passage names its cache row by id
(memory/store/passage_pack.py), an older passage row by id and hash (`cached_vectors`), so each
vector is stored once. Since migration m014 a row has an explicit id (`INTEGER PRIMARY KEY
AUTOINCREMENT`: a VACUUM keeps it, a deleted row's id is never handed out again), names its
provider and model by a small number (`embedding_models`) and its time in whole seconds.
Vectors are handed in and out as float32 blobs and stored as 7-bit codes around their model's
center (or 8-, 6- or 4-bit codes: memory/store/cache_codec.py `CACHE_BITS`); rows written in
another form read the same, and wider ones are rewritten by `requantise` (and by migration
m011). Keys are kept as the hash's 32 bytes (memory/store/content_hash.py `stored_hash`) and
handed out as the hex text they came in as.
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
from memory.store.content_hash import StoredHash, stored_hash
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
        wanted = {stored_hash(h): h for h in hashes}
        with self.db.lock:
            found = lookup(self.db.conn, key.provider, key.model, list(wanted), key.dimensions)
            if not found:
                return {}
            names = [wanted[k] for k in found]
            floats = float32_from_cache(self.db.conn, _triple(key), [b for _, b in found.values()])
        return dict(zip(names, floats, strict=True))

    def put(self, conn: Any, key: ModelKey, vectors: Sequence[tuple[str, bytes]]) -> None:
        now = int(time.time())
        stored = encode_for_cache(conn, _triple(key), [v for _, v in vectors])
        latest = {stored_hash(h): blob for (h, _), blob in zip(vectors, stored, strict=True)}
        # (provider, model, hash) is unique by this: the row a key has is replaced in place,
        # keeping its id, which passages name (memory/store/passage_pack.py); the others are new.
        there = lookup(conn, key.provider, key.model, list(latest))
        conn.executemany(
            "UPDATE embedding_cache SET dimensions = ?, vector = ?, created_at = ? WHERE id = ?",
            [(key.dimensions, latest[k], now, rowid) for k, (rowid, _) in there.items()],
        )
        model = model_id(conn, key.provider, key.model, create=True)
        conn.executemany(
            "INSERT INTO embedding_cache(model_id, chunk_hash, dimensions, vector, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            [(model, k, key.dimensions, blob, now) for k, blob in latest.items() if k not in there],
        )


def model_id(conn: Any, provider: str, model: str, create: bool = False) -> int | None:
    """The number the cache's rows name (provider, model) by (`embedding_models`); None when
    nothing was cached for it (made now when `create`, inside the caller's transaction)."""
    row = conn.execute(
        "SELECT id FROM embedding_models WHERE provider = ? AND model = ?", (provider, model)
    ).fetchone()
    if row is None and create:
        cur = conn.execute(
            "INSERT INTO embedding_models(provider, model) VALUES (?, ?)", (provider, model)
        )
        return int(cur.lastrowid)
    return None if row is None else int(row[0])


def lookup(
    conn: Any, provider: str, model: str, keys: Sequence[StoredHash], dimensions: int | None = None
) -> dict[StoredHash, tuple[int, bytes]]:
    """{stored hash: (id, stored vector)} of the cached rows among `keys` under the model
    (and width, when given). Found through the index on the hash's first 8 bytes (migration
    m013: the cache has no index of its whole key), each row's whole key compared."""
    found: dict[StoredHash, tuple[int, bytes]] = {}
    mid = model_id(conn, provider, model)
    if mid is None:
        return found
    width = "" if dimensions is None else "AND dimensions = ? "
    for i in range(0, len(keys), LOOKUP_BATCH):
        part = list(dict.fromkeys(keys[i : i + LOOKUP_BATCH]))
        marks = ",".join("?" for _ in part)
        prefixes = list(dict.fromkeys(k[:KEY_PREFIX] for k in part))
        pmarks = ",".join("?" for _ in prefixes)
        for rowid, k, blob in conn.execute(
            "SELECT id, chunk_hash, vector FROM embedding_cache "
            f"WHERE substr(chunk_hash, 1, {KEY_PREFIX}) IN ({pmarks}) AND chunk_hash IN ({marks}) "
            f"AND model_id = ? {width}",
            (*prefixes, *part, mid, *(() if dimensions is None else (dimensions,))),
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
    """The cache ids of `hashes` by the generation's model (inside the caller's
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
    """`cached_vectors` as stored (coded or float32 blobs), and the generation's model
    (whose center decodes the centered ones: cache_codec.center_of)."""
    with db.lock:
        key = _generation_key(db.conn, generation)
        mid = None if key is None else model_id(db.conn, str(key[0]), str(key[1]))
    if key is None:
        return {}, None
    found: dict[StoredHash, bytes] = {}
    known = list(dict.fromkeys(r for r in rows if r is not None)) if mid is not None else []
    for i in range(0, len(known), LOOKUP_BATCH):
        part = known[i : i + LOOKUP_BATCH]
        marks = ",".join("?" for _ in part)
        # (checked by hash: the row a passage named is its text's, of the model it was
        # indexed with, unless a VACUUM renumbered the rows — then the hash finds it below)
        found.update(
            db.execute(
                # (unary +: found by id, not through the key index)
                f"SELECT chunk_hash, vector FROM embedding_cache WHERE id IN ({marks}) "
                "AND +model_id = ? AND +dimensions = ?",
                (*part, mid, key[2]),
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
    float_rows: int  # vectors stored wider than the cache's form (by an older version)
    float_saving: int  # bytes the cache's form saves

    @property
    def bytes(self) -> int:
        return self.orphan_bytes + self.float_saving


# Cached vectors no passage row names by hash (the packed passages name theirs by id, checked
# apart: passage_pack.named_cache_ids).
_UNNAMED_BY_HASH = "chunk_hash NOT IN (SELECT hash FROM memory_units)"


def _orphans(conn: Any, now: float | None, named: np.ndarray) -> list[tuple[int, int]]:
    """(id, bytes) of the cached vectors no passage names, older than the grace period
    (`named`: the ids packed passages name)."""
    cutoff = (now if now is not None else time.time()) - ORPHAN_GRACE_S
    rows = conn.execute(
        "SELECT id, length(vector) + length(chunk_hash) + 40 FROM embedding_cache "
        f"WHERE created_at < ? AND {_UNNAMED_BY_HASH}",
        (cutoff,),
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
        f"SELECT id, length(vector) - {stored_size_sql()}, {_UNNAMED_BY_HASH} "
        f"FROM embedding_cache WHERE {wide_vectors()}"
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
