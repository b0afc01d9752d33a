"""bench/speed.py's latency scales with the memory index in PostgreSQL (`--store postgres`):
the server (a pgserver kept under --out, or `--dsn`), the index opened on one schema per scale
(as app/store_factory.open_memory_index opens an agent's), and the server's resident memory.

    python bench/speed.py --store postgres --only latency --scales 10000
    python bench/speed.py --store postgres --dsn postgresql://… --only latency

The same workspace (generated, seeded), the same primed random unit vectors and the same
questions as the SQLite run of the same size; the query embedding by the real local model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memory.index.index import MemoryIndex
from memory.memory_config import MemoryConfig


def start_server(out: Path) -> tuple[Any, str]:
    """A pgserver (PostgreSQL 16 + pgvector) in `out`/pgdata, kept between runs so a built scale
    is reused; stopped when this process ends."""
    out.mkdir(parents=True, exist_ok=True)
    runtime = out / "xdg"
    runtime.mkdir(mode=0o700, exist_ok=True)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
    import pgserver

    server = pgserver.get_server(out / "pgdata", cleanup_mode="stop")
    return server, str(server.get_uri())


def schema_for(chunks: int) -> str:
    return f"pinch_speed_{chunks}"


def open_index(workspace: Path, dsn: str, chunks: int, config: MemoryConfig) -> MemoryIndex:
    """The memory index of `workspace` on the scale's own schema of the server at `dsn`."""
    from memory.store.postgres.database import open_postgres

    db = open_postgres(dsn, schema=schema_for(chunks), min_size=1, max_size=4)
    try:
        return MemoryIndex(db, workspace, config)
    except BaseException:
        db.close()
        raise


def server_pids(dsn: str) -> list[int]:
    """The postmaster's pid (from the server itself) and every process it forked."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT setting FROM pg_settings WHERE name = 'data_directory'"
        ).fetchone()
    assert row is not None
    pid_file = Path(row[0]) / "postmaster.pid"
    postmaster = int(pid_file.read_text().split()[0])
    pids = [postmaster]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == postmaster:
            pids.append(int(proc.name))
    return pids


def _rollup(pid: int) -> dict[str, int]:
    values: dict[str, int] = {}
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return values
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("Rss:", "Pss:") and parts[1].isdigit():
            values[parts[0][:-1]] = int(parts[1])
    return values


def server_memory_mb(dsn: str) -> dict[str, float]:
    """The server's resident memory now: the sum of its processes' RSS (counts the shared
    buffers once per process that touched them: an upper bound) and of their PSS (shared pages
    split between the processes: the honest total), in MB."""
    pids = server_pids(dsn)
    rss = pss = 0
    for pid in pids:
        r = _rollup(pid)
        rss += r.get("Rss", 0)
        pss += r.get("Pss", 0)
    return {"pg_processes": len(pids), "pg_rss_mb": rss / 1024, "pg_pss_mb": pss / 1024}


def current_rss_mb() -> float:
    """This process's resident memory now (VmRSS), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def drop_schema(dsn: str, chunks: int) -> None:
    """Forget a scale's index (`--fresh`): its schema goes, the next open migrates a new one."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema_for(chunks)} CASCADE")


def fresh_database(admin: str, name: str) -> str:
    """An empty database `name` on the server of `admin` (dropped first if it exists): its DSN."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return make_conninfo(admin, dbname=name)
