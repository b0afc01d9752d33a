"""What a search's passage read costs: `SqliteSearchQueries.passage_vectors` for random chunks
(a search reads its ~100 best chunks' passages), timed call by call (issue 22).

    python bench/passage_read.py DB [--chunks 100] [--calls 40] [--seed 1]

Opens DB with this tree's code (its pending migrations run), reads one set of chunks once to
warm the page cache, then `--calls` sets drawn with `--seed` (the same ids for any tree given
the same database rows), and prints JSON: median and p95 wall ms, median thread CPU ms, and the
passages read. Run one process per tree, alternating, to compare two trees side by side.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory.store.db import open_database
from memory.store.search_queries import SqliteSearchQueries


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("db", type=Path)
    p.add_argument("--chunks", type=int, default=100)
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    db = open_database(args.db, vector_backend="numpy")
    try:
        queries = SqliteSearchQueries(db)
        ids = sorted(int(r[0]) for r in db.execute("SELECT id FROM memory_chunks"))
        rng = random.Random(args.seed)
        queries.passage_vectors(rng.sample(ids, args.chunks))  # warm
        wall, cpu, rows = [], [], 0
        for _ in range(args.calls):
            picked = rng.sample(ids, args.chunks)
            t0, c0 = time.perf_counter(), time.thread_time()
            found = queries.passage_vectors(picked)
            cpu.append((time.thread_time() - c0) * 1e3)
            wall.append((time.perf_counter() - t0) * 1e3)
            rows += 0 if found is None else len(found.spans)
    finally:
        db.close()
    wall.sort()
    print(
        json.dumps(
            {
                "median_ms": round(statistics.median(wall), 2),
                "p95_ms": round(wall[int(0.95 * (len(wall) - 1))], 2),
                "cpu_median_ms": round(statistics.median(cpu), 2),
                "passages_per_call": rows / args.calls,
            }
        )
    )


if __name__ == "__main__":
    main()
