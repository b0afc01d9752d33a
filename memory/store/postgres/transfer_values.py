"""Row values as `pinch migrate`'s PostgreSQL side reads and writes them (memory/store/postgres/
transfer.py): the stored vectors of passages and the embedding cache read in the portable
float32 form (memory/store/transfer.py; written back as codes by transfer_values.coded_rows),
the centroids read from pgvector's column as float32 blobs, and the text-array and pgvector
binary inputs COPY is given."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from memory.store.cache_codec import as_float32
from memory.store.postgres.vectors import floats_of
from memory.store.transfer import Rows
from memory.store.transfer_values import vector_at
from memory.store.vector_tables import to_blob


def float32_rows(table: str, columns: Sequence[str]) -> Callable[[Sequence[Any]], Rows]:
    """A function turning `table`'s fetched rows into tuples in the portable form (a coded
    vector decoded to float32; float32 and NULL as they are)."""
    at = vector_at(table, columns)
    if at is None:
        return lambda found: [tuple(r) for r in found]

    def portable(found: Sequence[Any]) -> Rows:
        return [
            (*r[:at], None if r[at] is None else as_float32(bytes(r[at])), *r[at + 1 :])
            for r in found
        ]

    return portable


def matrix_floats(table: str, columns: Sequence[str]) -> Callable[[Sequence[Any]], Rows]:
    """A function turning a generation's fetched matrix rows (`embedding` read in binary) into
    their portable form: the centroid as a float32 little-endian blob."""
    at = list(columns).index("vector") if "vector" in columns else None
    if at is None:
        return lambda found: [tuple(r) for r in found]
    return lambda found: [(*r[:at], to_blob(floats_of(r[at])), *r[at + 1 :]) for r in found]


def text_array(words: list[str]) -> str:
    """A text[] literal of tokens, each quoted (made here: psycopg's list dumper costs more
    than the rest of the keyword copy). Tokens are letters and digits; escaping is a guard."""
    quoted = (w.replace("\\", "\\\\").replace('"', '\\"') for w in words)
    return "{" + ",".join(f'"{w}"' for w in quoted) + "}"


def pgvector_binary(blob: bytes) -> bytes:
    """pgvector's binary input of a float32 little-endian blob: dimensions, 0, big-endian floats."""
    floats = np.frombuffer(blob, dtype="<f4")
    return struct.pack(">HH", len(floats), 0) + floats.astype(">f4").tobytes()
