"""Recall signals: what memory_search returned, for Dreaming to count.

Every search records one row per hit (path and lines, a hash of the snippet, a hash of the query,
the day, the score, the hit's origin) — never the query text. `record_recall` is called by
`MemoryIndex.search` after the results are computed; it never blocks and never fails a search:
the rows are written without waiting for a lock, and if another process holds the write lock
they wait in a small bounded buffer for the next search (or `flush_signals`). Measured cost: well
under a millisecond per search (tests/test_dreaming_signals.py).

The rows are kept by a `RecallSignalStore` (memory/store/dreams_store.py, with their migrations).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from memory.store.recall_signals import RecallSignal, signals_for

if TYPE_CHECKING:
    from memory.search.hybrid import SearchHit
    from memory.store.db import Database


log = logging.getLogger(__name__)


def query_hash(query: str) -> str:
    """A stable hash of a query, normalised for case and spacing (the text itself is not kept)."""
    norm = " ".join(query.lower().split())
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()[:16]


def _snippet_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def stop_recording(db: Database) -> None:
    """Record no signals through `db` from now on (`[dreaming] enabled = false`)."""
    signals_for(db).disable()


def record_recall(
    db: Database, query: str, hits: Sequence[SearchHit], *, now: datetime | None = None
) -> None:
    """Record that `hits` answered `query`. Never raises, never waits for a lock."""
    if not hits:
        return
    try:
        moment = now or datetime.now()
        qh, day, at = query_hash(query), moment.date().isoformat(), time.time()
        signals = [
            RecallSignal(
                h.path,
                h.start_line,
                h.end_line,
                _snippet_hash(h.snippet),
                h.origin,
                qh,
                day,
                float(h.score),
                at,
            )
            for h in hits
        ]
        signals_for(db).add(signals)
    except Exception:  # a signal lost is better than a search failed
        log.debug("Could not record recall signals", exc_info=True)


def flush_signals(db: Database) -> None:
    """Write any buffered signals now, waiting for the write lock if need be (Dreaming)."""
    signals_for(db).flush()


def prune_signals(db: Database, before_day: str) -> int:
    """Delete signals older than `before_day` (YYYY-MM-DD); returns how many went."""
    return signals_for(db).prune(before_day)


def forget_signals(db: Database, path: str) -> int:
    """Delete the signals of one file (for forgetting); returns how many went."""
    return signals_for(db).delete_path(path)
