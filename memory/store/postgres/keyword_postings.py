"""Feature "keyword_postings" (issue 19, search p95 at 1M chunks) on PostgreSQL: the keyword
side's postings, `memory_keyword_postings` — each (token, keyword row) once, with the token's
count in the row and the row's length — kept by statement-level triggers on `memory_keywords`
and filled from the rows already there. memory/store/postgres/keywords.py
`postings_statement` ranks from them.
"""

from __future__ import annotations

from typing import Any

# The postings' upkeep: statement-level triggers on the keyword rows (one statement per batch of
# rows, whatever writes them: the index, `pinch migrate`'s COPY, a restore, a migration's
# UPDATE), with the schema taken from the trigger so one function body serves every agent.
_POSTINGS_FUNCTION = """
CREATE FUNCTION memory_keyword_postings_sync() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        EXECUTE format('TRUNCATE %I.memory_keyword_postings', TG_TABLE_SCHEMA);
        RETURN NULL;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        EXECUTE format(
            'DELETE FROM %I.memory_keyword_postings AS p USING (SELECT DISTINCT o.chunk_id, t '
            'FROM old_rows AS o, unnest(o.tokens) AS t) AS d '
            'WHERE p.token = d.t AND p.chunk_id = d.chunk_id', TG_TABLE_SCHEMA);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        EXECUTE format(
            'INSERT INTO %I.memory_keyword_postings (token, chunk_id, tf, dl) '
            'SELECT t, n.chunk_id, count(*), cardinality(n.tokens) FROM new_rows AS n, '
            'unnest(n.tokens) AS t GROUP BY n.chunk_id, t, cardinality(n.tokens)',
            TG_TABLE_SCHEMA);
    END IF;
    RETURN NULL;
END
$body$
"""
_POSTINGS_TRIGGERS = (
    "CREATE TRIGGER memory_keywords_postings_insert AFTER INSERT ON memory_keywords "
    "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION memory_keyword_postings_sync()",
    "CREATE TRIGGER memory_keywords_postings_update AFTER UPDATE ON memory_keywords "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION memory_keyword_postings_sync()",
    "CREATE TRIGGER memory_keywords_postings_delete AFTER DELETE ON memory_keywords "
    "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION memory_keyword_postings_sync()",
    "CREATE TRIGGER memory_keywords_postings_truncate AFTER TRUNCATE ON memory_keywords "
    "FOR EACH STATEMENT EXECUTE FUNCTION memory_keyword_postings_sync()",
)


_POSTINGS_TABLE = (
    """CREATE TABLE memory_keyword_postings (
        token text NOT NULL,
        chunk_id bigint NOT NULL,
        tf integer NOT NULL,  -- the token's occurrences in the row
        dl integer NOT NULL   -- the row's length in tokens (bm25's document length)
    )""",
    "INSERT INTO memory_keyword_postings (token, chunk_id, tf, dl) "
    "SELECT t, k.chunk_id, count(*), cardinality(k.tokens) FROM memory_keywords AS k, "
    "unnest(k.tokens) AS t GROUP BY t, k.chunk_id, cardinality(k.tokens) ORDER BY t, k.chunk_id",
    # The key built once over the sorted rows (full pages), not entry by entry.
    "ALTER TABLE memory_keyword_postings ADD PRIMARY KEY (token, chunk_id) INCLUDE (tf, dl)",
    # Its statistics now, for the join order of an AND (autovacuum's VACUUM, which lets the
    # reads skip the heap, follows on its own: it cannot run in a transaction).
    "ANALYZE memory_keyword_postings",
)


def p001_keyword_postings(conn: Any) -> None:
    """Feature: PostgreSQL's keyword side read from postings (issue 19, search p95 at 1M chunks).
    Each (token, keyword row) once, with the token's count in the row (`tf`) and the row's
    length (`dl`): the newest rows holding a word are the first entries of its range of the
    primary key, read backwards from the index alone, and bm25 needs nothing else — instead of
    walking the keyword rows newest first testing each one's token array, then reading the kept
    rows' arrays again to count. Kept by triggers on `memory_keywords` in the same statement as
    the rows; derived data, never copied (`pinch migrate`, backups: the triggers rebuild it).
    Filled from the rows already there."""
    for statement in _POSTINGS_TABLE:
        conn.execute(statement)
    conn.execute(_POSTINGS_FUNCTION)
    for trigger in _POSTINGS_TRIGGERS:
        conn.execute(trigger)
