"""What an agent's PostgreSQL schema holds, read only, for the commands that must not build on
another agent's or their own data by mistake: `pinch agents add` (a schema kept by an agent
removed earlier) and `pinch migrate` (a target DSN that is the source's own database).

    tables_with_rows(dsn, "pinch_carol")     # ["memory_chunks", ...]; [] without the schema
    same_database(source, target)            # two DSNs, one database?
"""

from __future__ import annotations

from memory.store.postgres.transfer import NoSchema, PgSource, PgTarget, open_postgres_source


def same_database(source: PgSource, target: PgTarget) -> bool:
    """Whether the two are one database reached by two DSNs: the source's session (its pid
    and start) is one of the target database's own sessions."""
    mine = "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
    row = source.conn.execute(mine).fetchone()
    found = (
        row
        and target.conn.execute(
            "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND backend_start = %s "
            "AND datname = current_database()",
            (row[0], row[1]),
        ).fetchone()
    )
    return bool(found)


def tables_with_rows(dsn: str, schema: str) -> list[str]:
    """The tables of an existing agent schema that hold rows (what its stores wrote, not what
    its migrations or triggers keep); [] when `dsn` has no such schema. Read-only."""
    try:
        with open_postgres_source(dsn, schema) as source:
            return [t for t in source.inventory().tables if source.count(t)]
    except NoSchema:
        return []
