"""PostgreSQL with each centroid stored once (issue 22) against the tree before, side by side:
both checkouts bulk-load the same workspace into two databases of one server (`bench/bulk_scale.py
load --cache`, each with its own code), then each table's size, whole searches
(`bench/speed.py --worker latency`, the sides alternating), the older database upgraded in place
by this tree (the migration's time, sizes before and after `VACUUM FULL` of the vector tables),
and a small real sync's forced rebuild from the embedding cache (the rows' writes, no model).

    python bench/pg_centroids_once.py --base /work/base --chunks 10000 [--dsn DSN] [--out DIR]
    python bench/pg_centroids_once.py sync --dsn DSN --workspace DIR   # one side's rebuilds

`--base` is a checkout from before the change (run with this checkout's .venv); this checkout
is the other side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TABLES = (
    "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n "
    "ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r' "
    "ORDER BY 2 DESC"
)


def _python() -> str:
    return str(REPO / ".venv" / "bin" / "python")


def _run(*argv: str, cwd: Path) -> str:
    done = subprocess.run(
        ["nice", "-n", "10", _python(), *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(cwd)},
    )
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def _sizes(dsn: str, schema: str) -> dict[str, float]:
    """Each table's size with its indexes and TOAST (MB, largest first), and the schema's."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}, public")
        found = {str(n): int(b) / 1e6 for n, b in conn.execute(TABLES)}
    return {"schema": sum(found.values()), **{n: mb for n, mb in found.items() if mb >= 0.1}}


def _sql(dsn: str, schema: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}, public")
        conn.execute(statement)


def _latency(tree: Path, dsn: str, chunks: int, out: Path, queries: int) -> dict[str, Any]:
    spec = {
        "chunks": chunks,
        "out": str(out),
        "backend": "numpy",
        "queries": queries,
        "budget_s": 600,
        "preset": "pinch",
        "dsn": dsn,
    }
    with tempfile.NamedTemporaryFile(suffix=".json") as result:
        _run(
            "bench/speed.py", "--worker", "latency", "--spec", json.dumps(spec),
            "--result", result.name, cwd=tree,
        )  # fmt: skip
        found: dict[str, Any] = json.loads(Path(result.name).read_text())
    keys = ("p50_ms", "p95_ms", "steady_p50_ms", "steady_p95_ms", "queries")
    return {k: found[k] for k in keys}


def sync_rebuilds(dsn: str, workspace: Path, rounds: int) -> dict[str, Any]:
    """This tree's sync of `workspace` (filling the embedding cache), then `rounds` forced
    rebuilds from the cache: the seconds each rebuild took and the chunks it wrote."""
    sys.path.insert(0, str(Path.cwd()))
    from memory.index.index import MemoryIndex
    from memory.memory_config import EmbeddingConfig, MemoryConfig
    from memory.store.postgres.database import open_postgres

    db = open_postgres(dsn, schema="pinch_sync", min_size=1, max_size=4)
    index = MemoryIndex(db, workspace, MemoryConfig(embedding=EmbeddingConfig(provider="use")))
    try:
        index.sync()
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            report = index.sync(force=True)
            times.append(time.perf_counter() - started)
            assert report.chunks_embedded == 0  # every vector from the cache
        chunks = int(db.execute("SELECT count(*) FROM memory_chunks")[0][0])
        return {"rebuild_s": times, "chunks": chunks}
    finally:
        index.close()


def side_by_side(base: Path, chunks: int, dsn: str | None, out: Path, queries: int) -> None:
    sys.path.insert(0, str(REPO))
    from bench import speed_pg
    from bench.speed import scale_files
    from bench.workspace import write_workspace
    from memory.memory_config import MemoryConfig

    server = None
    if dsn is None:
        server, dsn = speed_pg.start_server(out / "postgres")
    chunking = MemoryConfig().chunking
    for n in (chunks, 1000):
        workspace = out / f"scale-{n}" / "workspace"
        if not workspace.is_dir():
            files, _, _ = scale_files(n, chunking.tokens, chunking.overlap)
            write_workspace(workspace, files)
    schema = speed_pg.schema_for(chunks)
    sides = {"three copies (before)": base, "once (this tree)": REPO}
    dsns = {
        label: speed_pg.fresh_database(dsn, name)
        for label, name in zip(sides, ("once_base", "once_new"), strict=True)
    }
    result: dict[str, Any] = {"chunks": chunks, "loads": {}, "sizes": {}, "search": {}}
    for label, tree in sides.items():
        started = time.perf_counter()
        _run(
            "bench/bulk_scale.py", "load", "--chunks", str(chunks), "--workspace",
            str(out / f"scale-{chunks}" / "workspace"), "--dsn", dsns[label], "--cache",
            cwd=tree,
        )  # fmt: skip
        result["loads"][label] = time.perf_counter() - started
        _sql(dsns[label], schema, "VACUUM ANALYZE")
        result["sizes"][label] = _sizes(dsns[label], schema)
    for _ in range(2):  # the sides alternate
        for label, tree in sides.items():
            found = _latency(tree, dsns[label], chunks, out, queries)
            result["search"].setdefault(label, []).append(found)
    # The older database upgraded by this tree: the migration, then VACUUM FULL of its tables.
    old = dsns["three copies (before)"]
    started = time.perf_counter()
    _run("-c", _OPEN, old, schema, cwd=REPO)
    result["upgrade_s"] = time.perf_counter() - started
    result["sizes"]["before, upgraded"] = _sizes(old, schema)
    started = time.perf_counter()
    _sql(old, schema, "VACUUM FULL memory_matrix_g1")
    result["vacuum_full_s"] = time.perf_counter() - started
    result["sizes"]["before, upgraded, VACUUM FULL memory_matrix_g1"] = _sizes(old, schema)
    label = "before, upgraded (this tree)"
    result["search"][label] = [_latency(REPO, old, chunks, out, queries)]
    # A small real sync: the forced rebuild of a 1,000-chunk workspace from the cache.
    result["sync"] = {}
    for label, tree in sides.items():
        sync_dsn = speed_pg.fresh_database(dsn, "once_sync_" + ("base" if tree == base else "new"))
        argv = ["sync", "--dsn", sync_dsn, "--workspace", str(out / "scale-1000" / "workspace")]
        script = str(REPO / "bench" / "pg_centroids_once.py")
        result["sync"][label] = json.loads(_run(script, *argv, cwd=tree).splitlines()[-1])
    print(json.dumps(result, indent=2))
    del server  # (stopped with this process)


# Opening the store migrates it (sys.argv: the DSN and the schema).
_OPEN = (
    "import sys; from memory.store.postgres.database import open_postgres; "
    "open_postgres(sys.argv[1], schema=sys.argv[2], min_size=1, max_size=1).close()"
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", default="compare", choices=["compare", "sync"])
    p.add_argument("--base", type=Path, help="a checkout from before the change")
    p.add_argument("--chunks", type=int, default=10_000)
    p.add_argument("--dsn")
    p.add_argument("--workspace", type=Path, help="sync: the workspace to index")
    p.add_argument("--rounds", type=int, default=3, help="sync: forced rebuilds timed")
    p.add_argument("--queries", type=int, default=60, help="questions per latency run")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "pg_once")
    args = p.parse_args()
    os.environ.setdefault("PINCH_HOME", str(args.out / "home"))
    if args.mode == "sync":
        print(json.dumps(sync_rebuilds(args.dsn, args.workspace, args.rounds)))
        return
    side_by_side(args.base, args.chunks, args.dsn, args.out, args.queries)


if __name__ == "__main__":
    main()
