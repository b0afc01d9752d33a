"""Recall signals: what memory_search returned, for Dreaming to count.

Every search records one row per hit (path and lines, a hash of the snippet, a hash of the query,
the day, the score, the hit's origin) — never the query text. `record_recall`
(memory/search/signal_recording.py) is called by `MemoryIndex.search` after the results are
computed; it never blocks and never fails a search:
the rows are written without waiting for a lock, and if another process holds the write lock
they wait in a small bounded buffer for the next search (or `flush_signals`). Measured cost: well
under a millisecond per search (tests/test_dreaming_signals.py).

The rows are kept by a `RecallSignalStore` (memory/store/recall_signals.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memory.store.recall_signals import signals_for

if TYPE_CHECKING:
    from memory.store.db import Database


def stop_recording(db: Database) -> None:
    """Record no signals through `db` from now on (`[dreaming] enabled = false`)."""
    signals_for(db).disable()


def flush_signals(db: Database) -> None:
    """Write any buffered signals now, waiting for the write lock if need be (Dreaming)."""
    signals_for(db).flush()


def prune_signals(db: Database, before_day: str) -> int:
    """Delete signals older than `before_day` (YYYY-MM-DD); returns how many went."""
    return signals_for(db).prune(before_day)


def forget_signals(db: Database, path: str) -> int:
    """Delete the signals of one file (for forgetting); returns how many went."""
    return signals_for(db).delete_path(path)
