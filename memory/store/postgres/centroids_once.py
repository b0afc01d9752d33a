"""Feature "each vector stored once" (issue 22) on PostgreSQL: a chunk's centroid kept only in
its generation's pgvector column (`memory_matrix_g<N>.embedding`, float32, under HNSW).

Older versions wrote it three times: that column, a float32 `bytea` copy beside it in the same
row (`vector`, what the exact re-rank read), and `memory_chunks.centroid` (an UPDATE per chunk
at index time); a schema filled by `pinch migrate` from SQLite also held SQLite's pack of them,
which nothing on PostgreSQL reads. The migration drops the `bytea` column of every generation's
table and every pack table: catalog changes, no row rewritten, so it is quick at any size under
the schema's lock. The dropped column's bytes stay in the table's pages until its rows are
written again — by the next rebuild, or `VACUUM FULL` of the tables, which locks them while it
rewrites them. `memory_chunks.centroid` stays (no longer written): it is the only copy of the
centroids of a generation an older SQLite file brought over before that generation had a table,
which the generation's first write copies in (vectors.py `PgVectorTables._create`).
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

# The per-generation tables of the current schema (search_path's first), by name pattern.
_TABLES = (
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname ~ %s"
)
_HAS_COLUMN = (
    "SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = %s AND NOT attisdropped"
)


def p001_centroids_once(conn: Any) -> None:
    """Each generation's centroids once, in `embedding`: the `bytea` copy and the packs go."""
    for (name,) in conn.execute(_TABLES, (r"^memory_matrix_g\d+$",)).fetchall():
        if conn.execute(_HAS_COLUMN, (sql.Identifier(name).as_string(conn), "vector")).fetchone():
            conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN vector").format(sql.Identifier(name)))
    for (name,) in conn.execute(_TABLES, (r"^memory_matrix_pack_g\d+$",)).fetchall():
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))
