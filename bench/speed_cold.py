"""Scenarios of bench/speed.py about the database itself: its size beside the notes (where the
bytes go), and the first searches after it left the OS page cache.

    .venv/bin/python bench/speed.py --only size,cold --scales 10000
    .venv/bin/python bench/speed.py --worker cold --spec '{"chunks": 100000, "backend": "numpy",
        "out": "bench/out/speed", "queries": 30, "warm_s": 0}' --result R.json

`cold` loads the embedding model first (as the chat and the gateway do at start-up; the model's
files are not the database's), then drops the database files' pages from the page cache with
`posix_fadvise(POSIX_FADV_DONTNEED)` — what a reboot, or hours of other work, leaves — and times
the first query and the next ones. With `warm_s`, `MemoryIndex.warm()` runs right after the
eviction and the first question comes that many seconds later (someone typing).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

Result = dict[str, Any]


def db_files(db_path: Path) -> list[Path]:
    return [p for p in (db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")) if p.exists()]


def evict(db_path: Path) -> None:
    """Drop the database files' pages from the OS page cache (only these files)."""
    for path in db_files(db_path):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # (dirty pages would stay)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def markdown_bytes(workspace: Path) -> int:
    return sum(p.stat().st_size for p in workspace.rglob("*.md") if p.is_file())


def table_bytes(conn: Any) -> dict[str, int]:
    """Payload bytes per table (the sum of its values' lengths: SQLite's own page and index
    overhead comes on top), biggest first. The driver has no `dbstat`."""
    out: dict[str, int] = {}
    tables = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE '%VIRTUAL%'"
    ).fetchall()
    for (name,) in tables:
        columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{name}")')]
        if not columns:
            continue
        total = " + ".join(f'coalesce(length("{c}"), 0)' for c in columns)
        (n,) = conn.execute(f'SELECT coalesce(sum({total}), 0) FROM "{name}"').fetchone()
        out[name] = int(n)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def grouped(tables: dict[str, int]) -> dict[str, int]:
    """Table payloads grouped by what they hold."""
    groups: dict[str, int] = {}
    for name, n in tables.items():
        if name.startswith("memory_fts"):
            key = "keywords (FTS5)"
        elif name.startswith("memory_vec_g"):
            key = "sqlite-vec vec0"
        elif name.startswith("memory_matrix_pack"):
            key = "matrix pack"
        elif name.startswith("memory_matrix_log"):
            key = "matrix change log"
        elif name.startswith("memory_matrix_g"):
            key = "matrix rows"
        else:
            key = name
        groups[key] = groups.get(key, 0) + n
    return dict(sorted(groups.items(), key=lambda kv: -kv[1]))


def page_bytes(db_path: Path) -> dict[str, int]:
    """Bytes of pages each table takes with its indexes (SQLite's `dbstat`, which the stdlib
    sqlite3 of this machine has and pysqlite3 has not), grouped as `grouped` groups them; {}
    when there is no dbstat."""
    import sqlite3

    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        rows = conn.execute(
            "SELECT s.name, coalesce(m.tbl_name, s.name), sum(s.pgsize) FROM dbstat s "
            "LEFT JOIN sqlite_master m ON m.name = s.name GROUP BY s.name"
        ).fetchall()
        conn.close()
    except sqlite3.Error:
        return {}
    by_table: dict[str, int] = {}
    for _name, table, n in rows:
        by_table[table] = by_table.get(table, 0) + int(n)
    return grouped(by_table)


def size(spec: Result) -> Result:
    """The scale database's size beside its Markdown, and where the bytes go."""
    from memory.store.db import sqlite_driver
    from memory.store.passage_pack import passage_count

    root = Path(spec["out"]) / f"scale-{spec['chunks']}"
    db_path = root / f"index-{spec['backend']}.sqlite"
    notes = markdown_bytes(root / "workspace")
    conn = sqlite_driver().connect(str(db_path))
    try:
        (page,) = conn.execute("PRAGMA page_size").fetchone()
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        (free,) = conn.execute("PRAGMA freelist_count").fetchone()
        counts = {
            t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
            for t in ("memory_chunks", "embedding_cache")
        }
        counts["passages"] = passage_count(conn)  # (packed or a row each: passage_pack.py)
        tables = grouped(table_bytes(conn))
    finally:
        conn.close()
    file_bytes = sum(p.stat().st_size for p in db_files(db_path))
    return {
        "backend": spec["backend"],
        "markdown_mb": notes / 1e6,
        "file_mb": file_bytes / 1e6,
        "times_markdown": file_bytes / notes if notes else None,
        "used_mb": (pages - free) * page / 1e6,
        "free_mb": free * page / 1e6,
        **{f"rows_{k}": v for k, v in counts.items()},
        "payload_mb": {k: round(v / 1e6, 1) for k, v in tables.items() if v >= 100_000},
        "pages_mb": {k: round(v / 1e6, 1) for k, v in page_bytes(db_path).items() if v >= 100_000},
    }


def cold(spec: Result) -> Result:
    """First searches after the database left the page cache (the model already loaded)."""
    from bench.speed import _open, _scale_paths
    from bench.synthetic import TextSource

    workspace, db_path = _scale_paths(spec)
    index = _open(workspace, db_path, "local", spec["backend"])
    assert index.provider is not None, index.degraded_reason()
    index.provider.embed_query("warm up the model")  # its files are not the database's
    source = TextSource(77, rich=True)
    queries = [source.question() for _ in range(spec["queries"])]
    index.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
    evict(db_path)
    if spec.get("warm_s") is not None:
        index.warm()
        time.sleep(spec["warm_s"])
    timings: list[float] = []
    for query in queries:
        started = time.perf_counter()
        index.search(query, preset=spec.get("preset", "pinch"))
        timings.append(1000 * (time.perf_counter() - started))
    backend = index.vector_backend
    index.close()
    return {
        "backend": backend,
        "warm_s": spec.get("warm_s"),
        "first_query_ms": timings[0],
        "second_query_ms": timings[1] if len(timings) > 1 else None,
        "p50_ms": float(np.percentile(timings, 50)),
        "p95_ms": float(np.percentile(timings, 95)),
        "max_ms": max(timings),
        "queries": len(timings),
    }
