"""Feature "cjk" (issues 20/22/19, CJK bigrams as index tokens) on PostgreSQL: the keyword rows
written again from the chunk texts already stored, with the body memory/text.py `fts_body`
writes since then (each CJK run as its overlapping bigrams and its last character), so a
Chinese bigram is one token with one `memory_keyword_df` row — bounded like a word — instead of
a phrase checked row by row. As SQLite's memory/store/cjk_keywords.py; nothing is embedded
again. Only rows whose body changes (those holding CJK text) are rewritten; then N, the total
length and every token's document frequency are recomputed from the rows.
"""

from __future__ import annotations

from typing import Any

from memory.store.cjk_keywords import NEW_TOKENIZER, OLD_TOKENIZER
from memory.store.postgres.keywords import keyword_tokens, stemmed
from memory.text import fts_body

_BATCH = 2_000


def p001_cjk_bigram_keywords(conn: Any) -> None:
    """Feature "cjk": keyword rows whose body `fts_body` now writes otherwise, rewritten with
    their tokens; the frequencies and stats recomputed if any was; the generations built with
    the old body marked as built with the new one."""
    changed, last = 0, -1
    while True:
        rows = conn.execute(
            "SELECT k.chunk_id, k.body, c.text FROM memory_keywords AS k JOIN memory_chunks AS c "
            "ON c.id = k.chunk_id WHERE k.chunk_id > %s ORDER BY k.chunk_id LIMIT %s",
            (last, _BATCH),
        ).fetchall()
        if not rows:
            break
        last = int(rows[-1][0])
        updates = []
        for chunk_id, body, text in rows:
            new = fts_body(text)
            if new != body:
                updates.append((new, stemmed(keyword_tokens(new)), chunk_id))
        if updates:
            conn.cursor().executemany(
                "UPDATE memory_keywords SET body = %s, tokens = %s WHERE chunk_id = %s", updates
            )
            changed += len(updates)
    if changed:
        conn.execute(
            "UPDATE memory_keyword_stats SET rows = (SELECT count(*) FROM memory_keywords), "
            "tokens = (SELECT coalesce(sum(cardinality(tokens)), 0) FROM memory_keywords) "
            "WHERE id = 1"
        )
        conn.execute("DELETE FROM memory_keyword_df")
        conn.execute(
            "INSERT INTO memory_keyword_df (token, rows) SELECT t, count(*) FROM memory_keywords, "
            "LATERAL (SELECT DISTINCT unnest(tokens) AS t) AS u GROUP BY t"
        )
    conn.execute(
        "UPDATE memory_generations SET identity = (identity::jsonb || "
        "jsonb_build_object('tokenizer', %s::text))::text "
        "WHERE identity::jsonb ->> 'tokenizer' = %s",
        (NEW_TOKENIZER, OLD_TOKENIZER),
    )
