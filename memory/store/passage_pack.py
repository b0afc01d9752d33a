"""A chunk's passages packed in one row (issue 22, migration m014): `memory_passages`, keyed by
the chunk's id, holds its generation, the id of its first passage and one blob of (start line,
end line, embedding cache id) triples in the passages' order: since m017 in a compact form
(lines as small steps, ids in as few bytes as they need), before it as uint32 each — both read
alike (memory/store/span_codec.py).

A passage's vector is the embedding cache row its id names (memory/store/index_embedcache.py;
the cache's ids survive a VACUUM and are never reused), and its text hash is that row's key:
nothing is stored twice. Passages that name no cache row — not embedded, or carrying their own
vector (an index older than the cache's vectors, or rows copied from PostgreSQL) — stay one row
each in `memory_units`, as before; a chunk's passages are all in one table or the other.

Passage ids (the portable form's `memory_units.id`, `pinch migrate`) are one counter for both
tables: a packed chunk's passages are `first_unit`, `first_unit + 1`, … and take their ids from
`memory_units`' AUTOINCREMENT counter, so no id is handed out twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from memory.store.cache_codec import float32_from_cache
from memory.store.span_codec import PLAIN_WIDTH, SPAN, span_count, spans_blob, spans_of_many
from memory.store.span_codec import spans_of as spans_of  # (what tests and tools read blobs by)

_BATCH = 500  # ids bound in one statement (under SQLite's oldest limit of 999)
_PACK_ROWS = 20_000  # passages read at a time by the migration
_SPAN_ROWS = 20_000  # packed rows rewritten at a time by migration m017


def packable(spans: Iterable[tuple[int, int, int | None]]) -> bool:
    """Whether passages fit a packed row: each names a cache row, lines and ids fit uint32."""
    limit = np.iinfo(SPAN).max
    return all(c is not None and min(s, e, c) >= 0 and max(s, e, c) <= limit for s, e, c in spans)


def insert_packed(
    conn: Any, chunk_id: int, generation: int, spans: Sequence[tuple[int, int, int]]
) -> None:
    """Write a chunk's passages as one row, inside the caller's transaction."""
    first = _take_unit_ids(conn, len(spans))
    conn.execute(
        "INSERT INTO memory_passages(chunk_id, generation, first_unit, spans) VALUES (?, ?, ?, ?)",
        (chunk_id, generation, first, spans_blob(spans)),
    )


def _take_unit_ids(conn: Any, n: int) -> int:
    """The first of `n` new passage ids, from the counter `memory_units` ids come from."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'memory_units'").fetchone()
    if row is None:
        (top,) = conn.execute("SELECT coalesce(max(id), 0) FROM memory_units").fetchone()
        conn.execute(
            "INSERT INTO sqlite_sequence(name, seq) VALUES ('memory_units', ?)", (int(top) + n,)
        )
        return int(top) + 1
    conn.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'memory_units'", (row[0] + n,))
    return int(row[0]) + 1


def delete_packed(conn: Any, chunk_ids: Sequence[int]) -> None:
    conn.executemany("DELETE FROM memory_passages WHERE chunk_id = ?", [(i,) for i in chunk_ids])


def delete_generation(conn: Any, generation: int) -> None:
    conn.execute(
        "DELETE FROM memory_passages WHERE chunk_id IN "
        "(SELECT id FROM memory_chunks WHERE generation = ?)",
        (generation,),
    )


def packed_rows(read: Any, chunk_ids: Sequence[int]) -> list[tuple[int, int, np.ndarray]]:
    """(chunk id, generation, spans) of the packed chunks among `chunk_ids`, by chunk id.
    `read(sql, params)` returns rows (a Database's execute, or a connection's)."""
    out: list[tuple[int, int, np.ndarray]] = []
    for i in range(0, len(chunk_ids), _BATCH):
        part = list(chunk_ids[i : i + _BATCH])
        marks = ",".join("?" for _ in part)
        found = list(
            read(
                "SELECT chunk_id, generation, spans FROM memory_passages "
                f"WHERE chunk_id IN ({marks})",
                part,
            )
        )
        spans = spans_of_many([b for _, _, b in found])
        out += [(int(c), int(g), s) for (c, g, _), s in zip(found, spans, strict=True)]
    out.sort(key=lambda r: r[0])
    return out


def cache_blobs(read: Any, ids: Iterable[int]) -> dict[int, Any]:
    """{cache id: stored vector} of the cache rows among `ids`."""
    wanted = sorted(set(ids))
    found: dict[int, Any] = {}
    for i in range(0, len(wanted), _BATCH):
        part = wanted[i : i + _BATCH]
        marks = ",".join("?" for _ in part)
        found.update(read(f"SELECT id, vector FROM embedding_cache WHERE id IN ({marks})", part))
    return found


def named_cache_ids(conn: Any) -> np.ndarray:
    """The cache ids packed passages name (sorted, unique): what orphan pruning keeps."""
    ids: list[np.ndarray] = []
    cursor = conn.execute("SELECT spans FROM memory_passages")
    while found := cursor.fetchmany(_SPAN_ROWS):
        ids += [s[:, 2] for s in spans_of_many([b for (b,) in found])]
    if not ids:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.concatenate(ids).astype(np.int64))


def passage_count(conn: Any) -> int:
    """Passages in the index, packed or one row each."""
    packed = sum(span_count(b) for (b,) in conn.execute("SELECT spans FROM memory_passages"))
    (loose,) = conn.execute("SELECT count(*) FROM memory_units").fetchone()
    return packed + int(loose)


def generation_spans(conn: Any, generation: int) -> list[tuple[int, int, int]]:
    """(chunk id, start line, end line) of the generation's passages, each chunk's in order,
    chunks by id (bench/model_survey.py reads their texts)."""
    rows: list[tuple[int, int, int, int]] = []  # (chunk, passage id, start, end)
    found = conn.execute(
        "SELECT chunk_id, first_unit, spans FROM memory_passages WHERE generation = ?",
        (generation,),
    ).fetchall()
    for (cid, first, _), spans in zip(found, spans_of_many([b for *_, b in found]), strict=True):
        for i, (start, end, _) in enumerate(spans.tolist()):
            rows.append((int(cid), int(first) + i, start, end))
    rows += [
        (int(c), int(i), int(s), int(e))
        for c, i, s, e in conn.execute(
            "SELECT chunk_id, id, start_line, end_line FROM memory_units WHERE generation = ?",
            (generation,),
        )
    ]
    rows.sort()
    return [(c, s, e) for c, _, s, e in rows]


def portable_rows(conn: Any, columns: Sequence[str], chunks: int) -> Iterator[list[Any]]:
    """The packed passages as `pinch migrate` carries them (memory/store/transfer_sqlite.py):
    memory_units rows (id, chunk_id, generation, start_line, end_line, hash, vector) picked by
    `columns`, with the hash and the float32 vector of the cache row each names; `chunks`
    packed rows at a time."""
    cursor = conn.execute(
        "SELECT chunk_id, generation, first_unit, spans FROM memory_passages ORDER BY chunk_id"
    )
    while found := cursor.fetchmany(chunks):
        decoded = spans_of_many([b for *_, b in found])
        packed = [
            (int(c), int(g), int(f), s.tolist())
            for (c, g, f, _), s in zip(found, decoded, strict=True)
        ]
        cached: dict[int, tuple[Any, bytes]] = {}
        refs = sorted({ref for *_, spans in packed for _, _, ref in spans})
        for i in range(0, len(refs), _BATCH):
            part = refs[i : i + _BATCH]
            for cid, h, blob, *model in conn.execute(
                "SELECT c.id, c.chunk_hash, c.vector, m.provider, m.model, m.dimensions "
                "FROM embedding_cache c JOIN embedding_models m ON m.id = c.model_id "
                f"WHERE c.id IN ({','.join('?' for _ in part)})",
                part,
            ).fetchall():
                (floats,) = float32_from_cache(conn, (model[0], model[1], int(model[2])), [blob])
                cached[int(cid)] = (h, floats)
        out: list[Any] = []
        for chunk, gen, first, spans in packed:
            for i, (start, end, ref) in enumerate(spans):
                h, vector = cached.get(ref, (None, None))
                row: dict[str, Any] = {"id": first + i, "chunk_id": chunk, "generation": gen}
                row |= {"start_line": start, "end_line": end, "hash": h, "vector": vector}
                out.append(tuple(row.get(c) for c in columns))
        yield out


# ---- migration m017: the plain blobs of m014 in the compact form ------------------------------


def compact_spans_batch(conn: Any, last: int) -> tuple[int, int | None]:
    """Rewrite the plain blobs (memory/store/span_codec.py) among the packed rows after chunk
    `last` in the compact form, up to `_SPAN_ROWS` rows; returns (blobs rewritten, the last
    chunk id looked at, None when there are no more). Lines and cache ids stay as they were;
    a blob the compact form does not fit stays plain."""
    found = conn.execute(
        "SELECT chunk_id, spans FROM memory_passages WHERE chunk_id > ? AND length(spans) > 0 "
        f"AND length(spans) % {PLAIN_WIDTH} = 0 ORDER BY chunk_id LIMIT ?",
        (last, _SPAN_ROWS),
    ).fetchall()
    if not found:
        return 0, None
    spans = spans_of_many([b for _, b in found])
    changed = [
        (blob, int(cid))
        for (cid, old), s in zip(found, spans, strict=True)
        if (blob := spans_blob(s.tolist())) != old
    ]
    conn.executemany("UPDATE memory_passages SET spans = ? WHERE chunk_id = ?", changed)
    return len(changed), int(found[-1][0])


# ---- migration m014: the passages of an older index packed ----------------------------------


_UNITS = (
    "SELECT u.chunk_id, u.generation, u.id, u.start_line, u.end_line, u.hash, "
    "u.vector IS NULL, c.id, c.model_id, c.dimensions FROM memory_units u "
    "LEFT JOIN embedding_cache c ON c.id = u.cache_row AND c.chunk_hash = u.hash"
)
_UNITS_ORDER = "ORDER BY u.chunk_id, u.id LIMIT ?"


def pack_existing(conn: Any) -> int:
    """Pack every chunk whose passages all name a cache row of their generation's model and
    have consecutive ids; the others stay as they are. A passage's cache row is the one its
    `cache_row` names when that row holds its hash and model, else the one its hash finds.
    Returns the chunks packed."""
    model_of = _generation_models(conn)

    def lookup(model: int, dims: int, hashes: list[Any]) -> dict[Any, int]:
        return _ids_by_hash(conn, model, dims, hashes)

    packed: list[int] = []
    kept = False
    last = -1
    while True:
        # (a page of whole chunks, by chunk id: the last chunk of a full page may go on in
        # the next, so it waits for it)
        rows = conn.execute(f"{_UNITS} WHERE u.chunk_id > ? {_UNITS_ORDER}", (last, _PACK_ROWS))
        rows = rows.fetchall()
        if len(rows) == _PACK_ROWS:
            whole = [r for r in rows if r[0] != rows[-1][0]]
            if not whole:  # one chunk of more passages than a page: all of it
                rows = conn.execute(
                    f"{_UNITS} WHERE u.chunk_id = ? {_UNITS_ORDER}", (rows[0][0], -1)
                )
                rows = rows.fetchall()
            else:
                rows = whole
        if not rows:
            break
        last = int(rows[-1][0])
        chunks, loose = _packed_chunks(rows, model_of, lookup)
        kept = kept or loose
        conn.executemany(
            "INSERT INTO memory_passages(chunk_id, generation, first_unit, spans) "
            "VALUES (?, ?, ?, ?)",
            [(cid, gen, first, spans_blob(spans)) for cid, gen, first, spans in chunks],
        )
        packed += [c[0] for c in chunks]
    if not kept:
        conn.execute("DELETE FROM memory_units")
    else:
        conn.executemany("DELETE FROM memory_units WHERE chunk_id = ?", [(c,) for c in packed])
    return len(packed)


def _packed_chunks(
    rows: list[Any], model_of: dict[int, tuple[int, int] | None], lookup: Any
) -> tuple[list[tuple[int, int, int, list[tuple[int, int, int]]]], bool]:
    """The chunks among `rows` (ordered by chunk, then id) that pack, and whether any did not."""
    unresolved: dict[tuple[int, int], set[Any]] = {}
    for _, gen, _, _, _, h, shared, cid, mid, dims in rows:
        model = model_of.get(int(gen))
        if shared and model is not None and (cid is None or (mid, dims) != model):
            unresolved.setdefault(model, set()).add(bytes(h) if isinstance(h, memoryview) else h)
    found = {m: lookup(m[0], m[1], list(hs)) for m, hs in unresolved.items()}
    by_chunk: dict[int, list[Any]] = {}
    for r in rows:
        by_chunk.setdefault(int(r[0]), []).append(r)
    out: list[tuple[int, int, int, list[tuple[int, int, int]]]] = []
    for chunk_id, group in by_chunk.items():
        gen, first = int(group[0][1]), int(group[0][2])
        model = model_of.get(gen)
        spans: list[tuple[int, int, int | None]] = []
        for i, (_, g, uid, start, end, h, shared, cid, mid, dims) in enumerate(group):
            # (a vector of its own, or no model: stays a row of its own, as do odd ids)
            if int(g) != gen or int(uid) != first + i or not shared or model is None:
                spans = [(0, 0, None)]
                break
            if cid is None or (mid, dims) != model:
                key = bytes(h) if isinstance(h, memoryview) else h
                cid = found.get(model, {}).get(key)
            spans.append((int(start), int(end), None if cid is None else int(cid)))
        if spans and packable(spans):
            out.append((chunk_id, gen, first, [(s, e, c) for s, e, c in spans if c is not None]))
    return out, len(out) < len(by_chunk)


def _generation_models(conn: Any) -> dict[int, tuple[int, int] | None]:
    """generation -> (the cache's number for its model, its dimensions); None: no model."""
    out: dict[int, tuple[int, int] | None] = {}
    for gen, identity in conn.execute("SELECT id, identity FROM memory_generations").fetchall():
        named = json.loads(identity)
        found = conn.execute(
            "SELECT id FROM embedding_models WHERE provider = ? AND model = ?",
            (named.get("provider"), named.get("model")),
        ).fetchone()
        dims = named.get("dimensions")
        out[int(gen)] = None if found is None or dims is None else (int(found[0]), int(dims))
    return out


def _ids_by_hash(conn: Any, model: int, dims: int, hashes: list[Any]) -> dict[Any, int]:
    """{stored hash: cache id} of the model's rows among `hashes` (through the key index on
    the hash's first 8 bytes, as index_embedcache.lookup)."""
    out: dict[Any, int] = {}
    for i in range(0, len(hashes), _BATCH):
        part = hashes[i : i + _BATCH]
        prefixes = list(dict.fromkeys(h[:8] for h in part))
        rows = conn.execute(
            "SELECT id, chunk_hash FROM embedding_cache WHERE substr(chunk_hash, 1, 8) IN "
            f"({','.join('?' for _ in prefixes)}) AND chunk_hash IN "
            f"({','.join('?' for _ in part)}) AND model_id = ? AND dimensions = ?",
            (*prefixes, *part, model, dims),
        )
        out.update((bytes(h) if isinstance(h, memoryview) else h, int(cid)) for cid, h in rows)
    return out
