"""PostgreSQL's passage and cached vectors as 8-bit codes against float32, side by side: two
checkouts bulk-load the same workspace into two databases of one server (`bench/bulk_scale.py
load --cache`, each with its own code), then the tables' sizes, `passage_vectors` for 100 random
chunks (the passages search re-scores), and `pinch memory compact`'s conversion of the float32
database (its time, and the sizes after).

    python bench/pg_vector_codes.py --base /work/base --chunks 10000 [--dsn DSN] [--out DIR]
    python bench/pg_vector_codes.py passages --tree DIR --dsn DSN --chunks N   # one side's reads

`--base` is a checkout from before the change (run with this checkout's .venv); this checkout
is the other side. The workspace is bench/speed.py's scale text, made once under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SIZES = (
    "SELECT pg_total_relation_size('memory_units'), pg_total_relation_size('embedding_cache'), "
    "(SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
    "ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm'))"
)


def passages(tree: Path, dsn: str, chunks: int, rounds: int) -> dict[str, Any]:
    """`passage_vectors` of 100 random chunks, `rounds` times, with `tree`'s code (ms)."""
    sys.path.insert(0, str(tree))
    import numpy as np

    from memory.store.postgres.database import open_postgres
    from memory.store.postgres.search import PgSearchQueries

    db = open_postgres(dsn, schema=f"pinch_speed_{chunks}", min_size=1, max_size=2)
    try:
        queries = PgSearchQueries(db)
        ids = np.array([r[0] for r in db.execute("SELECT id FROM memory_chunks")])
        rng = np.random.default_rng(7)
        queries.passage_vectors([int(i) for i in ids[:100]])  # the connection, the plan
        times, rows = [], 0
        for _ in range(rounds):
            picked = [int(i) for i in rng.choice(ids, 100, replace=False)]
            started = time.perf_counter()
            found = queries.passage_vectors(picked)
            times.append((time.perf_counter() - started) * 1000)
            rows += 0 if found is None else len(found.spans)
        times.sort()
        return {
            "p50_ms": statistics.median(times),
            "p95_ms": times[int(0.95 * (len(times) - 1))],
            "passages_per_call": rows / rounds,
            "code": str(tree),
        }
    finally:
        db.close()


def _python() -> str:
    return str(REPO / ".venv" / "bin" / "python")


def _sizes(dsn: str, chunks: int) -> dict[str, float]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path TO pinch_speed_{chunks}, public")
        units, cache, schema = conn.execute(SIZES).fetchone()  # type: ignore[misc]
        count = conn.execute("SELECT count(*), avg(length(vector)) FROM memory_units").fetchone()
    return {
        "memory_units_mb": units / 1e6,
        "embedding_cache_mb": cache / 1e6,
        "schema_mb": float(schema) / 1e6,
        "passages": count[0],  # type: ignore[index]
        "bytes_per_vector": float(count[1]),  # type: ignore[index]
    }


def _run(*argv: str, cwd: Path) -> str:
    done = subprocess.run(
        ["nice", "-n", "10", _python(), *argv], cwd=cwd, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def side_by_side(base: Path, chunks: int, dsn: str | None, out: Path, rounds: int) -> None:
    sys.path.insert(0, str(REPO))
    from bench import speed_pg
    from bench.speed import scale_files
    from bench.workspace import write_workspace
    from memory.memory_config import MemoryConfig

    server = None
    if dsn is None:
        server, dsn = speed_pg.start_server(out / "postgres")
    workspace = out / f"scale-{chunks}" / "workspace"
    if not workspace.is_dir():
        chunking = MemoryConfig().chunking
        files, _, _ = scale_files(chunks, chunking.tokens, chunking.overlap)
        write_workspace(workspace, files)
    sides = {"float32 (main before)": base, "8-bit codes (this tree)": REPO}
    names = dict(zip(sides, ("codes_base", "codes_new"), strict=True))
    dsns = {label: speed_pg.fresh_database(dsn, name) for label, name in names.items()}
    result: dict[str, Any] = {"chunks": chunks, "loads": {}, "sizes": {}, "passages": {}}
    for label, tree in sides.items():
        started = time.perf_counter()
        _run(
            "bench/bulk_scale.py", "load", "--chunks", str(chunks), "--workspace",
            str(workspace), "--dsn", dsns[label], "--cache", cwd=tree,
        )  # fmt: skip
        result["loads"][label] = time.perf_counter() - started
        _vacuum(dsns[label])
        result["sizes"][label] = _sizes(dsns[label], chunks)
    for _ in range(2):  # the sides alternate
        for label, tree in sides.items():
            found = _reads(tree, dsns[label], chunks, rounds)
            result["passages"].setdefault(label, []).append(found)
    # This tree's `pinch memory compact` on the float32 database.
    from memory.store.postgres.database import open_postgres
    from memory.store.postgres.vector_forms import compact_vectors, vector_slack

    old = dsns["float32 (main before)"]
    db = open_postgres(old, schema=f"pinch_speed_{chunks}", min_size=1, max_size=2)
    try:
        slack = vector_slack(db)
        started = time.perf_counter()
        done = compact_vectors(db)
        result["compaction"] = {
            "estimated_rows": slack.rows,
            "estimated_saving_mb": slack.saving / 1e6,
            "units": done.units,
            "cache": done.cache,
            "saving_mb": done.saving / 1e6,
            "seconds": time.perf_counter() - started,
        }
    finally:
        db.close()
    result["sizes"]["float32, after this tree's compaction"] = _sizes(old, chunks)
    result["passages"]["float32, after this tree's compaction"] = [
        _reads(REPO, old, chunks, rounds)
    ]
    result["dsns"] = {k: v.split("password")[0] for k, v in dsns.items()}
    print(json.dumps(result, indent=2))
    del server  # (stopped with this process)


def _reads(tree: Path, dsn: str, chunks: int, rounds: int) -> Any:
    """`passages` with `tree`'s code, in a process of its own."""
    script = str(REPO / "bench" / "pg_vector_codes.py")
    argv = ["passages", "--tree", str(tree), "--dsn", dsn, "--chunks", str(chunks)]
    return json.loads(_run(script, *argv, "--rounds", str(rounds), cwd=tree))


def _vacuum(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", default="compare", choices=["compare", "passages"])
    p.add_argument("--base", type=Path, help="a checkout from before the change")
    p.add_argument("--tree", type=Path, help="passages: the checkout whose code reads")
    p.add_argument("--chunks", type=int, default=10_000)
    p.add_argument("--dsn")
    p.add_argument("--rounds", type=int, default=200, help="calls of 100 random chunks")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "pg_codes")
    args = p.parse_args()
    if args.mode == "passages":
        print(json.dumps(passages(args.tree, args.dsn, args.chunks, args.rounds)))
        return
    os.environ.setdefault("PINCH_HOME", str(args.out / "home"))
    side_by_side(args.base, args.chunks, args.dsn, args.out, args.rounds)


if __name__ == "__main__":
    main()
