"""The per-generation vector tables' names, and dropping them (memory/store/vector_tables.py,
vector_pack.py and vector_knn.py hold what is in them)."""

from __future__ import annotations

import contextlib
from typing import Any


def vec_table(generation: int) -> str:
    return f"memory_vec_g{int(generation)}"


def matrix_table(generation: int) -> str:
    return f"memory_matrix_g{int(generation)}"


def log_table(generation: int) -> str:
    return f"memory_matrix_log_g{int(generation)}"


def pack_table(generation: int) -> str:
    return f"memory_matrix_pack_g{int(generation)}"


def create_matrix(table: str) -> str:
    """The statement creating a generation's row table (`vector` NULL: the pack holds it)."""
    return f"CREATE TABLE {table} (chunk_id INTEGER PRIMARY KEY, scope TEXT NOT NULL, vector BLOB)"


def vec0_seq_key(generation: int) -> str:
    return f"vec0_seq_g{int(generation)}"


def table_exists(conn: Any, name: str) -> bool:
    return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone())


def drop_vec_table(conn: Any, generation: int) -> None:
    """Drop a generation's vector tables (matrix, change log, pack, vec0) inside the caller's
    transaction. Without the extension loaded the vec0 table cannot be dropped and stays until a
    run that can load sqlite-vec (searches never read a retired generation; a generation that
    gets its id again starts with its vec0 table out of step, so sqlite-vec empties it before
    use)."""
    conn.execute("DELETE FROM meta WHERE key = ?", (vec0_seq_key(generation),))
    conn.execute(f"DROP TABLE IF EXISTS {matrix_table(generation)}")
    conn.execute(f"DROP TABLE IF EXISTS {log_table(generation)}")
    conn.execute(f"DROP TABLE IF EXISTS {pack_table(generation)}")
    with contextlib.suppress(Exception):
        conn.execute(f"DROP TABLE IF EXISTS {vec_table(generation)}")
