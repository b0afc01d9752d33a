"""Gathering a search's candidates: keyword matches ranked by FTS5's bm25 (leaving out words too
common to say much), and vector matches re-scored by their best passage."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from memory.search.ranking import Candidate
from memory.search.vectors import VectorStore
from memory.store.search_queries import MalformedQuery, SearchQueries, search_queries
from memory.text import fts_match_expression

# Ranking this many rows costs FTS5 about a millisecond: below it no term is worth leaving out.
COMMON_TERM_FLOOR = 2000
# An AND of words that are all common is looked for only as far back as each of them has this
# many chunks: words each held by tens of thousands of chunks may rarely meet, and finding where
# they do read their whole lists (at 1M chunks on PostgreSQL, 145 ms at p95; bench/RESULTS.md).
# The vector side still sees every chunk; a word held by fewer chunks bounds the AND itself.
COMMON_AND_WINDOW = 20_000


@dataclass(frozen=True)
class KeywordMatch:
    """What the keyword side ranks: an FTS5 expression, and with `since` only the chunks from
    that id on."""

    expression: str
    since: int | None = None


def keyword_candidates(
    queries: SearchQueries,
    generation: int,
    match: str | KeywordMatch,
    limit: int,
    scopes: list[str],
    rank_cap: int | None = None,
) -> list[tuple[int, float]]:
    """(chunk_id, bm25 rank) best first; rank is negative, lower is better.

    FTS5 ranks first and the generation/scope filter applies to its top rows (SQLite's planner
    would otherwise probe the FTS index once per chunk); the inner limit grows if the filter
    leaves too few. FTS5 computes bm25 for every row the expression matches: with `rank_cap`,
    only the newest `rank_cap` matching rows are ranked (a keyword that common says little; the
    vector side still sees every chunk), widened while the filter leaves too few. A
    `KeywordMatch`'s `since` holds in every round.
    """
    if isinstance(match, str):
        match = KeywordMatch(match)
    expression, since = match.expression, match.since
    if since is not None and not rank_cap:
        rank_cap = COMMON_AND_WINDOW  # every match from `since` on (the window holds no more)
    inner = max(4 * limit, 200)
    while True:
        try:
            if rank_cap:
                # The newest `rank_cap` matches with their bm25, then the best `inner` of them.
                ranked, matched = queries.keyword_newest_best(expression, rank_cap, inner, since)
                every_match = matched < rank_cap
            else:
                every_match = True
                ranked = queries.keyword_ranked(expression, inner)
        except MalformedQuery:
            return []  # a query FTS5 cannot parse finds nothing by keyword
        allowed = queries.in_scope([i for i, _ in ranked], generation, scopes)
        kept = [(i, r) for i, r in ranked if i in allowed]
        filtered_out = len(kept) < len(ranked)
        if len(kept) >= limit or (len(ranked) < inner and (every_match or not filtered_out)):
            return kept[:limit]
        if len(ranked) < inner and rank_cap:
            rank_cap *= 8  # the newest rows were mostly out of scope: rank more of them
        else:
            inner *= 8


def common_term_match(
    queries: SearchQueries,
    generation: int,
    terms: list[str],
    share: float,
    floor: int = 0,
    window: int = COMMON_AND_WINDOW,
) -> KeywordMatch | None:
    """The OR-joined FTS5 expression for `terms` without the very common ones.

    A term found in more than `share` of the generation's chunks (and in more than `floor`,
    by default `COMMON_TERM_FLOOR`) is left out while a rarer one remains; terms found nowhere
    are left out too. When every term is that common, the chunks holding all of them (AND) are
    what bm25 would rank first anyway, and far fewer to rank — looked for back to where the last
    of them to get there has its `window`-th newest chunk (when each has that many; else
    everywhere); if none there holds all, the rarest term alone.
    """
    if len(terms) < 2:
        return _expression(fts_match_expression(terms))
    version = queries.index_version()
    limit = int(max(share * total_chunks(queries, generation, version), floor or COMMON_TERM_FLOOR))
    counts = [_term_count(queries, version, t, limit + 1) for t in terms]
    kept = [t for t, n in zip(terms, counts, strict=True) if 0 < n <= limit]
    if kept:
        return _expression(fts_match_expression(kept))
    found = [t for t, n in zip(terms, counts, strict=True) if n > 0]
    if not found:
        return None
    every = fts_match_expression(found, operator="AND")
    if len(found) > 1 and every:
        since = _window_start(queries, version, found, window)
        if _match_count(queries, every, 1, since):
            return KeywordMatch(every, since)
    if len(found) == 1:
        return _expression(fts_match_expression(found))  # the rarest without counting it
    # Counting stopped at the limit above: count the common terms in full to find the rarest.
    return _expression(
        fts_match_expression(
            [min(found, key=lambda t: _match_count(queries, fts_match_expression([t]), None))]
        )
    )


def _expression(expression: str | None) -> KeywordMatch | None:
    return KeywordMatch(expression) if expression else None


def _match_count(
    queries: SearchQueries, match: str | None, limit: int | None, since: int | None = None
) -> int:
    """Rows of the FTS index `match` finds, counting stops at `limit` (a full count of a common
    term costs about what leaving it out saves); with `since`, only from that chunk id on."""
    if not match:
        return 0
    try:
        return queries.match_count(match, limit, since)
    except MalformedQuery:
        return 0


_newest_ids: dict[tuple[str, str, str, int], int | None] = {}


def _window_start(
    queries: SearchQueries, version: str, terms: list[str], window: int
) -> int | None:
    """The lowest of the terms' `window`-th newest chunk ids; None when a term has fewer
    chunks (an AND led by it reads no more than that). Each term's is remembered per index
    version, as its count is."""
    starts = []
    for term in terms:
        key = (queries.identity, version, term, window)
        if key not in _newest_ids:
            if len(_newest_ids) >= TERM_COUNTS_KEPT:
                _newest_ids.clear()
            match = fts_match_expression([term])
            try:
                _newest_ids[key] = queries.newest_match_id(match, window) if match else None
            except MalformedQuery:
                _newest_ids[key] = None
        start = _newest_ids[key]
        if start is None:
            return None
        starts.append(start)
    return min(starts, default=None)


_chunk_counts: dict[tuple[str, int, str], int] = {}
# How many rows a term matches (up to a limit), remembered per index version: counting a common
# term costs milliseconds (a Chinese question's 8-12 bigrams ≈ 3.5 ms at 100k chunks), and the same
# words recur from one question to the next. Any write bumps the version, so a count is exact.
_term_counts: dict[tuple[str, str, str, int], int] = {}
TERM_COUNTS_KEPT = 4096


def _term_count(queries: SearchQueries, version: str, term: str, limit: int) -> int:
    key = (queries.identity, version, term, limit)
    n = _term_counts.get(key)
    if n is None:
        n = _match_count(queries, fts_match_expression([term]), limit)
        if len(_term_counts) >= TERM_COUNTS_KEPT:
            _term_counts.clear()
        _term_counts[key] = n
    return n


def total_chunks(queries: SearchQueries, generation: int, version: str) -> int:
    """Chunks in the generation, remembered per index `version` (counting 100k rows takes ms)."""
    key = (queries.identity, generation, version)
    if key not in _chunk_counts:
        if len(_chunk_counts) > 64:
            _chunk_counts.clear()
        _chunk_counts[key] = queries.chunk_count(generation)
    return _chunk_counts[key]


def chunk_vector_scores(
    queries: SearchQueries, query: np.ndarray, coarse: list[tuple[int, float]]
) -> tuple[list[tuple[int, float]], dict[int, list[tuple[int, int, float]]]]:
    """Re-score the chunks the centroid index found by their best passage.

    Returns (chunk_id, best passage cosine) best first, and each chunk's scored passages.
    """
    best = dict(coarse)  # a chunk without passage vectors keeps its centroid score
    passages: dict[int, list[tuple[int, int, float]]] = {}
    ids = [cid for cid, _ in coarse]
    q = np.asarray(query, dtype=np.float32)
    for i in range(0, len(ids), 500):  # (one product per 500 chunks, as always: same floats)
        found = queries.passage_vectors(ids[i : i + 500])
        if found is None:
            continue
        sims = (found.matrix @ q).tolist()
        # Each chunk's passages in the order the store lists them (together, per its promise;
        # grouped here by chunk whatever the order), and its best passage's cosine.
        for (cid, start, end), sim in zip(found.spans, sims, strict=True):
            scored = passages.get(cid)
            if scored is None:
                passages[cid] = [(start, end, sim)]
            else:
                scored.append((start, end, sim))
        for cid, scored in passages.items():
            best[cid] = max(x for _, _, x in scored)
    ranked = sorted(best.items(), key=lambda x: (-x[1], x[0]))
    return ranked, passages


def vector_candidates(
    store: VectorStore,
    qvec: np.ndarray,
    pool: int,
    generation: int,
    scopes: list[str],
) -> tuple[list[tuple[int, float]], dict[int, list[tuple[int, int, float]]]]:
    """The vector side of a search for the query's vector: shortlist `pool` chunks by centroid,
    then score them by their passages (on the store's own read connection)."""
    # Centroids find a wide pool cheaply; passages then score it exactly.
    coarse = store.search(qvec, pool, generation, scopes)
    return chunk_vector_scores(search_queries(store.reader()), qvec, coarse)


def embed_and_search(
    store: VectorStore,
    embed_query: Callable[[str], np.ndarray],
    query: str,
    pool: int,
    generation: int,
    scopes: list[str],
) -> tuple[list[tuple[int, float]], dict[int, list[tuple[int, int, float]]]]:
    """`vector_candidates` of the query, embedded here (in the calling thread)."""
    return vector_candidates(store, embed_query(query), pool, generation, scopes)


def load_candidates(queries: SearchQueries, ids: list[int]) -> dict[int, Candidate]:
    """The chunks of `ids` that still exist, as candidates without scores."""
    return {int(row[0]): Candidate(*row[:9], project=row[9]) for row in queries.chunks(ids)}
