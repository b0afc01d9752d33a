"""The embedding cache's vectors as stored (feature "size", issue 22): 7-bit codes around the
model's center by default (memory/store/vector_codec.py `encode7_many`: 342 bytes at 384
dimensions), or 6- or 4-bit ones (`encode6_many`, `encode4_many`: 294 / 198 bytes), 8-bit
codes of the whole vector where the width does not allow them; the centers themselves, and what
rewrites an older version's wider rows. No database handle here, only a connection inside the
caller's transaction: the cache (index_embedcache.py), the migrations and `pinch migrate` use it.

A model's center is written once, by the first batch of at least `CENTER_SAMPLE` vectors
cached for it (the batch's mean; smaller batches before it are stored 8-bit), in
`meta` under `cache_center:<provider>|<model>|<dimensions>` (float32 as hex), and never
changed: every centered vector of that model is coded around it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from memory.store.vector_codec import (
    decode,
    decode_centered_many,
    encodable,
    encodable4,
    encodable6,
    encodable7,
    encode,
    encode4_many,
    encode6_many,
    encode7_many,
    is_centered,
    is_compact,
)

ModelTriple = tuple[str, str, int]  # provider, model, dimensions

# The cache's codes: 7-bit codes of the vector minus its model's center by default (2026-12-03,
# bench/RESULTS.md): 48 bytes a vector less than the 8-bit codes of the whole vector (23 MB at
# 100k chunks) for the same score error (0.00026 against 0.00023 on LoCoMo turns); LoCoMo and
# MADial at every preset within one question of 8-bit, the survival bench over four
# conversations 168 against 169 reworded facts found, Active Memory 160 against 159. 4-bit codes
# (≈ 95 MB less than 8-bit at 100k) found one reworded fact fewer and cost the vector preset
# 0.027 MRR on LoCoMo conv-26; 6-bit codes (≈ 52 MB less) two reworded questions (45 → 43/50)
# and three LoCoMo multi-hop ones (72 → 69/142) (bench/RESULTS.md, 2026-12-03 08:30). Set to 8,
# 6 or 4 to measure them; rows of any form read back alike, and a compaction rewrites wider ones.
CACHE_BITS = 7


# The width a centered form needs (a whole number of bytes, a length float32 never has), what
# tells a width it fits, and the encoder.
_CENTERED_WIDTH = {4: 8, 6: 16, 7: 32}
_ENCODABLE = {4: encodable4, 6: encodable6, 7: encodable7}
_ENCODERS = {4: encode4_many, 6: encode6_many, 7: encode7_many}


def _centered(dims: int) -> bool:
    """Whether the cache's form for vectors of this width is a centered one (4-, 6- or 7-bit)."""
    return CACHE_BITS in _ENCODABLE and _ENCODABLE[CACHE_BITS](dims)


def wide_vectors(dims: str = "m.dimensions") -> str:
    """SQL: the cached vectors stored wider than the cache's form (float32; and 8-bit codes
    when the cache is 7-, 6- or 4-bit), which a compaction rewrites. `dims`: the rows' width
    (since m016 their model's, `m` the joined `embedding_models`)."""
    float32 = f"(length(vector) = 4 * {dims} AND {dims} % 4 = 0)"
    if CACHE_BITS not in _CENTERED_WIDTH:
        return float32
    return (
        f"({float32} OR (length(vector) = {dims} + 6 AND {dims} % "
        f"{_CENTERED_WIDTH[CACHE_BITS]} = 0 AND substr(vector, 1, 2) = X'6938'))"
    )


def stored_size_sql(dims: str = "m.dimensions") -> str:
    """SQL: the bytes a cached vector of width `dims` takes in the cache's form."""
    if CACHE_BITS not in _CENTERED_WIDTH:
        return f"{dims} + 6"
    size = {4: f"{dims} / 2", 6: f"{dims} * 3 / 4", 7: f"{dims} * 7 / 8"}[CACHE_BITS]
    width = _CENTERED_WIDTH[CACHE_BITS]
    return f"CASE WHEN {dims} % {width} = 0 THEN {size} + 6 ELSE {dims} + 6 END"


SHRINK_BATCH = 2000
# The fewest vectors a model's center is made from (a center from one text leaves the others
# ≈ 1.6× the residual a mean leaves): a smaller first batch is stored 8-bit until then.
CENTER_SAMPLE = 8


def _center_key(model: ModelTriple) -> str:
    provider, name, dims = model
    return f"cache_center:{provider}|{name}|{int(dims)}"


def center_of(conn: Any, model: ModelTriple) -> np.ndarray | None:
    """The model's center, None if nothing centered was cached for it yet."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (_center_key(model),)).fetchone()
    if row is None:
        return None
    return np.frombuffer(bytes.fromhex(row[0]), dtype="<f4").astype(np.float32)


def _ensure_center(conn: Any, model: ModelTriple, sample: np.ndarray) -> np.ndarray:
    found = center_of(conn, model)
    if found is not None:
        return found
    mean = np.asarray(sample, dtype=np.float32).mean(axis=0).astype("<f4")
    conn.execute(
        "INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)",
        (_center_key(model), mean.tobytes().hex()),
    )
    stored = center_of(conn, model)
    assert stored is not None
    return stored


def encode_for_cache(conn: Any, model: ModelTriple, blobs: Sequence[bytes]) -> list[bytes]:
    """float32 vectors of `model` as the cache stores them (7-, 6- or 4-bit around the model's
    center, written now if it is the first batch; 8-bit when `CACHE_BITS` is 8, when the width
    does not allow the centered form, and before the model has a center; blobs of another length
    as they are), inside the caller's transaction."""
    dims = int(model[2])
    out = [bytes(b) for b in blobs]
    wide = [i for i, b in enumerate(out) if len(b) == 4 * dims and encodable(dims)]
    if not wide:
        return out
    floats = np.frombuffer(b"".join(out[i] for i in wide), dtype="<f4").reshape(len(wide), dims)
    centered = _centered(dims)
    center = center_of(conn, model) if centered else None
    if center is None and centered and len(wide) >= CENTER_SAMPLE:
        center = _ensure_center(conn, model, floats)
    # (no center yet and too few to make a good one: 8-bit until a compaction rewrites them)
    coded = [encode(v) for v in floats] if center is None else _encode(floats, center)
    for i, blob in zip(wide, coded, strict=True):
        out[i] = blob
    return out


def _encode(floats: np.ndarray, center: np.ndarray) -> list[bytes]:
    return _ENCODERS[CACHE_BITS](floats, center)


def float32_from_cache(conn: Any, model: ModelTriple, blobs: Sequence[bytes]) -> list[bytes]:
    """Cached vectors of `model` (any stored form) as float32 blobs."""
    out = [bytes(b) for b in blobs]
    coded = [i for i, b in enumerate(out) if is_centered(b)]
    if coded:
        center = center_of(conn, model)
        if center is None:
            raise ValueError(f"no center for the coded cached vectors of {model[0]}/{model[1]}")
        decoded = decode_centered_many([out[i] for i in coded], center).astype("<f4")
        for i, row in zip(coded, decoded, strict=True):
            out[i] = row.tobytes()
    return [as_float32(b) for b in out]


def as_float32(blob: bytes) -> bytes:
    """A float32 or 8-bit stored vector as a float32 blob (centered: `float32_from_cache`)."""
    return decode(blob).astype("<f4").tobytes() if is_compact(blob) else blob


def shrink_batch(conn: Any, after: int) -> tuple[int, int | None]:
    """Rewrite the next `SHRINK_BATCH` wide cached vectors with a rowid above `after` in the
    cache's form, inside the caller's transaction: (how many, the last rowid seen — None when
    none were left)."""
    picked, dims = _model_columns(conn)
    rows = conn.execute(
        f"SELECT c.rowid, c.vector, {picked} WHERE {wide_vectors(dims)} AND c.rowid > ? "
        "ORDER BY c.rowid LIMIT ?",
        (after, SHRINK_BATCH),
    ).fetchall()
    if not rows:
        return 0, None
    by_model: dict[ModelTriple, list[tuple[int, bytes]]] = {}
    for rowid, blob, provider, name, width in rows:
        by_model.setdefault((provider, name, int(width)), []).append((int(rowid), bytes(blob)))
    done = 0
    for model, items in by_model.items():
        floats = [as_float32(b) for _, b in items]
        coded = encode_for_cache(conn, model, floats)
        changed = [(c, r) for (r, b), c in zip(items, coded, strict=True) if c != b]
        conn.executemany("UPDATE embedding_cache SET vector = ? WHERE rowid = ?", changed)
        done += len(changed)
    return done, int(rows[-1][0])


def _model_columns(conn: Any) -> tuple[str, str]:
    """SQL: a cache row's provider, model and width with the FROM clause (`c` the cache), and
    the width's expression. In the row itself before m014 (m011 runs on that layout); the
    provider and model named by a number since, and the width too since m016."""
    columns = {str(r[1]) for r in conn.execute("PRAGMA table_info(embedding_cache)").fetchall()}
    if "provider" in columns:
        return "c.provider, c.model, c.dimensions FROM embedding_cache c", "c.dimensions"
    dims = "c.dimensions" if "dimensions" in columns else "m.dimensions"
    return (
        f"m.provider, m.model, {dims} FROM embedding_cache c "
        "JOIN embedding_models m ON m.id = c.model_id"
    ), dims
