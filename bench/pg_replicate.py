"""The keyword side of a 1M-chunk PostgreSQL index, made inside PostgreSQL from a bulk-loaded
100k schema (bench/bulk_scale.py) in minutes instead of hours (issue 19): the 100k schema's
chunk and keyword rows ×`times`, copy k with every digit rotated by k (in the chunk text, the
keyword body and the stemmed tokens alike — digits are never stemmed, so the tokens are those
the indexer would make of the rotated text) and its paths suffixed `-r<k>`; chunk hashes
recomputed from the new text; `memory_keyword_stats` and `memory_keyword_df` as the indexer
keeps them; the GIN index built once after. Names repeat across copies (a name's postings
×10: a common name is as common a share as at 100k).

Not made: passages, vectors, the HNSW index and the embedding cache (pgvector's HNSW build runs
≈ 250 vectors/s on this shared machine: over an hour at 1M) — this schema measures the keyword
statements (bench/pg_keyword_side.py, EXPLAIN ANALYZE), not a whole search.

    python bench/pg_replicate.py --source pinch_speed_100000 --target pinch_kw_1000000 --times 10
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg import sql

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import speed_pg  # noqa: E402
from memory.store.postgres.migrations import apply_all  # noqa: E402

DIGITS = "0123456789"


def rotated(k: int) -> str:
    return DIGITS[k % 10 :] + DIGITS[: k % 10]


def replicate(dsn: str, source: str, target: str, times: int) -> dict[str, float]:
    timings: dict[str, float] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(target)))
        apply_all(conn, target)
        src, dst = sql.Identifier(source), sql.Identifier(target)
        with conn.transaction():
            conn.execute("SET LOCAL maintenance_work_mem = '2GB'")
            conn.execute("SET LOCAL max_parallel_maintenance_workers = 2")
            conn.execute(sql.SQL("SET LOCAL search_path TO {}, public").format(dst))
            for table in ("memory_generations", "meta"):
                conn.execute(sql.SQL("DELETE FROM {}.{}").format(dst, sql.Identifier(table)))
                conn.execute(
                    sql.SQL("INSERT INTO {}.{} OVERRIDING SYSTEM VALUE SELECT * FROM {}.{}").format(
                        dst, sql.Identifier(table), src, sql.Identifier(table)
                    )
                )
            indexes = [
                r[0]
                for r in conn.execute(
                    "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND tablename IN "
                    "('memory_chunks', 'memory_keywords') AND indexname NOT LIKE '%%pkey'",
                    (target,),
                ).fetchall()
            ]
            for name in (
                "memory_chunks_by_path",
                "memory_chunks_by_hash",
                "memory_keywords_by_token",
            ):
                conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))
            stride = int(
                conn.execute(
                    sql.SQL("SELECT max(id) FROM {}.memory_chunks").format(src)
                ).fetchone()[0]
            )
            for k in range(times):
                t = time.perf_counter()
                digits = rotated(k)
                suffix = "" if k == 0 else f"-r{k}"
                conn.execute(
                    sql.SQL(
                        "INSERT INTO memory_chunks (id, generation, path, source, origin, scope, "
                        "start_line, end_line, hash, text, importance, day, project, centroid) "
                        "OVERRIDING SYSTEM VALUE SELECT id + %s, "
                        "generation, regexp_replace(path, '[.]md$', %s), source, origin, scope, "
                        "start_line, end_line, encode(sha256(convert_to(translate(text, %s, %s), "
                        "'UTF8')), 'hex'), translate(text, %s, %s), importance, day, project, "
                        "centroid FROM {}.memory_chunks ORDER BY id"
                    ).format(src),
                    (k * stride, suffix + ".md", DIGITS, digits, DIGITS, digits),
                )
                conn.execute(
                    sql.SQL(
                        "INSERT INTO memory_keywords (chunk_id, body, tokens) "
                        "SELECT chunk_id + %s, "
                        "translate(body, %s, %s), "
                        "string_to_array(translate(array_to_string(tokens, ' '), %s, %s), ' ') "
                        "FROM {}.memory_keywords ORDER BY chunk_id"
                    ).format(src),
                    (k * stride, DIGITS, digits, DIGITS, digits),
                )
                conn.execute(
                    sql.SQL(
                        "INSERT INTO memory_keyword_df AS d (token, rows) SELECT translate(token, "
                        "%s, %s), rows FROM {}.memory_keyword_df ON CONFLICT (token) DO UPDATE "
                        "SET rows = d.rows + excluded.rows"
                    ).format(src),
                    (DIGITS, digits),
                )
                timings[f"copy_{k}_s"] = time.perf_counter() - t
            conn.execute(
                sql.SQL(
                    "UPDATE memory_keyword_stats SET rows = s.rows * %s, tokens = s.tokens * %s "
                    "FROM {}.memory_keyword_stats AS s WHERE memory_keyword_stats.id = 1"
                ).format(src),
                (times, times),
            )
            conn.execute(
                "SELECT setval(pg_get_serial_sequence('memory_chunks', 'id'), "
                "(SELECT max(id) FROM memory_chunks))"
            )
            t = time.perf_counter()
            for definition in indexes:
                conn.execute(definition)
            timings["indexes_s"] = time.perf_counter() - t
        t = time.perf_counter()
        conn.execute(sql.SQL("VACUUM ANALYZE {}.memory_keywords").format(dst))
        conn.execute(sql.SQL("VACUUM ANALYZE {}.memory_chunks").format(dst))
        conn.execute(sql.SQL("ANALYZE {}.memory_keyword_df").format(dst))
        timings["analyze_s"] = time.perf_counter() - t
        size = conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (target,),
        ).fetchone()[0]
        timings["schema_mb"] = int(size) / 2**20
        timings["chunks"] = int(
            conn.execute(sql.SQL("SELECT count(*) FROM {}.memory_chunks").format(dst)).fetchone()[0]
        )
    return timings


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", default=speed_pg.schema_for(100_000))
    p.add_argument("--target", default="pinch_kw_1000000")
    p.add_argument("--times", type=int, default=10)
    p.add_argument("--dsn")
    args = p.parse_args(argv)
    server, dsn = (
        (None, args.dsn)
        if args.dsn
        else speed_pg.start_server(REPO / "bench" / "out" / "speed" / "postgres")
    )
    print(json.dumps(replicate(dsn, args.source, args.target, args.times), indent=1))
    del server
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
