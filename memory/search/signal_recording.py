"""What a search leaves for Dreaming: one recall signal per hit (memory/lifecycle/signals.py
keeps, prunes and forgets them). Never the query text, only its hash."""

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
