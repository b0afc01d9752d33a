"""A chunk's text as stored (feature "size2", issue 22): deflate with a preset dictionary made
from the database's own chunks, so `memory_chunks.text` takes a fraction of the Markdown it
copies (6.7× smaller on the synthetic 100k workspace, ≈ 2.2× on the repository's own Markdown;
plain deflate without a dictionary: 1.6×). Exact: the text comes back byte for byte, which the
keyword index's deletes need (memory/store/index_rows.py recomputes the body from it).

A stored text is either TEXT (written plain: before a dictionary existed, or when compressing
would not make it smaller, or by an older version) or a BLOB: `FORMAT` (1 byte), the
dictionary's id (`ID_BYTES` of its SHA-256), then raw deflate. The dictionary is kept in `meta`
under `text_dict:<id hex>`; the blob names it, so a row reads right whatever database or
process wrote it, and a dictionary is never changed once written. The database's current one
is `meta` `text_dict` (its id), made once from `DICT_SAMPLE` chunks spread over the index once
at least `DICT_MIN_BYTES` of text is there (`ensure_dictionary`); rows written plain before it
are compressed by `compress_batch` (migration m012 and `pinch memory compact`).

Reading costs ≈ 7 µs of CPU a chunk (the dictionary is set on every row): ≈ 0.1-0.7 ms for
the chunks one search loads.
"""

from __future__ import annotations

import hashlib
import threading
import zlib
from collections.abc import Sequence
from typing import Any

FORMAT = b"\x01"
ID_BYTES = 8
DICT_BYTES = 32_768  # deflate's window: a longer dictionary is not used
DICT_SAMPLE = 200  # chunks a dictionary is made from, spread over the index
DICT_MIN_BYTES = 65_536  # no dictionary from less text than this (few chunks: a poor one)
LEVEL = 6
BATCH = 2000
_CURRENT = "text_dict"
_WBITS = -15  # raw deflate: no zlib header or checksum (the row is checked by SQLite)

_dicts: dict[bytes, bytes] = {}  # id -> dictionary: ids are content hashes, valid everywhere
_DICTS_KEPT = 256  # dictionaries kept in memory (one per agent database: a gateway's agents)
_dicts_lock = threading.Lock()


def _key(dict_id: bytes) -> str:
    return f"{_CURRENT}:{dict_id.hex()}"


def _dictionary(conn: Any, dict_id: bytes) -> bytes:
    with _dicts_lock:
        found = _dicts.get(dict_id)
    if found is not None:
        return found
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (_key(dict_id),)).fetchone()
    if row is None:
        raise ValueError(f"chunk text dictionary {dict_id.hex()} is missing from meta")
    data = bytes.fromhex(row[0])
    if hashlib.sha256(data).digest()[:ID_BYTES] != dict_id:
        raise ValueError(f"chunk text dictionary {dict_id.hex()} does not match its id")
    with _dicts_lock:
        _dicts[dict_id] = data
        while len(_dicts) > _DICTS_KEPT:  # the oldest read first goes (read again if needed)
            _dicts.pop(next(iter(_dicts)))
    return data


def current_dictionary(conn: Any) -> tuple[bytes, bytes] | None:
    """(id, dictionary) of the database's current dictionary, None if it has none yet."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (_CURRENT,)).fetchone()
    if row is None:
        return None
    dict_id = bytes.fromhex(row[0])
    return dict_id, _dictionary(conn, dict_id)


def make_dictionary(texts: Sequence[str]) -> bytes:
    """A preset dictionary from sample texts: their last `DICT_BYTES` bytes together (deflate
    finds strings nearer the end of the dictionary with shorter distances)."""
    return "\n".join(texts).encode("utf-8", "surrogatepass")[-DICT_BYTES:]


def ensure_dictionary(conn: Any) -> tuple[bytes, bytes] | None:
    """The current dictionary, made now from the index's chunks if there is none and they hold
    at least `DICT_MIN_BYTES` of text (inside the caller's transaction); None: too little yet."""
    found = current_dictionary(conn)
    if found is not None:
        return found
    span = conn.execute("SELECT min(id), max(id) FROM memory_chunks").fetchone()
    if span is None or span[0] is None:
        return None
    low, high = int(span[0]), int(span[1])
    # (chunks at evenly spaced ids: spread over the index, the same sample for the same rows)
    rows = {
        r[0]: r[1]
        for at in range(DICT_SAMPLE)
        if (
            r := conn.execute(
                "SELECT id, text FROM memory_chunks WHERE id >= ? ORDER BY id LIMIT 1",
                (low + (high - low) * at // DICT_SAMPLE,),
            ).fetchone()
        )
    }
    texts = [read_text(conn, t) for _, t in sorted(rows.items())]
    if sum(len(t) for t in texts) < DICT_MIN_BYTES:
        return None
    data = make_dictionary(texts)
    dict_id = hashlib.sha256(data).digest()[:ID_BYTES]
    conn.execute(
        "INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)", (_key(dict_id), data.hex())
    )
    conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)", (_CURRENT, dict_id.hex()))
    return current_dictionary(conn)  # (another process may have made one first: that one)


def pack_text(text: str, dictionary: tuple[bytes, bytes] | None) -> str | bytes:
    """The text as stored: compressed with the dictionary, or as it is when there is none or
    compressing would not make it smaller."""
    if dictionary is None:
        return text
    dict_id, data = dictionary
    raw = text.encode("utf-8", "surrogatepass")
    packer = zlib.compressobj(LEVEL, zlib.DEFLATED, _WBITS, 9, zlib.Z_DEFAULT_STRATEGY, data)
    packed = FORMAT + dict_id + packer.compress(raw) + packer.flush()
    return packed if len(packed) < len(raw) else text


def read_text(conn: Any, stored: str | bytes) -> str:
    """A stored text back as it was written (`conn` reads the dictionary it names)."""
    if isinstance(stored, str):
        return stored
    blob = bytes(stored)
    if blob[:1] != FORMAT:
        raise ValueError("a chunk's stored text is in an unknown form")
    data = _dictionary(conn, blob[1 : 1 + ID_BYTES])
    unpacker = zlib.decompressobj(_WBITS, data)
    raw = unpacker.decompress(blob[1 + ID_BYTES :]) + unpacker.flush()
    return raw.decode("utf-8", "surrogatepass")


def read_texts(conn: Any, rows: Sequence[Any], at: int) -> list[tuple[Any, ...]]:
    """`rows` with column `at` (a stored text) read back."""
    return [(*r[:at], read_text(conn, r[at]), *r[at + 1 :]) for r in rows]


def compress_batch(conn: Any, after: int) -> tuple[int, int | None]:
    """Compress the next `BATCH` plain chunk texts with an id above `after` (making the
    dictionary first if due), inside the caller's transaction: (how many were compressed, the
    last id seen — None when none were left, or there is still too little text for a
    dictionary)."""
    dictionary = ensure_dictionary(conn)
    if dictionary is None:
        return 0, None
    rows = conn.execute(
        "SELECT id, text FROM memory_chunks WHERE id > ? AND typeof(text) = 'text' "
        "ORDER BY id LIMIT ?",
        (after, BATCH),
    ).fetchall()
    if not rows:
        return 0, None
    changed = [
        (packed, cid)
        for cid, text in rows
        if not isinstance(packed := pack_text(text, dictionary), str)
    ]
    conn.executemany("UPDATE memory_chunks SET text = ? WHERE id = ?", changed)
    return len(changed), int(rows[-1][0])


def plain_text_bytes(conn: Any) -> int:
    """Bytes of chunk text stored plain (what `compress_batch` would look at)."""
    (n,) = conn.execute(
        "SELECT coalesce(sum(length(CAST(text AS BLOB))), 0) FROM memory_chunks "
        "WHERE typeof(text) = 'text'"
    ).fetchone()
    return int(n)
