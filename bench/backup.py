"""How long a backup takes, how large the archive is, and how long the gateway's writes wait
while it runs.

    python -m bench.backup --quick     # 10k chunks, 1,000 transcript events (under a minute)
    python -m bench.backup             # 100k chunks, 10,000 transcript events

A home is generated once in --out (daily notes from bench/synthetic.py, indexed through the real
sync path with primed random vectors, as bench/speed.py does, so no model runs over every chunk;
transcript events appended through the session store), then reused. While `make_backup` runs, a
writer thread appends one transcript event every 20 ms through its own connection, as a turn
does, and each append's wall time is recorded — in the backup's own process, as the gateway's
scheduled backup runs (sharing the GIL with gzip: the harsher case; `pinch backup` runs in a
process of its own). The same writer runs for 15 s before the backup as the baseline.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.backup.archive import make_backup
from app.backup.schedule import call_niced
from app.config import load_settings
from bench.speed import scale_files
from bench.synthetic import TextSource
from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.store.db import open_database
from memory.store.sessions import SessionKey, SqliteSessionStore

WRITE_EVERY_S = 0.02
BASELINE_S = 15.0  # long enough to hold one of SQLite's own WAL checkpoints (~every 300 writes)
EVENTS_PER_SESSION = 20


def build_home(home: Path, chunks: int, events: int) -> dict[str, Any]:
    """A home of `chunks` indexed chunks (local model's dimensions, primed random vectors) and
    `events` transcript events; reused when it already has them."""
    started = time.perf_counter()
    workspace, db_path = home / "workspace", home / "agents" / "main" / "agent.sqlite"
    marker = home / "built.json"
    if marker.exists() and json.loads(marker.read_text()) == {"chunks": chunks, "events": events}:
        return {"reused": True, "build_s": 0.0}
    config = MemoryConfig(embedding=EmbeddingConfig(provider="local"))
    files, _, texts = scale_files(chunks, config.chunking.tokens, config.chunking.overlap)
    for rel, content in files.items():
        path = workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    db_path.parent.mkdir(parents=True, exist_ok=True)
    index = MemoryIndex.open(workspace, db_path, config)
    provider = index.provider
    assert provider is not None, index.degraded_reason()
    rng = np.random.default_rng(chunks)
    for i in range(0, len(texts), 10_000):
        part = texts[i : i + 10_000]
        vectors = rng.standard_normal((len(part), provider.dimensions)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        index.prime_embedding_cache(part, vectors)
    index.sync()
    index.close()
    db = open_database(db_path, vector_backend="numpy")
    store = SqliteSessionStore(db)
    source = TextSource(events)
    for n in range(events):
        if n % EVENTS_PER_SESSION == 0:
            session = store.reset(SessionKey("main", "telegram", "direct", f"{n}"))
        kind = "user" if n % 2 == 0 else "assistant"
        text = source.question() if kind == "user" else source.reply()
        store.append(session.id, kind, {"text": text})
    db.close()
    marker.write_text(json.dumps({"chunks": chunks, "events": events}))
    return {"reused": False, "build_s": time.perf_counter() - started}


class Writer(threading.Thread):
    """Appends a transcript event every WRITE_EVERY_S through its own connection; records the
    wall time of each append."""

    def __init__(self, db_path: Path) -> None:
        super().__init__(daemon=True)
        self.db = open_database(db_path, vector_backend="numpy")
        self.store = SqliteSessionStore(self.db)
        self.session = self.store.reset(SessionKey("main", "bench", "direct", "writer"))
        self.waits: list[float] = []
        self.slowest: list[tuple[float, float]] = []  # (start, wait) of each write
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            self.store.append(self.session.id, "user", {"text": "a turn while backing up"})
            self.waits.append(time.perf_counter() - t0)
            self.slowest.append((t0, self.waits[-1]))
            time.sleep(WRITE_EVERY_S)

    def take(self) -> list[float]:
        taken, self.waits = self.waits, []
        return taken


def _summary(waits: list[float]) -> dict[str, float]:
    ms = sorted(w * 1000 for w in waits) or [0.0]
    return {
        "writes": len(waits),
        "p50_ms": statistics.median(ms),
        "p99_ms": ms[min(len(ms) - 1, int(len(ms) * 0.99))],
        "max_ms": ms[-1],
        "over_200ms": sum(1 for m in ms if m > 200),
    }


def run(chunks: int, events: int, out: Path) -> dict[str, Any]:
    home = out / f"home-{chunks}-{events}"
    built = build_home(home, chunks, events)
    # Each run backs up a fresh copy of the (closed) database, so the writer's events of an
    # earlier run are not counted; the workspace is the built one.
    run_home = out / "run"
    shutil.rmtree(run_home, ignore_errors=True)
    settings = load_settings(home=run_home, workspace=home / "workspace")
    db_path = settings.database_path
    db_path.parent.mkdir(parents=True)
    shutil.copyfile(home / "agents" / "main" / "agent.sqlite", db_path)
    writer = Writer(db_path)
    writer.start()
    time.sleep(BASELINE_S)
    baseline = writer.take()
    phases: list[tuple[float, str]] = []
    with tempfile.TemporaryDirectory(dir=out) as archives:
        started = time.perf_counter()
        writer.slowest = []
        result = call_niced(  # as `pinch backup` and the scheduled backup run it
            lambda: make_backup(
                settings,
                to=f"{archives}/",
                on_progress=lambda what: phases.append((time.perf_counter() - started, what)),
            )
        )
        during = writer.take()
        writer.stop.set()
        writer.join()
        writer.db.close()
        counts = result.manifest.counts()
        database_mb = round(db_path.stat().st_size / 1e6, 1)
        shutil.rmtree(run_home, ignore_errors=True)
        return {
            "chunks": counts.get("chunks"),
            "transcript_events": counts.get("transcript_events"),
            "workspace_files": counts.get("workspace_files"),
            "database_mb": database_mb,
            "archive_mb": round(result.size / 1e6, 1),
            "backup_s": round(result.seconds, 2),
            "baseline": _summary(baseline),
            "during_backup": _summary(during),
            "phases_s": [(round(t, 2), what) for t, what in phases],
            "slowest_writes": [
                (round(t - started, 2), round(w * 1000, 1))
                for t, w in sorted(writer.slowest, key=lambda x: -x[1])[:3]
            ],
            **built,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10k chunks, 1,000 events")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "pinch-bench")
    args = parser.parse_args()
    chunks, events = (10_000, 1_000) if args.quick else (100_000, 10_000)
    args.out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(run(chunks, events, args.out), indent=2))


if __name__ == "__main__":
    main()
