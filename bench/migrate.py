"""`pinch migrate`'s copy on a synthetic agent: SQLite → PostgreSQL → SQLite, rows per second
each way, and whether the round trip kept every table's count and hash.

    python -m bench.migrate --quick              # 10,000 chunks, 384 dimensions (under a minute)
    python -m bench.migrate --chunks 100000      # by hand, on a quiet machine
    python -m bench.migrate --dsn postgresql://…  # an existing server instead of pgserver

The agent: `--chunks` chunks of synthetic notes (bench/synthetic.py) with one passage each,
their vectors (random, unit length) in the passage, the centroid and the generation's matrix
table and change log, plus 200 sessions of 10 transcript events. Written through the stores'
own repositories, as the indexer writes them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.synthetic import TextSource
from memory.store.db import open_database
from memory.store.index_generations import SqliteGenerations
from memory.store.index_rows import ChunkRow, PassageRow, SqliteIndexRows
from memory.store.postgres.transfer import open_postgres_source, open_postgres_target
from memory.store.sessions import SessionKey, SqliteSessionStore
from memory.store.transfer import TransferReport, transfer
from memory.store.transfer_sqlite import open_sqlite_source, open_sqlite_target
from memory.store.vector_tables import SqliteVectorTables, to_blob
from memory.text import fts_body

DIMS = 384  # the bundled e5-small's width


def make_agent(path: Path, chunks: int) -> None:
    db = open_database(path, vector_backend="numpy")
    texts = TextSource(1, rich=True)
    pool = [texts.sentence() for _ in range(2000)]  # drawn once: making text is not measured
    rng = np.random.default_rng(2)
    gens, rows, vectors = SqliteGenerations(db), SqliteIndexRows(db), SqliteVectorTables()
    try:
        with db.transaction() as conn:
            gen = gens.create_building(conn, {"dimensions": DIMS}, 0.0)
            gens.activate(conn, gen, 0.0)
            matrix = []
            for i in range(chunks):
                picks = rng.integers(0, len(pool), 12)
                text = " ".join(pool[int(p)] for p in picks)  # ≈ a 400-token chunk
                vec = rng.standard_normal(DIMS).astype(np.float32)
                vec /= np.linalg.norm(vec)
                row = ChunkRow(
                    gen, f"memory/{i // 10}.md", "memory", "owner", "", 1, 9, f"h{i}", text,
                    None, None, fts_body(text),
                )  # fmt: skip
                cid = rows.insert_chunk(conn, row)
                rows.insert_passages(conn, cid, gen, [PassageRow(1, 9, f"p{i}", to_blob(vec))])
                rows.set_centroid(conn, cid, to_blob(vec))
                matrix.append((cid, gen, "", vec))
            vectors.add(conn, matrix)
        sessions = SqliteSessionStore(db)
        for s in range(200):
            session = sessions.current(SessionKey.owner_main(f"a{s}"))
            for e in range(10):
                sessions.append(session.id, "user", {"text": pool[(s * 10 + e) % 2000], "n": e})
    finally:
        db.close()


def run(label: str, source: Any, target: Any) -> TransferReport:
    report = transfer(source, target)
    print(
        f"| {label} | {report.rows:,} | {report.seconds:.1f} | "
        f"{report.rows / report.seconds:,.0f} | {'yes' if report.ok else 'NO'} |"
    )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 chunks")
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--dsn", help="an existing PostgreSQL with pgvector (default: pgserver)")
    args = parser.parse_args()
    chunks = 10_000 if args.quick else args.chunks
    folder = Path(tempfile.mkdtemp(prefix="pinch-migrate-bench-"))
    server = None
    dsn = args.dsn
    if dsn is None:
        os.environ.setdefault("XDG_RUNTIME_DIR", str(folder))
        import pgserver

        server = pgserver.get_server(folder / "pg", cleanup_mode="stop")
        dsn = server.get_uri()
    schema = f"pinch_bench_{os.getpid()}"
    try:
        start = time.perf_counter()
        make_agent(folder / "agent.sqlite", chunks)
        print(f"{chunks:,} chunks × {DIMS} dimensions made in {time.perf_counter() - start:.1f} s")
        print("| direction | rows | seconds | rows/s | every count and hash matches |")
        print("|---|---|---|---|---|")
        with (
            open_sqlite_source(folder / "agent.sqlite") as source,
            open_postgres_target(dsn, schema) as target,
        ):
            there = run("SQLite → PostgreSQL", source, target)
        with (
            open_postgres_source(dsn, schema) as source,
            open_sqlite_target(folder / "back.sqlite") as back,
        ):
            run("PostgreSQL → SQLite", source, back)
        with (
            open_sqlite_source(folder / "agent.sqlite") as a,
            open_sqlite_source(folder / "back.sqlite") as b,
        ):
            same = all(_hash(a, t.table) == _hash(b, t.table) for t in there.tables)
        print(
            f"round trip SQLite → PostgreSQL → SQLite: identical hashes: {'yes' if same else 'NO'}"
        )
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def _hash(source: Any, table: str) -> str:
    from memory.store.transfer import RowsHash

    seen = RowsHash()
    for rows in source.rows(table, source.inventory().tables[table], 2000):
        seen.add(rows)
    return seen.hexdigest()


if __name__ == "__main__":
    main()
