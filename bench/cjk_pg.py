"""CJK bigrams as index tokens on PostgreSQL (issues 19/22): the keyword statements of the
Chinese questions of bench/speed.py's latency set on the old keyword rows (one token per CJK
character: a bigram a two-token phrase, its document count checked row by row) beside the new
ones (a bigram one token: its count one `memory_keyword_df` row, its match one GIN `@>`).

    python bench/cjk_pg.py SRC.sqlite --chunks 10000 [--rounds 3] [--dsn DSN]
    python bench/cjk_pg.py --quick            # 2k synthetic chunks, < 1 min

The first `--chunks` chunk texts of SRC (an agent database) are written as keyword rows into two
schemas of one server (pgserver in bench/out/cjk-pg unless `--dsn`), old and new bodies, with
their stats and frequencies as the indexer keeps them (no vectors: the keyword statements read
none). For each Chinese question, alternating old and new: the term counts search makes (the
`pinch` preset's common-word test, `match_count` of each term) and the ranked read
(`keyword_newest(expression, 3000)`), wall ms (the work is the server's); same ids checked.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bench import speed_pg
from bench.cjk_keywords import old_body, old_expression
from bench.synthetic import TextSource
from memory.search import candidates
from memory.search.presets import PINCH
from memory.store.postgres.database import PgDatabase, open_postgres
from memory.store.postgres.keywords import keyword_tokens, stemmed
from memory.store.postgres.search import PgSearchQueries
from memory.text import CJK_CHAR, fts_body, fts_match_expression, query_terms

REPO = Path(__file__).resolve().parents[1]


def load(db: PgDatabase, texts: list[str], body_of: Any) -> None:
    """Keyword rows, stats and frequencies of `texts` (ids 1..n) in `db`'s schema."""
    stems: dict[str, str] = {}
    with db.transaction() as conn:
        conn.execute("TRUNCATE memory_keywords")
        with conn.cursor().copy("COPY memory_keywords (chunk_id, body, tokens) FROM STDIN") as cp:
            for i, text in enumerate(texts, start=1):
                body = body_of(text)
                tokens = keyword_tokens(body)
                for t in set(tokens) - stems.keys():
                    stems[t] = stemmed([t])[0]
                cp.write_row((i, body, [stems[t] for t in tokens]))
        conn.execute(
            "UPDATE memory_keyword_stats SET rows = (SELECT count(*) FROM memory_keywords), "
            "tokens = (SELECT sum(cardinality(tokens)) FROM memory_keywords) WHERE id = 1"
        )
        conn.execute("DELETE FROM memory_keyword_df")
        conn.execute(
            "INSERT INTO memory_keyword_df (token, rows) SELECT t, count(*) FROM memory_keywords, "
            "LATERAL (SELECT DISTINCT unnest(tokens) AS t) AS u GROUP BY t"
        )
    db.execute("ANALYZE memory_keywords")


def run(dsn: str, texts: list[str], rounds: int) -> dict[str, Any]:
    dbs, queries = {}, {}
    for layout, body_of in (("old", old_body), ("new", fts_body)):
        db = open_postgres(dsn, schema=f"cjk_{layout}_{len(texts)}", min_size=1, max_size=2)
        start = time.perf_counter()
        load(db, texts, body_of)
        print(f"{layout}: loaded {len(texts)} in {time.perf_counter() - start:.1f} s", flush=True)
        q = PgSearchQueries(db)
        q.chunk_count = lambda generation: len(texts)  # type: ignore[method-assign]
        dbs[layout], queries[layout] = db, q
    source = TextSource(99, rich=True)
    chinese = [q for q in (source.question() for _ in range(31)) if CJK_CHAR.search(q)]
    expressions = {"old": old_expression, "new": fts_match_expression}
    timings: dict[str, dict[str, list[float]]] = {k: {"counts": [], "ranked": []} for k in dbs}
    same, matches = 0, {}
    for _ in range(rounds):
        for question in chinese:
            found = {}
            for layout in ("old", "new"):
                terms = query_terms(question)[:32]
                candidates._term_counts.clear()
                real = candidates.fts_match_expression
                candidates.fts_match_expression = expressions[layout]
                try:
                    start = time.perf_counter()
                    match = candidates.common_term_match(
                        queries[layout], 1, terms, PINCH.keyword_common_share or 0.05
                    )
                    counted = time.perf_counter()
                finally:
                    candidates.fts_match_expression = real
                rows = queries[layout].keyword_newest(match, 3000) if match else []
                ranked = time.perf_counter()
                timings[layout]["counts"].append(1000 * (counted - start))
                timings[layout]["ranked"].append(1000 * (ranked - counted))
                found[layout] = sorted(i for i, _ in rows)
                matches[f"{layout}: {question}"] = match
            same += found["old"] == found["new"]
    for db in dbs.values():
        db.close()
    out: dict[str, Any] = {
        "chunks": len(texts),
        "rounds": rounds,
        "same_ids": f"{same}/{rounds * len(chinese)}",
    }
    for layout, steps in timings.items():
        for step, values in steps.items():
            ordered = sorted(values)
            out[f"{layout}_{step}_ms_p50_p95_max"] = [
                round(statistics.median(ordered), 1),
                round(ordered[int(0.95 * (len(ordered) - 1))], 1),
                round(ordered[-1], 1),
            ]
    out["expressions"] = matches
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", nargs="?", type=Path)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dsn")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    server = None
    dsn = args.dsn
    if dsn is None:
        server, dsn = speed_pg.start_server(REPO / "bench" / "out" / "cjk-pg")
    if args.quick:
        source = TextSource(2000, rich=True)
        texts = [" ".join(source.sentence(0.3) for _ in range(6)) for _ in range(2000)]
        rounds = 2
    else:
        if args.source is None:
            parser.error("SRC.sqlite or --quick")
        conn = sqlite3.connect(f"file:{args.source}?mode=ro", uri=True)
        texts = [t for (t,) in conn.execute("SELECT text FROM memory_chunks ORDER BY id LIMIT ?",
                                            (args.chunks,))]  # fmt: skip
        conn.close()
        rounds = args.rounds
    result = run(dsn, texts, rounds)
    print(json.dumps(result, indent=1, ensure_ascii=False))
    del server


if __name__ == "__main__":
    main()
