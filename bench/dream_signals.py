"""What recording recall signals adds to a memory_search: `record_recall` timed alone.

    .venv/bin/python -m bench.dream_signals [--searches 2000] [--hits 6]

A real agent database on disk (WAL, synchronous=NORMAL), rows as the index writes them.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

from memory.index.index import MemoryIndex
from memory.lifecycle.signals import flush_signals
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.search.hybrid import SearchHit
from memory.search.signal_recording import record_recall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--searches", type=int, default=2000)
    parser.add_argument("--hits", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp, "workspace")
        (workspace / "memory").mkdir(parents=True)
        config = MemoryConfig(embedding=EmbeddingConfig(provider="none"))
        index = MemoryIndex.open(workspace, Path(tmp, "agent.sqlite"), config)
        flush_signals(index.db)  # the tables exist before timing starts
        hits = [
            SearchHit(
                f"memory/2026-11-0{i % 9 + 1}.md", i, i + 3, 0.8, "x" * 700, "memory", "agent"
            )
            for i in range(args.hits)
        ]
        timings = []
        for n in range(args.searches):
            started = time.perf_counter()
            record_recall(index.db, f"query {n}", hits, now=datetime(2026, 11, 1 + n % 28))
            timings.append((time.perf_counter() - started) * 1000)
        index.close()
    timings.sort()
    p95 = timings[int(len(timings) * 0.95)]
    print(
        f"record_recall, {args.hits} hits, {args.searches} searches: "
        f"median {statistics.median(timings):.3f} ms, p95 {p95:.3f} ms, max {timings[-1]:.3f} ms"
    )


if __name__ == "__main__":
    main()
