"""When a search embeds its question: first, on both cores, or beside the keyword side.

A search has three parts of CPU work: the question's embedding (the local e5 model: ≈ 25 ms of
one core for a short question, ≈ 13 ms on two), the keyword side (SQLite's FTS5: a few ms for a
few English words, 15-21 ms for a Chinese question's 8-12 bigrams at 100k chunks since a bigram
is an index term of its own, 20-40 ms before) and the vector side (the centroid product and
the passages' re-scoring, ≈ 5-10 ms). On two cores the shortest path is

- *embed first*: the embedding on both cores, then the keyword and vector sides at once —
  when the keyword side is short (it waits for the embedding);
- *beside*: the embedding on one core and then the vector side, while the keyword side runs
  on the other — when the keyword side is long (about as long as the embedding itself).

`SCHEDULE = "auto"` picks by the question's terms (`keyword_heavy`); "embed-first" and
"beside" force one (tests, benchmarks). A model that cannot use several cores for a query
(a remote API, USE) always runs beside: embedding first would only wait. Whether the local
model gains from two engine threads depends on the machine (on one here two threads took
half the time, on another 1.5× longer), so it embeds first only once the warm-up of a
long-running process measured two threads clearly faster (`calibrate_after_load`,
`LocalE5Provider.calibrate_query_cores`); until then, and in one-off commands, beside. Both
give the same answer: the same vector (each engine output is computed by one thread), the same
reads.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from memory.embeddings.base import query_cores
from memory.search.candidates import embed_and_search, vector_candidates
from memory.search.vectors import VectorStore
from memory.text import CJK_CHAR

log = logging.getLogger(__name__)
T = TypeVar("T")
VectorSide = tuple[list[tuple[int, float]], dict[int, list[tuple[int, int, float]]]]

SCHEDULE = "auto"  # "auto" | "embed-first" | "beside"
# Keyword-side weight at which the embedding runs beside it: an English word ≈ 1 (one doclist
# counted and ranked), a CJK bigram 3 — set when a bigram was a phrase (two doclists merged by
# position: 8-12 bigrams ≈ 30-45 ms of FTS5 at 100k chunks); since bigrams became index terms
# (h-cjk, bench/RESULTS.md 2026-12-02) they cost 16-21 ms, ≈ 2 words each. Not re-tuned: the
# two schedules could not be told apart on the loaded machine that measured it.
HEAVY_KEYWORDS = 12
# How long the warm-up waits for the vectors before timing the query embedding anyway.
WARM_WAIT_S = 120
_WORKERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="query-embedding")


def keyword_weight(terms: list[str]) -> int:
    """The keyword side's expected cost in units of one English word (see HEAVY_KEYWORDS)."""
    return sum(3 if len(t) > 1 and CJK_CHAR.match(t) else 1 for t in terms)


def keyword_heavy(terms: list[str]) -> bool:
    return keyword_weight(terms) >= HEAVY_KEYWORDS


def embeds_first(terms: list[str], multicore: bool, keywords: bool) -> bool:
    """Whether a search with these keyword `terms` embeds its question first, on both cores.
    `multicore`: the model can use several cores for a query; `keywords`: the preset has a
    keyword side at all."""
    if not multicore or SCHEDULE == "beside":
        return False
    if SCHEDULE == "embed-first" or not keywords:
        return True
    return not keyword_heavy(terms)


def start_vector_side(
    store: VectorStore,
    embed_query: Callable[[str], np.ndarray],
    text: str,
    pool: int,
    generation: int,
    scopes: list[str],
    *,
    first: bool,
) -> Future[VectorSide]:
    """The vector side of a search under way in a worker thread (on the store's own read
    connection). With `first`, the question is embedded here, on both cores, before it starts."""
    if first:
        with query_cores(2):
            qvec = embed_query(text)
        return _WORKERS.submit(vector_candidates, store, qvec, pool, generation, scopes)
    # The model and SQLite both release the GIL: the embedding runs on one core while the
    # caller runs the keyword search on the other.
    return _WORKERS.submit(embed_and_search, store, embed_query, text, pool, generation, scopes)


def calibrate_after_load(
    store: VectorStore | None, calibrate: Callable[[], int] | None = None
) -> None:
    """The end of a long-running process's warm-up, once the vectors are read: how many engine
    threads a question's embedding should use here (`calibrate`, when not yet known; a
    measurement beside that read would favour one thread), then what is loaded by now — the
    model's tables, the index's caches — set aside from the garbage collector (`gc.freeze`):
    a full collection walked all of it, ≈ 50 ms at 100k chunks, in whichever search it fell."""
    try:
        wait = getattr(store, "wait_loaded", None)
        if wait is not None:
            wait(WARM_WAIT_S)
        if calibrate is not None:
            calibrate()
    except Exception:  # a warm-up only: searches keep one engine thread
        log.warning("Could not time the query embedding", exc_info=True)
    gc.collect()
    gc.freeze()
