"""PostgreSQL's keyword side alone, side by side on one scale's schema (issue 19): for each
question, the keyword expression search makes of it (the `pinch` preset: common words left out,
OR), then, alternating the statements in each round,

- the ranked read of the newest `keyword_rank_cap` matches, by up to three statements — `unbounded`
  (main `63fcffc`: every matching row scored, document frequencies counted over the rows, then
  the newest cut), `arrays` (`bm25_statement`: the newest ids cut first over the GIN lookup,
  frequencies counted in the kept rows' token arrays, document frequencies from
  `memory_keyword_df`) and `postings` (`PgSearchQueries.keyword_newest`, which reads words
  joined by OR or AND from `memory_keyword_postings`: each word's newest entries from the
  index alone) —
  the same ids and ranks checked;
- the word counts search makes (`match_count` of each word, to the common-word limit): the
  `count(*)` over the GIN lookup against the frequency table.

    python bench/pg_keyword_side.py --chunks 100000 [--dsn DSN] [--queries 30] [--rounds 2]
        [--arms arrays,postings]       # add `unbounded` for the statement before both
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import speed_pg  # noqa: E402
from bench.synthetic import TextSource  # noqa: E402
from memory.search import presets  # noqa: E402
from memory.search.candidates import COMMON_TERM_FLOOR, common_term_match  # noqa: E402
from memory.store.postgres.database import open_postgres  # noqa: E402
from memory.store.postgres.keywords import (  # noqa: E402
    K1,
    B,
    _frequency,
    bm25_statement,
    count_statement,
    parse_match,
    postings_statement,
    reads_postings,
)
from memory.store.postgres.search import PgSearchQueries, _stemmed_phrases  # noqa: E402
from memory.text import fts_match_expression, query_terms  # noqa: E402


def old_statement(phrases: Sequence[Sequence[str]], operator: str) -> tuple[str, list[Any]]:
    """bm25_statement as main `63fcffc` had it (every matching row scored)."""
    params: list[Any] = []
    freqs = [f"{_frequency(p, params)} AS f{i}" for i, p in enumerate(phrases)]
    params.append(sorted({t for p in phrases for t in p}))
    n = range(len(phrases))
    hits = ", ".join(f"count(*) FILTER (WHERE f{i} > 0)::float8 AS h{i}" for i in n)
    idfs = ", ".join(
        f"CASE WHEN ln((s.n - h.h{i} + 0.5) / (h.h{i} + 0.5)) > 0 "
        f"THEN ln((s.n - h.h{i} + 0.5) / (h.h{i} + 0.5)) ELSE 1e-6 END AS i{i}"
        for i in n
    )
    score = " + ".join(
        f"i.i{i} * c.f{i} * {K1 + 1} / (c.f{i} + {K1} * ({1 - B} + {B} * c.dl / s.avgdl))"
        for i in n
    )
    matched = (" OR " if operator == "OR" else " AND ").join(f"c.f{i} > 0" for i in n)
    return (
        "WITH s AS (SELECT rows::float8 AS n, CASE WHEN rows > 0 THEN tokens::float8 / rows "
        "ELSE 1 END AS avgdl FROM memory_keyword_stats WHERE id = 1), "
        f"c AS (SELECT chunk_id, cardinality(tokens)::float8 AS dl, {', '.join(freqs)} "
        "FROM memory_keywords WHERE tokens && %s::text[]), "
        f"h AS (SELECT {hits} FROM c), i AS (SELECT {idfs} FROM s, h) "
        f"SELECT c.chunk_id, -({score}) AS rank FROM c, i, s WHERE {matched}",
        params,
    )


def _ms(f: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = f()
    return 1000 * (time.perf_counter() - t), out


def _unbounded(db: Any, match: str, cap: int) -> list[tuple[int, float]]:
    query = parse_match(match)
    statement, params = old_statement(_stemmed_phrases(query), query.operator)
    rows = db.execute(statement + " ORDER BY chunk_id DESC LIMIT %s", [*params, cap])
    return [(int(i), float(r)) for i, r in rows]


def _arrays(db: Any, match: str, cap: int) -> list[tuple[int, float]]:
    query = parse_match(match)
    statement, params = bm25_statement(_stemmed_phrases(query), query.operator, cap)
    rows = db.execute(statement + " ORDER BY chunk_id DESC", params)
    return [(int(i), float(r)) for i, r in rows]


def run(
    dsn: str, schema: str, queries: int, rounds: int, wanted: Sequence[str] = ("arrays", "postings")
) -> dict[str, Any]:
    db = open_postgres(dsn, schema=schema, min_size=1, max_size=2)
    try:
        pg = PgSearchQueries(db)
        preset = presets.PINCH
        cap = preset.keyword_rank_cap or 3000
        generation = int(
            db.execute("SELECT id FROM memory_generations WHERE state = 'active'")[0][0]
        )
        total = pg.chunk_count(generation)
        limit = int(max(preset.keyword_common_share * total, COMMON_TERM_FLOOR))
        source = TextSource(99, rich=True)
        asked = [source.question() for _ in range(queries)]
        matches, words = [], []
        for q in asked:
            terms = query_terms(q) or query_terms(q, drop_stopwords=False)
            words += [fts_match_expression([t]) for t in terms[:12]]
            m = common_term_match(pg, generation, terms[:12], preset.keyword_common_share)
            if m:
                matches.append(m)
        ranked = {
            "unbounded": lambda m: _unbounded(db, m, cap),
            "arrays": lambda m: _arrays(db, m, cap),
            "postings": lambda m: pg.keyword_newest(m, cap),
        }
        arms = [a for a in ranked if a in wanted]
        timings: dict[str, list[float]] = {
            k: [] for k in (*(f"{a}_rank" for a in arms), "old_count", "new_count")
        }
        same = True
        for round_no in range(rounds):
            for n, m in enumerate(matches):
                answers = []
                # The order of the arms turns with each question (caches warm for no one arm).
                turn = (n + round_no) % len(arms)
                for arm in arms[turn:] + arms[:turn]:
                    ms, got = _ms(lambda m=m, arm=arm: ranked[arm](m))
                    timings[f"{arm}_rank"].append(ms)
                    answers.append(got)
                first = answers[0]
                same = same and all(
                    [i for i, _ in other] == [i for i, _ in first]
                    and all(
                        abs(a[1] - b[1]) <= 1e-9 * abs(b[1])
                        for a, b in zip(other, first, strict=True)
                    )
                    for other in answers[1:]
                )
            for w in words:
                assert w is not None
                query = parse_match(w)
                st, params = count_statement(_stemmed_phrases(query), query.operator, limit + 1)
                ms, old_n = _ms(lambda st=st, p=params: db.execute(st, p)[0][0])
                timings["old_count"].append(ms)
                ms, new_n = _ms(lambda w=w: pg.match_count(w, limit + 1))
                timings["new_count"].append(ms)
                same = same and int(old_n) == new_n

        def summary(values: list[float]) -> dict[str, float]:
            ordered = sorted(values)
            return {
                "p50_ms": statistics.median(ordered),
                "p95_ms": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
                "n": len(ordered),
            }

        last = arms[-1]
        per_question = timings[f"{last}_rank"][: len(matches)]
        slowest = max(range(len(matches)), key=lambda i: per_question[i])
        query = parse_match(matches[slowest])
        phrases = _stemmed_phrases(query)
        if last == "postings" and reads_postings(phrases):
            statement, params = postings_statement([p[0] for p in phrases], query.operator, cap)
        else:
            statement, params = bm25_statement(phrases, query.operator, cap)
        plan = db.execute(
            "EXPLAIN (ANALYZE, BUFFERS) " + statement + " ORDER BY chunk_id DESC", params
        )
        return {
            "arms": arms,
            "slowest_expression": matches[slowest],
            "slowest_of": last,
            "slowest_plan": [str(r[0]) for r in plan],
            "schema": schema,
            "chunks": total,
            "cap": cap,
            "expressions": len(matches),
            "same_results": same,
            **{k: summary(v) for k, v in timings.items()},
        }
    finally:
        db.close()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chunks", type=int, required=True)
    p.add_argument("--schema", help="default: bench/speed_pg.py's schema of --chunks")
    p.add_argument("--dsn")
    p.add_argument("--queries", type=int, default=30)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="10 questions, one round")
    p.add_argument("--arms", default="arrays,postings", help="of: unbounded, arrays, postings")
    args = p.parse_args(argv)
    if args.quick:
        args.queries, args.rounds = 10, 1
    server, dsn = (
        (None, args.dsn)
        if args.dsn
        else speed_pg.start_server(REPO / "bench" / "out" / "speed" / "postgres")
    )
    schema = args.schema or speed_pg.schema_for(args.chunks)
    print(json.dumps(run(dsn, schema, args.queries, args.rounds, args.arms.split(",")), indent=1))
    del server
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
