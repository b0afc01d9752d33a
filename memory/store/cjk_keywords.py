"""Feature "cjk" (issues 20/22/19, CJK bigrams as index tokens): the keyword index rebuilt from
the chunk texts already stored, for the body memory/text.py `fts_body` writes since then (each
CJK run as its overlapping bigrams and its last character, instead of one token per
character). Nothing is embedded again and no file is read: the text is in `memory_chunks`.

Its own migration set ("cjk_keywords"), applied right after the memory set whenever the agent
database is opened (memory/store/db.py `open_database`), so the contentless FTS5
index (memory/store/index_rows.py deletes a row by handing FTS5 its body again) never holds a
body the code would not write. The generations' identity names the new body
(`pinch-fts-v3`, memory/index/index.py `TOKENIZER_VERSION`), so a database rebuilt here is not
rebuilt again from the files by the next sync.
"""

from __future__ import annotations

import re
from typing import Any

from memory.store.chunk_text import read_text
from memory.store.schema import MigrationSet
from memory.text import fts_body

OLD_TOKENIZER, NEW_TOKENIZER = "pinch-fts-v2", "pinch-fts-v3"
_BATCH = 2_000


def c001_cjk_bigram_keywords(conn: Any) -> None:
    """Feature "cjk": every keyword row written again from its chunk's text with today's
    `fts_body` (a contentless table cannot be re-tokenised in place: 'delete-all', then the
    rows; texts the memory set's m012 compressed are read back plain), and the generations
    built with the old body marked as built with the new one."""
    made = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memory_fts'").fetchone()
    if made is not None and re.search(r"content\s*=\s*''", made[0]):
        conn.execute("INSERT INTO memory_fts(memory_fts) VALUES ('delete-all')")
    else:  # the table before m009 kept its own copy of the text (older code's test databases)
        conn.execute("DELETE FROM memory_fts")
    last = 0
    while True:
        rows = conn.execute(
            "SELECT id, text FROM memory_chunks WHERE id > ? ORDER BY id LIMIT ?", (last, _BATCH)
        ).fetchall()
        if not rows:
            break
        last = int(rows[-1][0])
        conn.executemany(
            "INSERT INTO memory_fts(rowid, body) VALUES (?, ?)",
            [(int(cid), fts_body(read_text(conn, text))) for cid, text in rows],
        )
    conn.execute(
        "UPDATE memory_generations SET identity = json_set(identity, '$.tokenizer', ?) "
        "WHERE json_extract(identity, '$.tokenizer') = ?",
        (NEW_TOKENIZER, OLD_TOKENIZER),
    )


CJK_KEYWORDS = MigrationSet("cjk_keywords", [c001_cjk_bigram_keywords])
