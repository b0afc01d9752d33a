"""Compare two trees' search speed on the same database, alternating, on a busy machine.

    python bench/speed_compare.py latency --old /tmp/old-tree --out bench/out/speed --rounds 4
    python bench/speed_compare.py latency --worker cold --old /tmp/old-tree \
        --old-out /tmp/old-out --out bench/out/speed --chunks 10000
    python bench/speed_compare.py write --old /tmp/old-tree \
        --db bench/out/speed/scale-100000/index-sqlite-vec.sqlite

`--old` is a checkout of the code to compare with (e.g. `git archive <commit> | tar -x -C DIR`),
given this tree's `bench/speed.py` so both report the same fields. `latency` runs
`bench/speed.py --worker latency` from each tree on the scale index `bench/speed.py` built under
`--out` (both backends; the order swaps every round) and prints each run and the medians; with
`--cold`, each run starts with the database file evicted from the OS page cache.
`pack` writes the packed matrix into `--db` (or every scale index under `--out`), as a sync of
this tree would: run it once before comparing, on databases built by older code.
`write` times the vector store alone on `--db` (a sqlite-vec index: both backends can read it):
the first search, warm searches, and the first search after each of 5 one-chunk writes; the
chunks it adds are deleted again at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
FIELDS = [
    "p50_ms",
    "p95_ms",
    "steady_p50_ms",
    "steady_p95_ms",
    "first_query_ms",
    "second_query_ms",
    "max_ms",
    "peak_mb",
]


def evict(db_path: Path) -> None:
    """Drop the database file's pages from the OS page cache (as after a reboot, or once other
    files pushed them out), so the next run reads from disk. Only this file is touched."""
    for path in (db_path, Path(f"{db_path}-wal")):
        if path.exists():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def latency(
    old: Path,
    out: Path,
    rounds: int,
    chunks: int,
    queries: int,
    cold: bool = False,
    old_out: Path | None = None,
    worker: str = "latency",
    warm_s: float | None = None,
) -> None:
    """`old_out`: where the old tree's databases are, when they differ (a format change).
    `worker` "cold" runs bench/speed_cold.py's scenario (the eviction is its own)."""
    trees = {"old": old, "new": HERE}
    outs = {"old": old_out or out, "new": out}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(rounds):
        for backend in ("sqlite-vec", "numpy"):
            for name in ("old", "new") if r % 2 == 0 else ("new", "old"):
                spec = {
                    "chunks": chunks,
                    "backend": backend,
                    "out": str(outs[name]),
                    "fresh": False,
                    "queries": queries,
                    "preset": "pinch",
                    "budget_s": 300,
                    "warm_s": warm_s,
                }
                if cold:
                    evict(outs[name] / f"scale-{chunks}" / f"index-{backend}.sqlite")
                with tempfile.TemporaryDirectory() as tmp:
                    result = Path(tmp) / "result.json"
                    script = trees[name] / "bench" / "speed.py"
                    cmd = [sys.executable, str(script), "--worker", worker]
                    cmd += ["--spec", json.dumps(spec), "--result", str(result)]
                    if subprocess.run(cmd, check=False).returncode != 0:
                        print(f"round {r} {name} {backend}: failed", flush=True)
                        continue
                    data = json.loads(result.read_text(encoding="utf-8"))
                print(r, name, backend, {k: data.get(k) for k in FIELDS}, flush=True)
                runs.setdefault((name, backend), []).append(data)
    print("medians:")
    for (name, backend), ds in sorted(runs.items()):
        medians = {
            k: round(statistics.median(d[k] for d in ds if d.get(k) is not None), 1)
            for k in FIELDS
            if any(d.get(k) is not None for d in ds)
        }
        print(f"  {name} {backend}: {medians}")


def write_worker(db_path: Path, backend: str) -> dict[str, Any]:
    """Runs with the compared tree first on sys.path (see `main`)."""
    import numpy as np

    from memory.search.sqlite_vec import SqliteVecStore
    from memory.search.vectors import NumpyStore
    from memory.store.db import open_database

    db = open_database(db_path, vector_backend=backend)
    store: Any = SqliteVecStore(db, 384) if backend == "sqlite-vec" else NumpyStore(db)
    rng = np.random.default_rng(0)
    # The active generation (a database rebuilt once holds generation 2 or later).
    (gen,) = db.execute("SELECT id FROM memory_generations WHERE state = 'active'")[0]

    def unit() -> Any:
        v = rng.standard_normal(384).astype(np.float32)
        return v / np.linalg.norm(v)

    def timed(query: Any) -> tuple[float, list[tuple[int, float]]]:
        started = time.perf_counter()
        hits = store.search(query, 100, gen, [""])
        return 1000 * (time.perf_counter() - started), hits

    bump = (
        "UPDATE meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) "
        "WHERE key = 'index_version'"
    )
    first, _ = timed(unit())
    if hasattr(store, "wait_loaded"):
        store.wait_loaded(120)
    warm = [timed(unit())[0] for _ in range(5)]
    after, added = [], []
    for _ in range(5):
        vec = unit()
        with db.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO memory_chunks(generation, path, source, origin, scope, start_line, "
                "end_line, hash, text, centroid) VALUES (?, 'bench-write.md', 'memory', 'owner', "
                "'', 1, 1, 'h', 'text', ?)",
                (gen, vec.astype("<f4").tobytes()),
            )
            added.append(int(cur.lastrowid))
            store.add(conn, [(added[-1], gen, "", vec)])
            conn.execute(bump)
        ms, hits = timed(vec)
        assert hits[0][0] == added[-1], "the chunk just written was not found first"
        after.append(ms)
    with db.transaction() as conn:
        store.delete(conn, gen, added)
        conn.executemany("DELETE FROM memory_chunks WHERE id = ?", [(c,) for c in added])
        conn.execute(bump)
    store.close()
    db.close()
    return {
        "first_ms": round(first),
        "warm_median_ms": round(statistics.median(warm), 1),
        "after_write_median_ms": round(statistics.median(after), 1),
        "after_write_max_ms": round(max(after), 1),
    }


def write(old: Path, db_path: Path, rounds: int) -> None:
    for r in range(rounds):
        for backend in ("numpy", "sqlite-vec"):
            for name, tree in (
                (("old", old), ("new", HERE))
                if r % 2 == 0
                else (
                    ("new", HERE),
                    ("old", old),
                )
            ):
                cmd = [sys.executable, __file__, "write-worker", "--tree", str(tree)]
                cmd += ["--db", str(db_path), "--backend", backend]
                proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
                line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "failed"
                print(r, name, backend, line, flush=True)


def pack(db_path: Path) -> None:
    """Write the packed matrix of `db_path`'s active generation (what a sync of this tree does
    at its end), so both trees' workers search the same file: the old tree ignores the pack."""
    from memory.search.matrix_cache import refresh_pack
    from memory.store.db import open_database

    db = open_database(db_path)
    try:
        (generation,) = db.execute("SELECT id FROM memory_generations WHERE state = 'active'")[0]
        started = time.perf_counter()
        rows = refresh_pack(db, int(generation), force=True)
        print(f"{db_path}: {rows} rows packed in {time.perf_counter() - started:.1f} s")
    finally:
        db.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["latency", "write", "write-worker", "pack"])
    p.add_argument("--old", type=Path)
    p.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=HERE / "bench" / "out" / "speed")
    p.add_argument("--db", type=Path)
    p.add_argument("--backend", default="numpy", help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=30)
    p.add_argument(
        "--cold", action="store_true", help="latency: evict the database from the page cache first"
    )
    p.add_argument("--old-out", type=Path, help="the old tree's scale databases (default --out)")
    p.add_argument(
        "--worker",
        default="latency",
        choices=["latency", "cold"],
        help="latency: warm and steady figures; cold: first queries after an eviction "
        "(bench/speed_cold.py)",
    )
    p.add_argument("--warm-s", type=float, help="cold: warm() and wait this long first")
    args = p.parse_args()
    if args.what == "write-worker":
        sys.path.insert(0, str(args.tree))
        print(json.dumps(write_worker(args.db, args.backend)))
    elif args.what == "pack":
        for db_path in [args.db] if args.db else sorted(args.out.glob("scale-*/index-*.sqlite")):
            pack(db_path)
    elif args.old is None:
        p.error("--old is required")
    elif args.what == "latency":
        latency(
            args.old,
            args.out,
            args.rounds,
            args.chunks,
            args.queries,
            args.cold,
            args.old_out,
            args.worker,
            args.warm_s,
        )
    else:
        if args.db is None:
            p.error("--db is required")
        write(args.old, args.db, args.rounds)


if __name__ == "__main__":
    main()
