"""The keyword side of questions whose words are all common, with and without the AND's window
(memory/search/candidates.py `COMMON_AND_WINDOW`, issue 19): on a scale's SQLite index or its
PostgreSQL schema, new questions, the two ways alternating question by question, each question's
word counts and windows forgotten (as a new question's are). Prints the keyword side's time
(`common_term_match` + `keyword_candidates`) p50 / p95 / max, how many questions the window cut,
and how much of the keyword side's top 20 stayed the same.

    python bench/and_window.py --sqlite /work/lat/scale-100000/index-numpy.sqlite
    python bench/and_window.py --dsn DSN --chunks 1000000 [--windows 20000,10000] [--queries 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.synthetic import TextSource  # noqa: E402
from memory.search import candidates  # noqa: E402
from memory.search.hybrid import QUERY_TERMS  # noqa: E402
from memory.text import query_terms  # noqa: E402

SHARE, POOL, RANK_CAP = 0.05, 100, 3000  # the `pinch` preset's


def _queries(args: argparse.Namespace) -> Any:
    if args.sqlite:
        from memory.store.db import open_database
        from memory.store.search_queries import search_queries

        return search_queries(open_database(Path(args.sqlite), vector_backend="numpy"))
    from bench.speed_pg import schema_for
    from memory.store.postgres.database import open_postgres
    from memory.store.postgres.search import PgSearchQueries

    return PgSearchQueries(open_postgres(args.dsn, schema=schema_for(args.chunks), max_size=2))


def _run(queries: Any, generation: int, text: str, window: int | None) -> tuple[float, Any, list]:
    terms = (query_terms(text) or query_terms(text, drop_stopwords=False))[:QUERY_TERMS]
    candidates._term_counts.clear()
    candidates._newest_ids.clear()
    real = candidates._window_start
    if window is None:  # as before the window: the AND looked for everywhere
        candidates._window_start = lambda *_: None  # type: ignore[assignment]
    try:
        started = time.perf_counter()
        match = candidates.common_term_match(queries, generation, terms, SHARE, window=window or 1)
        found = (
            candidates.keyword_candidates(queries, generation, match, POOL, [""], RANK_CAP)
            if match
            else []
        )
        return time.perf_counter() - started, match, [i for i, _ in found]
    finally:
        candidates._window_start = real  # type: ignore[assignment]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sqlite", help="a scale's SQLite index file")
    p.add_argument("--dsn", help="PostgreSQL holding bench/bulk_scale.py's schema")
    p.add_argument("--chunks", type=int, default=1_000_000, help="the PostgreSQL scale")
    p.add_argument("--windows", default=str(candidates.COMMON_AND_WINDOW))
    p.add_argument("--queries", type=int, default=50)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    if not (args.sqlite or args.dsn):
        p.error("give --sqlite FILE or --dsn DSN")
    queries = _queries(args)
    active = queries.db.execute("SELECT id FROM memory_generations WHERE state = 'active'")
    generation = int(active[0][0])
    source = TextSource(99, rich=True)
    questions = [source.question() for _ in range(args.queries)]

    def q95(values: list[float]) -> float:
        return float(sorted(values)[min(len(values) - 1, round(0.95 * (len(values) - 1)))])

    print(f"{len(questions)} questions, {args.rounds} rounds, ms")
    print("| window | p50 | p95 | max | questions cut | top-20 kept: median / lowest |")
    print("|---|---|---|---|---|---|")
    for window in [int(w) for w in args.windows.split(",")]:
        took: dict[str, list[float]] = {"before": [], "window": []}
        cut, kept = 0, []
        for r in range(args.rounds):
            for i, text in enumerate(questions):
                sides = [("before", None), ("window", window)]
                out = {}
                for name, w in sides if (i + r) % 2 == 0 else sides[::-1]:
                    out[name] = _run(queries, generation, text, w)
                    took[name].append(1000 * out[name][0])
                match = out["window"][1]
                if r == 0 and match is not None and match.since is not None:
                    cut += 1
                    old, new = out["before"][2][:20], out["window"][2][:20]
                    kept.append(len(set(old) & set(new)) / max(1, len(old)))
        for name in ("before", "window"):
            v = took[name]
            label = "none" if name == "before" else f"{window:,}"
            tail = (
                f"{cut} / {len(questions)} | "
                + (f"{statistics.median(kept):.0%} / {min(kept):.0%}" if kept else "—")
                if name == "window"
                else "— | —"
            )
            print(
                f"| {label} | {statistics.median(v):.1f} | {q95(v):.1f} | {max(v):.1f} | {tail} |"
            )


if __name__ == "__main__":
    main()
