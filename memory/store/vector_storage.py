"""Which implementation stores the vectors: the row tables with their change log, and the pack.

Vector search (memory/search/) is handed a `VectorStorage` and never names an implementation;
SQLite's (`sqlite_vector_storage`) or PostgreSQL's (`postgres.vectors.postgres_vector_storage`).
"""

from __future__ import annotations

from dataclasses import dataclass

from memory.store.vector_pack import MatrixPack, SqliteMatrixPack
from memory.store.vector_tables import SqliteVectorTables, VectorTables


@dataclass(frozen=True)
class VectorStorage:
    """The repositories a vector store reads and writes through."""

    tables: VectorTables
    pack: MatrixPack


def sqlite_vector_storage() -> VectorStorage:
    """The vectors in the agent's SQLite file (the default)."""
    return VectorStorage(SqliteVectorTables(), SqliteMatrixPack())
