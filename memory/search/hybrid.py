"""memory_search: hybrid keyword + vector retrieval over one index generation.

The pipeline, each step a small function driven by a `SearchPreset`:
keyword candidates (FTS5 bm25) + vector candidates → `merge_hybrid` → `rerank_by_lines`
→ `apply_temporal_decay` / importance → min-score filter → `mmr_select` → snippets.
"""

from __future__ import annotations

import math
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING

import numpy as np

from common.text import shorten
from memory.errors import DatabaseError
from memory.search.presets import SearchPreset
from memory.search.vectors import from_blob
from memory.store.db import Database, as_corruption
from memory.text import (
    fts_match_expression,
    head_tokens,
    line_terms,
    openclaw_query_terms,
    query_terms,
    stem_term,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from memory.search.vectors import VectorStore

# Ranking this many rows costs FTS5 about a millisecond: below it no term is worth leaving out.
COMMON_TERM_FLOOR = 2000
COARSE_POOL = 100  # chunks the centroid index hands to passage re-scoring
# A query pasted with a whole page must still answer at once. The local model embeds ≈1.3 ms a
# CJK token (a 10,000-character Chinese query took 14 s): it sees the query's first 256 tokens
# (≈256 CJK characters, ≈1,000 of English; ≈0.25 s). The keyword side uses the first 2,000
# characters' first 64 distinct terms (each term is counted in the index and scored per line).
QUERY_CHARS = 2000
QUERY_EMBED_TOKENS = 256
QUERY_TERMS = 64
_EMBEDDER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="query-embedding")


@dataclass(frozen=True)
class SearchHit:
    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    source: str
    origin: str
    day: str | None = None

    @property
    def untrusted(self) -> bool:
        """Outside text (a web page, another person's words): findable, never to be obeyed,
        and never for Active Memory, deep recall or Dreaming
        (memory.search.filters.TRUSTED_ORIGINS)."""
        return self.origin == "untrusted"

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "startLine": self.start_line,
            "endLine": self.end_line,
            "score": round(self.score, 4),
            "snippet": self.snippet,
            "source": self.source,
            "origin": self.origin,
        }


@dataclass
class _Candidate:
    id: int
    path: str
    source: str
    origin: str
    start_line: int
    end_line: int
    text: str
    importance: int | None
    day: str | None
    vector_score: float = 0.0
    keyword_score: float = 0.0
    score: float = 0.0
    line_scores: tuple[float, ...] = ()  # how well each line of the chunk matches the query
    passages: tuple[tuple[int, int, float], ...] = ()  # (start, end, vector score) of its passages


# What SQLite says about a MATCH expression it cannot parse (as opposed to a database problem).
_FTS_QUERY_ERRORS = (
    "fts5: syntax error",
    "fts5: parser stack overflow",
    "unterminated string",
    "unknown special query",
    "fts5: column queries are not supported",
    "no such column",
)


def is_fts_query_error(exc: BaseException) -> bool:
    """True when `exc` is SQLite refusing a malformed FTS5 query, nothing worse."""
    if type(exc).__name__ != "OperationalError":
        return False
    message = str(exc)
    return any(m in message for m in _FTS_QUERY_ERRORS)


def _is_sqlite_error(exc: BaseException) -> bool:
    # sqlite3 and pysqlite3 each have their own DatabaseError class: match by module.
    return any(
        c.__name__ == "DatabaseError" and c.__module__.split(".")[0] in ("sqlite3", "pysqlite3")
        for c in type(exc).__mro__
    )


def search_failure(db: Database, exc: BaseException) -> DatabaseError:
    """The user-facing error for a database failure during a search."""
    message = str(exc)
    damaged = as_corruption(exc, db.path)
    if damaged is not None:
        return damaged
    if "locked" in message or "busy" in message:
        return DatabaseError(
            f"The agent database {db.path} is locked by another process ({message}); "
            "wait for it to finish (is `pinch memory index` running?) and search again."
        )
    return DatabaseError(
        f"Searching the memory index in {db.path} failed ({message}); run `pinch memory "
        "status`, and if it fails too rebuild the index with `pinch memory index --force`."
    )


def keyword_candidates(
    db: Database,
    generation: int,
    match: str,
    limit: int,
    scopes: list[str],
    rank_cap: int | None = None,
) -> list[tuple[int, float]]:
    """(chunk_id, bm25 rank) best first; rank is negative, lower is better.

    FTS5 ranks first and the generation/scope filter applies to its top rows (SQLite's planner
    would otherwise probe the FTS index once per chunk); the inner limit grows if the filter
    leaves too few. FTS5 computes bm25 for every row the expression matches: with `rank_cap`,
    only the newest `rank_cap` matching rows are ranked (a keyword that common says little; the
    vector side still sees every chunk), widened while the filter leaves too few.
    """
    inner = max(4 * limit, 200)
    while True:
        try:
            if rank_cap:
                # The newest `rank_cap` matches with their bm25, in one pass of FTS5 in rowid
                # order (it iterates its doclists that way), then the best `inner` of them.
                newest = db.execute(
                    "SELECT rowid, bm25(memory_fts) FROM memory_fts WHERE memory_fts MATCH ? "
                    "ORDER BY rowid DESC LIMIT ?",
                    (match, rank_cap),
                )
                every_match = len(newest) < rank_cap
                ranked = sorted(newest, key=lambda row: (row[1], -row[0]))[:inner]
            else:
                every_match = True
                ranked = db.execute(
                    "SELECT rowid, bm25(memory_fts) AS r FROM memory_fts "
                    "WHERE memory_fts MATCH ? ORDER BY r LIMIT ?",
                    (match, inner),
                )
        except Exception as exc:
            if is_fts_query_error(exc):
                return []  # a query FTS5 cannot parse finds nothing by keyword
            raise
        allowed = _in_scope(db, [int(i) for i, _ in ranked], generation, scopes)
        kept = [(int(i), float(r)) for i, r in ranked if int(i) in allowed]
        filtered_out = len(kept) < len(ranked)
        if len(kept) >= limit or (len(ranked) < inner and (every_match or not filtered_out)):
            return kept[:limit]
        if len(ranked) < inner and rank_cap:
            rank_cap *= 8  # the newest rows were mostly out of scope: rank more of them
        else:
            inner *= 8


def common_term_match(
    db: Database, generation: int, terms: list[str], share: float, floor: int = 0
) -> str | None:
    """The OR-joined FTS5 expression for `terms` without the very common ones.

    A term found in more than `share` of the generation's chunks (and in more than `floor`,
    by default `COMMON_TERM_FLOOR`) is left out while a rarer one remains; terms found nowhere
    are left out too. When every term is that common, the chunks holding all of them (AND) are
    what bm25 would rank first anyway, and far fewer to rank; if none holds all, the rarest
    term alone.
    """
    if len(terms) < 2:
        return fts_match_expression(terms)
    version = _index_version(db)
    limit = int(max(share * total_chunks(db, generation, version), floor or COMMON_TERM_FLOOR))
    counts = [_term_count(db, version, t, limit + 1) for t in terms]
    kept = [t for t, n in zip(terms, counts, strict=True) if 0 < n <= limit]
    if kept:
        return fts_match_expression(kept)
    found = [t for t, n in zip(terms, counts, strict=True) if n > 0]
    if not found:
        return None
    every = fts_match_expression(found, operator="AND")
    if len(found) > 1 and every and _match_count(db, every, 1):
        return every
    # Counting stopped at the limit above: count the common terms in full to find the rarest.
    return fts_match_expression(
        [min(found, key=lambda t: _match_count(db, fts_match_expression([t]), None))]
    )


def _match_count(db: Database, match: str | None, limit: int | None) -> int:
    """Rows of the FTS index `match` finds, counting stops at `limit` (a full count of a common
    term costs about what leaving it out saves)."""
    if not match:
        return 0
    try:
        (n,) = db.execute(
            "SELECT count(*) FROM (SELECT 1 FROM memory_fts WHERE memory_fts MATCH ? LIMIT ?)",
            (match, -1 if limit is None else limit),
        )[0]
    except Exception as exc:
        if not is_fts_query_error(exc):
            raise
        return 0
    return int(n)


_chunk_counts: dict[tuple[str, int, str], int] = {}
# How many rows a term matches (up to a limit), remembered per index version: counting a common
# term costs milliseconds (a common Chinese bigram phrase ≈ 2-4 ms at 100k chunks), and the same
# words recur from one question to the next. Any write bumps the version, so a count is exact.
_term_counts: dict[tuple[str, str, str, int], int] = {}
TERM_COUNTS_KEPT = 4096


def _index_version(db: Database) -> str:
    version = db.execute("SELECT value FROM meta WHERE key = 'index_version'")
    return str(version[0][0]) if version else "0"


def _term_count(db: Database, version: str, term: str, limit: int) -> int:
    key = (str(db.path), version, term, limit)
    n = _term_counts.get(key)
    if n is None:
        n = _match_count(db, fts_match_expression([term]), limit)
        if len(_term_counts) >= TERM_COUNTS_KEPT:
            _term_counts.clear()
        _term_counts[key] = n
    return n


def total_chunks(db: Database, generation: int, version: str) -> int:
    """Chunks in the generation, remembered per index `version` (counting 100k rows takes ms)."""
    key = (str(db.path), generation, version)
    if key not in _chunk_counts:
        if len(_chunk_counts) > 64:
            _chunk_counts.clear()
        (n,) = db.execute("SELECT count(*) FROM memory_chunks WHERE generation = ?", (generation,))[
            0
        ]
        _chunk_counts[key] = int(n)
    return _chunk_counts[key]


def _in_scope(db: Database, ids: list[int], generation: int, scopes: list[str]) -> set[int]:
    """The chunk ids among `ids` that belong to the generation and one of the scopes."""
    out: set[int] = set()
    smarks = ",".join("?" for _ in scopes)
    for i in range(0, len(ids), 500):
        part = ids[i : i + 500]
        marks = ",".join("?" for _ in part)
        out.update(
            int(r[0])
            for r in db.execute(
                # Unary + keeps SQLite on primary-key lookups instead of scanning the whole
                # generation through its (generation, path) index.
                f"SELECT id FROM memory_chunks WHERE id IN ({marks}) AND +generation = ? "
                f"AND +scope IN ({smarks})",
                (*part, generation, *scopes),
            )
        )
    return out


def chunk_vector_scores(
    db: Database, query: np.ndarray, coarse: list[tuple[int, float]]
) -> tuple[list[tuple[int, float]], dict[int, list[tuple[int, int, float]]]]:
    """Re-score the chunks the centroid index found by their best passage.

    Returns (chunk_id, best passage cosine) best first, and each chunk's scored passages.
    """
    best = dict(coarse)  # a chunk without passage vectors keeps its centroid score
    passages: dict[int, list[tuple[int, int, float]]] = {}
    ids = [cid for cid, _ in coarse]
    for i in range(0, len(ids), 500):
        part = ids[i : i + 500]
        marks = ",".join("?" for _ in part)
        rows = db.execute(
            "SELECT chunk_id, start_line, end_line, vector FROM memory_units "
            f"WHERE chunk_id IN ({marks}) AND vector IS NOT NULL",
            part,
        )
        if not rows:
            continue
        matrix = from_blob(b"".join(r[3] for r in rows)).reshape(len(rows), -1)
        sims = matrix @ np.asarray(query, dtype=np.float32)
        seen: set[int] = set()
        for (cid, start, end, _), sim in zip(rows, sims.tolist(), strict=True):
            best[cid] = sim if cid not in seen else max(best[cid], sim)
            seen.add(cid)
            passages.setdefault(cid, []).append((start, end, sim))
    ranked = sorted(best.items(), key=lambda x: (-x[1], x[0]))
    return ranked, passages


def _vector_side(
    store: VectorStore,
    embed_query: Callable[[str], np.ndarray],
    query: str,
    pool: int,
    generation: int,
    scopes: list[str],
) -> tuple[list[tuple[int, float]], dict[int, list[tuple[int, int, float]]]]:
    qvec = embed_query(query)
    # Centroids find a wide pool cheaply; passages then score it exactly.
    coarse = store.search(qvec, pool, generation, scopes)
    return chunk_vector_scores(store.reader(), qvec, coarse)


def merge_hybrid(
    vector: list[tuple[int, float]], keyword: list[tuple[int, float]], preset: SearchPreset
) -> dict[int, tuple[float, float]]:
    """chunk_id → (vector score, keyword score), each in [0, 1], per the preset's fusion."""
    out: dict[int, tuple[float, float]] = {}
    if preset.fusion == "rrf":
        kw = {i: 61 / (60 + rank) for rank, (i, _) in enumerate(keyword, start=1)}
        vec = {i: 61 / (60 + rank) for rank, (i, _) in enumerate(vector, start=1)}
    elif preset.fusion == "weighted":
        kw = {i: (-r) / (1 - r) if r < 0 else 1 / (1 + r) for i, r in keyword}
        vec = {i: max(0.0, s) for i, s in vector}
    else:
        best_kw = max((-r for _, r in keyword), default=0.0)
        kw = {i: (-r) / best_kw if best_kw > 0 else 0.0 for i, r in keyword}
        # Cosine scales differ by model: map the candidates' range onto [0, 1] relative to the
        # best, keeping absolute gaps (e5's cosines crowd into 0.7–0.9).
        best_v = max((s for _, s in vector), default=0.0)
        worst_v = min((s for _, s in vector), default=0.0)
        span = best_v - worst_v
        vec = {i: (s - worst_v) / span if span > 1e-6 else 1.0 for i, s in vector}
    for i in set(kw) | set(vec):
        out[i] = (vec.get(i, 0.0), kw.get(i, 0.0))
    return out


def _line_weights(lines_terms: list[list[frozenset[str]]], terms: list[str]) -> dict[str, float]:
    """IDF of each query term over the candidate chunks' lines (rare terms weigh more)."""
    n = sum(len(lt) for lt in lines_terms) or 1
    weights: dict[str, float] = {}
    for t in terms:
        df = sum(1 for lt in lines_terms for line in lt if t in line)
        weights[t] = math.log(1 + (n - df + 0.5) / (df + 0.5)) if df else 0.0
    return weights


def query_coverage(texts: list[str], terms: list[str]) -> float:
    """The IDF-weighted share of the query's terms found in any of `texts` (the keyword
    candidates): 1.0 when every word of the question is somewhere, near 0 when only its common
    words are — a question asked in other words than the notes it is about. A term in no line
    weighs the most (its IDF over the lines with a document frequency of 0)."""
    stems = list(dict.fromkeys(stem_term(t) for t in terms))
    if not stems:
        return 1.0
    lines = [line_terms(line) for text in texts for line in text.split("\n")]
    df = {t: sum(1 for line in lines if t in line) for t in stems}
    weights = {t: math.log(1 + (len(lines) - d + 0.5) / (d + 0.5)) for t, d in df.items()}
    total = sum(weights.values())
    return sum(w for t, w in weights.items() if df[t]) / total if total > 0 else 1.0


def rerank_by_lines(
    candidates: list[_Candidate],
    terms: list[str],
    weight: float,
    semantic_weight: float = 1.0,
    follow_weight: float = 0.0,
) -> None:
    """Add `weight` × how much of the query's weight the best 1–2 adjacent lines cover."""
    stems = list(dict.fromkeys(stem_term(t) for t in terms))
    split = [c.text.split("\n") for c in candidates]
    per_line = [[line_terms(line) for line in lines] for lines in split]
    weights = _line_weights(per_line, stems)
    total = sum(weights.values())
    for cand, lts in zip(candidates, per_line, strict=True):
        if not lts:
            continue
        scores = [sum(w for t, w in weights.items() if t in lt) for lt in lts]
        best = max(scores)
        # A pair of neighbouring lines (a question and its answer) may cover more together.
        pair_best = max(
            [best]
            + [
                sum(w for t, w in weights.items() if t in lts[j] or t in lts[j + 1])
                for j in range(len(lts) - 1)
            ]
        )
        lexical = [x / total for x in scores] if total > 0 else [0.0] * len(scores)
        semantic = [0.0] * len(lts)
        for start, end, v in cand.passages:
            for n in range(start, end + 1):
                i = n - cand.start_line
                if 0 <= i < len(semantic):
                    semantic[i] = max(semantic[i], v)
        # A line right after a matching one is often its answer: it inherits some of its score.
        carried = [0.0, *lexical[:-1]]
        cand.line_scores = tuple(
            a + follow_weight * f + semantic_weight * b
            for a, f, b in zip(lexical, carried, semantic, strict=True)
        )
        if total > 0 and weight:
            coverage = 0.5 * best / total + 0.5 * pair_best / total
            cand.score += weight * coverage


def temporal_multiplier(day: str | None, now: datetime, preset: SearchPreset) -> float:
    """Decay factor for dated logs; evergreen (undated) chunks never decay."""
    if day is None or not preset.decay_half_life_days:
        return 1.0
    try:
        age = (now.date() - date.fromisoformat(day)).days
    except ValueError:
        return 1.0
    age = max(0, age)
    decay = 0.5 ** (age / preset.decay_half_life_days)
    return preset.decay_floor + (1 - preset.decay_floor) * decay


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def mmr_select(candidates: list[_Candidate], k: int, lam: float) -> list[_Candidate]:
    """Maximal marginal relevance on word sets: relevant, and not repeating each other."""
    pool = list(candidates)
    sets = {c.id: line_terms(c.text) for c in pool}
    redundancy = {c.id: 0.0 for c in pool}  # max similarity to anything chosen so far
    chosen: list[_Candidate] = []
    top = max((c.score for c in pool), default=1.0) or 1.0
    while pool and len(chosen) < k:
        best = max(pool, key=lambda c: lam * c.score / top - (1 - lam) * redundancy[c.id])
        chosen.append(best)
        pool.remove(best)
        for c in pool:
            redundancy[c.id] = max(redundancy[c.id], _jaccard(sets[c.id], sets[best.id]))
    return chosen


def keep_vector_best(
    ranked: list[_Candidate],
    k: int,
    vector: list[tuple[int, float]],
    candidates: dict[int, _Candidate],
    slots: int,
    relevance_floor: float | None,
) -> list[_Candidate]:
    """The top `k` of `ranked` with the best `slots` chunks of `vector` (chunk id, best passage
    cosine; best first) among them: each one missing, and at or above `relevance_floor`, takes
    the place of the lowest-ranked hit and comes after the hits kept."""
    top = ranked[:k]
    kept = {c.id for c in top}
    missing = [
        candidates[cid]
        for cid, sim in vector[:slots]
        if cid not in kept
        and cid in candidates
        and (relevance_floor is None or sim >= relevance_floor)
    ]
    if not missing:
        return top
    return top[: max(0, k - len(missing))] + missing[:k]


def head_snippet(text: str, limit: int) -> str:
    return shorten(text, limit)


def focused_snippet(cand: _Candidate, limit: int) -> str:
    """The chunk's best-matching lines, in file order, within `limit` characters.

    Lines are taken by how much query weight they cover; leftover room goes to their
    neighbours (context). Skipped stretches show as "…" so the snippet never misleads.
    """
    lines = cand.text.split("\n")
    scores = cand.line_scores
    if not scores or max(scores) <= 0:
        return head_snippet(cand.text, limit)
    order = sorted(range(len(lines)), key=lambda i: (-scores[i], i))
    if len(lines[order[0]]) > limit:
        return head_snippet(lines[order[0]], limit)
    picked: set[int] = set()
    size = 0

    def cost(i: int) -> int:
        return len(lines[i]) + 3  # newline plus a possible "…" line

    for i in order:
        if scores[i] <= 0:
            break
        if lines[i].strip() and size + cost(i) <= limit:
            picked.add(i)
            size += cost(i)
    # Fill what is left with the nearest neighbours of the picked lines.
    for distance in (1, 2, 3):
        for i in sorted(picked):
            for j in (i - distance, i + distance):
                if 0 <= j < len(lines) and j not in picked and size + cost(j) <= limit:
                    picked.add(j)
                    size += cost(j)
    out: list[str] = []
    prev = None
    for i in sorted(picked):
        if prev is not None and i != prev + 1:
            out.append("…")
        if lines[i].strip() or out:
            out.append(lines[i])
        prev = i
    return "\n".join(out).strip("\n")


def _load(db: Database, ids: list[int]) -> dict[int, _Candidate]:
    out: dict[int, _Candidate] = {}
    for i in range(0, len(ids), 500):
        part = ids[i : i + 500]
        marks = ",".join("?" for _ in part)
        for row in db.execute(
            "SELECT id, path, source, origin, start_line, end_line, text, importance, day "
            f"FROM memory_chunks WHERE id IN ({marks})",
            part,
        ):
            out[int(row[0])] = _Candidate(*row)
    return out


def run_search(
    db: Database,
    generation: int,
    query: str,
    *,
    preset: SearchPreset,
    embed_query: Callable[[str], np.ndarray] | None,
    store: VectorStore | None,
    relevance_floor: float | None = None,
    max_results: int | None,
    min_score: float | None,
    now: datetime,
    scopes: list[str],
    admits: Callable[[str, str], bool] | None = None,
) -> list[SearchHit]:
    """`memory_search` over one generation, best hits first.

    Raises `IndexCorruptError` when SQLite finds the index damaged and `DatabaseError` for any
    other database failure: a broken index never looks like an empty answer.
    """
    try:
        return _run_search(
            db,
            generation,
            query,
            preset=preset,
            embed_query=embed_query,
            store=store,
            relevance_floor=relevance_floor,
            max_results=max_results,
            min_score=min_score,
            now=now,
            scopes=scopes,
            admits=admits,
        )
    except Exception as exc:
        if _is_sqlite_error(exc):
            raise search_failure(db, exc) from exc
        raise


def _run_search(
    db: Database,
    generation: int,
    query: str,
    *,
    preset: SearchPreset,
    embed_query: Callable[[str], np.ndarray] | None,
    store: VectorStore | None,
    relevance_floor: float | None = None,
    max_results: int | None,
    min_score: float | None,
    now: datetime,
    scopes: list[str],
    admits: Callable[[str, str], bool] | None = None,
) -> list[SearchHit]:
    query = re.sub(r"\s+", " ", query[: 4 * QUERY_CHARS]).strip()[:QUERY_CHARS]
    if not re.search(r"\w", query):
        return []  # nothing to look for: punctuation or whitespace only
    k = max_results or preset.max_results
    floor = preset.min_score if min_score is None else min_score
    pool = max(preset.candidate_multiplier * k, preset.min_candidates)

    if preset.keyword_terms == "openclaw":
        terms = openclaw_query_terms(query)
    else:
        terms = query_terms(query) or query_terms(query, drop_stopwords=False)
    terms = terms[:QUERY_TERMS]
    pending_vector = None
    if embed_query is not None and store is not None and preset.vector_weight > 0:
        # The vector side (embed the query, shortlist, re-score passages) runs in a worker
        # thread on the store's own connection while SQLite runs the keyword search on the main
        # one: the model and SQLite both release the GIL, so two cores work at once.
        pending_vector = _EMBEDDER.submit(
            _vector_side,
            store,
            embed_query,
            head_tokens(query, QUERY_EMBED_TOKENS),
            max(COARSE_POOL, pool),
            generation,
            scopes,
        )
    keyword: list[tuple[int, float]] = []
    if preset.keyword_weight > 0:
        if preset.keyword_common_share is not None and preset.keyword_operator == "OR":
            match = common_term_match(db, generation, terms, preset.keyword_common_share)
        else:
            match = fts_match_expression(terms, operator=preset.keyword_operator)
        if match:
            keyword = keyword_candidates(
                db, generation, match, pool, scopes, preset.keyword_rank_cap
            )

    vector: list[tuple[int, float]] = []
    passages: dict[int, list[tuple[int, int, float]]] = {}
    vector_weight = preset.vector_weight
    keyword_weight = preset.keyword_weight
    if pending_vector is not None:
        vector, passages = pending_vector.result()
        vector = vector[:pool]
    elif keyword_weight == 0:
        # Vector-only preset without vectors (keyword-only index): fall back to keywords.
        match = fts_match_expression(query_terms(query)[:QUERY_TERMS], operator="OR")
        keyword = keyword_candidates(db, generation, match, pool, scopes) if match else []
        keyword_weight = 1.0
    if not vector and keyword_weight > 0:
        # Degraded (no embeddings): keyword scores alone must be able to pass the floor.
        vector_weight, keyword_weight = 0.0, 1.0

    merged = merge_hybrid(vector, keyword, preset)
    cands = _load(db, list(merged))
    if admits is not None:  # a SearchFilter's sources/origins (the scopes are applied above)
        cands = {i: c for i, c in cands.items() if admits(c.source, c.origin)}
        merged = {i: s for i, s in merged.items() if i in cands}
    v_best = max((v for _, v in vector), default=0.0)
    v_worst = min((v for _, v in vector), default=0.0)
    for cid, (v, kw) in merged.items():
        c = cands.get(cid)
        if c is None:
            continue  # deleted by a write between the vector and the keyword reads
        c.vector_score, c.keyword_score = v, kw
        span = (v_best - v_worst) or 1.0
        c.passages = tuple((a, b, (x - v_worst) / span) for a, b, x in passages.get(cid, ()))
        c.score = vector_weight * v + keyword_weight * kw
    ranked = sorted((cands[i] for i in merged if i in cands), key=lambda c: (-c.score, c.id))
    if preset.require_evidence and relevance_floor is not None:
        raw = dict(vector)
        ranked = [
            c for c in ranked if c.keyword_score > 0 or raw.get(c.id, -1.0) >= relevance_floor
        ]

    if preset.line_rerank_weight > 0 or preset.snippet == "focused":
        head = ranked[: preset.rerank_pool]
        rerank_by_lines(
            head,
            terms,
            preset.line_rerank_weight,
            preset.line_semantic_weight,
            preset.line_follow_weight,
        )
        ranked = head + ranked[preset.rerank_pool :]
    # Keep the reported score in [0, 1] whatever the weights add up to.
    scale = vector_weight + keyword_weight + preset.line_rerank_weight
    for c in ranked:
        c.score /= scale or 1.0
        c.score *= temporal_multiplier(c.day, now, preset)
        if preset.importance_weight and c.importance:
            c.score *= 1 + preset.importance_weight * (c.importance - 3)
        c.score = min(1.0, c.score)
    ranked.sort(key=lambda c: (-c.score, c.id))
    ranked = [c for c in ranked if c.score >= floor]
    if preset.mmr_lambda is not None:
        ranked = mmr_select(ranked[: max(3 * k, 20)], k, preset.mmr_lambda)
    if (
        preset.vector_slots
        and vector
        and query_coverage([cands[i].text for i, _ in keyword if i in cands], terms)
        < preset.vector_slots_below
    ):
        # (A min_score the caller asked for holds for them too; the preset's own does not.)
        eligible = (
            cands if min_score is None else {i: c for i, c in cands.items() if c.score >= floor}
        )
        ranked = keep_vector_best(ranked, k, vector, eligible, preset.vector_slots, relevance_floor)
    ranked = ranked[:k]
    if preset.snippet == "focused" and (unscored := [c for c in ranked if not c.line_scores]):
        # A chunk kept for its meaning may come from beyond the rerank pool: pick its lines too.
        rerank_by_lines(
            unscored, terms, 0.0, preset.line_semantic_weight, preset.line_follow_weight
        )

    hits = []
    for c in ranked:
        snippet = (
            focused_snippet(c, preset.snippet_chars)
            if preset.snippet == "focused"
            else head_snippet(c.text, preset.snippet_chars)
        )
        hits.append(
            SearchHit(c.path, c.start_line, c.end_line, c.score, snippet, c.source, c.origin, c.day)
        )
    return hits
