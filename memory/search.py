"""memory_search: hybrid keyword + vector retrieval over one index generation.

The pipeline, each step a small function driven by a `SearchPreset`:
keyword candidates (FTS5 bm25) + vector candidates → `merge_hybrid` → `rerank_by_lines`
→ `apply_temporal_decay` / importance → min-score filter → `mmr_select` → snippets.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING

import numpy as np

from memory.db import Database
from memory.presets import SearchPreset
from memory.text import (
    fts_match_expression,
    line_terms,
    openclaw_query_terms,
    query_terms,
    stem_term,
)

if TYPE_CHECKING:
    from memory.embeddings import EmbeddingProvider
    from memory.vectors import VectorStore

SNIPPET_ELLIPSIS = " … "


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
    best_lines: tuple[int, ...] = ()  # indexes of the chunk's lines that match the query best


def keyword_candidates(
    db: Database, generation: int, match: str, limit: int, scopes: list[str]
) -> list[tuple[int, float]]:
    """(chunk_id, bm25 rank) best first; rank is negative, lower is better."""
    marks = ",".join("?" for _ in scopes)
    try:
        rows = db.execute(
            "SELECT f.rowid, bm25(memory_fts) AS r FROM memory_fts f "
            "JOIN memory_chunks c ON c.id = f.rowid "
            f"WHERE memory_fts MATCH ? AND c.generation = ? AND c.scope IN ({marks}) "
            "ORDER BY r LIMIT ?",
            (match, generation, *scopes, limit),
        )
    except Exception:
        return []  # a query FTS5 cannot parse finds nothing by keyword
    return [(int(i), float(r)) for i, r in rows]


def merge_hybrid(
    vector: list[tuple[int, float]], keyword: list[tuple[int, float]], preset: SearchPreset
) -> dict[int, tuple[float, float]]:
    """chunk_id → (vector score, keyword score), each in [0, 1], per the preset's fusion."""
    out: dict[int, tuple[float, float]] = {}
    if preset.fusion == "weighted":
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


def _line_weights(lines_terms: list[list[set[str]]], terms: list[str]) -> dict[str, float]:
    """IDF of each query term over the candidate chunks' lines (rare terms weigh more)."""
    n = sum(len(lt) for lt in lines_terms) or 1
    weights: dict[str, float] = {}
    for t in terms:
        df = sum(1 for lt in lines_terms for line in lt if t in line)
        weights[t] = math.log(1 + (n - df + 0.5) / (df + 0.5)) if df else 0.0
    return weights


def rerank_by_lines(candidates: list[_Candidate], terms: list[str], weight: float) -> None:
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
        best = int(np.argmax(scores)) if scores else 0
        # A pair of neighbouring lines (a question and its answer) may cover more together.
        pair_best, pair_idx = scores[best], (best,)
        for j in range(len(lts) - 1):
            both = sum(w for t, w in weights.items() if t in lts[j] or t in lts[j + 1])
            if both > pair_best + 1e-9:
                pair_best, pair_idx = both, (j, j + 1)
        cand.best_lines = pair_idx if pair_best > 0 else ()
        if total > 0 and weight:
            coverage = 0.5 * scores[best] / total + 0.5 * pair_best / total
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


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def mmr_select(candidates: list[_Candidate], k: int, lam: float) -> list[_Candidate]:
    """Maximal marginal relevance on word sets: relevant, and not repeating each other."""
    pool = list(candidates)
    sets = {c.id: line_terms(c.text) for c in pool}
    chosen: list[_Candidate] = []
    top = max((c.score for c in pool), default=1.0) or 1.0
    while pool and len(chosen) < k:
        best = max(
            pool,
            key=lambda c: (
                lam * c.score / top
                - (1 - lam) * max((_jaccard(sets[c.id], sets[s.id]) for s in chosen), default=0.0)
            ),
        )
        chosen.append(best)
        pool.remove(best)
    return chosen


def head_snippet(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def focused_snippet(cand: _Candidate, limit: int) -> str:
    """Up to `limit` characters of whole lines around the chunk's best-matching lines."""
    lines = cand.text.split("\n")
    if not cand.best_lines:
        return head_snippet(cand.text, limit)
    lo, hi = min(cand.best_lines), max(cand.best_lines)
    size = sum(len(line) + 1 for line in lines[lo : hi + 1]) - 1
    if size > limit:
        return head_snippet("\n".join(lines[lo : hi + 1]), limit)
    # Grow the window outwards, one line at a time, preferring the line before (context).
    while True:
        grew = False
        for j in (lo - 1, hi + 1):
            if 0 <= j < len(lines) and lines[j].strip():
                extra = len(lines[j]) + 1
                if size + extra <= limit:
                    size += extra
                    lo, hi = min(lo, j), max(hi, j)
                    grew = True
            elif 0 <= j < len(lines):
                lo, hi = min(lo, j), max(hi, j)
                size += 1
                grew = True
        if not grew:
            break
    return "\n".join(lines[lo : hi + 1]).strip("\n")


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
    provider: EmbeddingProvider | None,
    store: VectorStore | None,
    max_results: int | None,
    min_score: float | None,
    now: datetime,
    scopes: list[str],
) -> list[SearchHit]:
    query = re.sub(r"\s+", " ", query).strip()
    if not query:
        return []
    k = max_results or preset.max_results
    floor = preset.min_score if min_score is None else min_score
    pool = max(preset.candidate_multiplier * k, preset.min_candidates)

    if preset.keyword_terms == "openclaw":
        terms = openclaw_query_terms(query)
    else:
        terms = query_terms(query) or query_terms(query, drop_stopwords=False)
    keyword: list[tuple[int, float]] = []
    if preset.keyword_weight > 0:
        match = fts_match_expression(terms, operator=preset.keyword_operator)
        if match:
            keyword = keyword_candidates(db, generation, match, pool, scopes)

    vector: list[tuple[int, float]] = []
    vector_weight = preset.vector_weight
    keyword_weight = preset.keyword_weight
    if provider is not None and store is not None and vector_weight > 0:
        qvec = provider.embed_query(query)
        vector = store.search(qvec, pool, generation, scopes)
    elif keyword_weight == 0:
        # Vector-only preset without vectors (keyword-only index): fall back to keywords.
        match = fts_match_expression(query_terms(query), operator="OR")
        keyword = keyword_candidates(db, generation, match, pool, scopes) if match else []
        keyword_weight = 1.0
    if not vector and keyword_weight > 0:
        # Degraded (no embeddings): keyword scores alone must be able to pass the floor.
        vector_weight, keyword_weight = 0.0, 1.0

    merged = merge_hybrid(vector, keyword, preset)
    cands = _load(db, list(merged))
    for cid, (v, kw) in merged.items():
        c = cands[cid]
        c.vector_score, c.keyword_score = v, kw
        c.score = vector_weight * v + keyword_weight * kw
    ranked = sorted(cands.values(), key=lambda c: (-c.score, c.id))

    if preset.line_rerank_weight > 0 or preset.snippet == "focused":
        head = ranked[: preset.rerank_pool]
        rerank_by_lines(head, terms, preset.line_rerank_weight)
        ranked = head + ranked[preset.rerank_pool :]
    # Keep the reported score in [0, 1] whatever the weights add up to.
    scale = vector_weight + keyword_weight + preset.line_rerank_weight
    for c in ranked:
        c.score /= scale or 1.0
        c.score *= temporal_multiplier(c.day, now, preset)
        if preset.importance_weight and c.importance:
            c.score *= 1 + preset.importance_weight * (c.importance - 3)
    ranked.sort(key=lambda c: (-c.score, c.id))
    ranked = [c for c in ranked if c.score >= floor]
    if preset.mmr_lambda is not None:
        ranked = mmr_select(ranked[: max(3 * k, 20)], k, preset.mmr_lambda)
    ranked = ranked[:k]

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
