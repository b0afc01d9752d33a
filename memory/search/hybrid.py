"""memory_search: hybrid keyword + vector retrieval over one index generation.

The pipeline, each step a small function driven by a `SearchPreset`:
keyword candidates (FTS5 bm25) + vector candidates (memory/search/candidates.py) →
`merge_hybrid` → the keyword side weighed by how much of the question it holds
(`chunk_coverages`) → `rerank_by_lines` → `temporal_multiplier` / importance → min-score
filter → `mmr_select` (memory/search/ranking.py) → snippets (memory/search/snippets.py). What it
reads comes through `SearchQueries` (memory/store/search_queries.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np

from memory.search.candidates import (
    KeywordMatch,
    common_term_match,
    keyword_candidates,
    load_candidates,
)
from memory.search.feedback import feedback_terms
from memory.search.presets import SearchPreset
from memory.search.ranking import (
    Candidate,
    calibrate_keyword_hits,
    chunk_coverages,
    keep_vector_best,
    line_stems_of,
    merge_hybrid,
    mmr_select,
    project_multiplier,
    query_coverage,
    rerank_by_lines,
    temporal_multiplier,
    tied_slots,
    weak_keyword_hits,
    weigh_assistant_turns,
)
from memory.search.schedule import embeds_first, start_vector_side
from memory.search.snippets import focused_snippet, head_snippet
from memory.store.db import Database
from memory.store.search_queries import (
    SearchQueries,
    is_database_error,
    search_failure,
    search_queries,
)
from memory.text import (
    fts_match_expression,
    head_tokens,
    openclaw_query_terms,
    query_terms,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from memory.search.vectors import VectorStore

COARSE_POOL = 100  # chunks the centroid index hands to passage re-scoring
# A query pasted with a whole page must still answer at once. The local model embeds ≈1.3 ms a
# CJK token (a 10,000-character Chinese query took 14 s): it sees the query's first 256 tokens
# (≈256 CJK characters, ≈1,000 of English; ≈0.25 s). The keyword side uses the first 2,000
# characters' first 64 distinct terms (each term is counted in the index and scored per line).
QUERY_CHARS = 2000
QUERY_EMBED_TOKENS = 256
QUERY_TERMS = 64


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
    project: str | None = None  # its project tag (memory/project_tags.py), if any

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
    project: str | None = None,
    multicore_query: bool = False,
) -> list[SearchHit]:
    """`memory_search` over one generation, best hits first. `project`: the active project,
    whose tagged hits the preset's `project_boost` lifts (None: no project preferred).
    `multicore_query`: `embed_query` can use several cores (memory/search/schedule.py).

    Raises `IndexCorruptError` when SQLite finds the index damaged and `DatabaseError` for any
    other database failure: a broken index never looks like an empty answer.
    """
    try:
        return _run_search(
            search_queries(db),
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
            project=project,
            multicore_query=multicore_query,
        )
    except Exception as exc:
        if is_database_error(exc):
            raise search_failure(db, exc) from exc
        raise


def _run_search(
    queries: SearchQueries,
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
    project: str | None = None,
    multicore_query: bool = False,
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
        # Embedded first on both cores, or beside the keyword side (memory/search/schedule.py).
        first = embeds_first(terms, multicore_query, preset.keyword_weight > 0)
        pending_vector = start_vector_side(
            store,
            embed_query,
            head_tokens(query, QUERY_EMBED_TOKENS),
            max(COARSE_POOL, pool),
            generation,
            scopes,
            first=first,
        )
    keyword: list[tuple[int, float]] = []
    if preset.keyword_weight > 0:
        match = _keyword_match(queries, generation, preset, terms)
        if match:
            keyword = keyword_candidates(
                queries, generation, match, pool, scopes, preset.keyword_rank_cap
            )

    early: dict[int, Candidate] = {}
    if pending_vector is not None and keyword and not pending_vector.done():
        # While the vector side runs (the model, numpy and SQLite release the GIL): the keyword
        # hits' rows and their lines' stems, which the ranking below reads — off its path.
        early = load_candidates(queries, [i for i, _ in keyword])
        line_stems_of([c.text for c in early.values()], terms)
    vector: list[tuple[int, float]] = []
    passages: dict[int, list[tuple[int, int, float]]] = {}
    vector_weight = preset.vector_weight
    keyword_weight = preset.keyword_weight
    if pending_vector is not None:
        vector, passages = pending_vector.result()
        vector = vector[:pool]
        if preset.feedback_terms and keyword_weight > 0 and relevance_floor is not None:
            keyword = _with_feedback(
                queries, generation, preset, terms, vector, relevance_floor, pool, scopes, keyword
            )
    elif keyword_weight == 0:
        # Vector-only preset without vectors (keyword-only index): fall back to keywords.
        match = fts_match_expression(query_terms(query)[:QUERY_TERMS], operator="OR")
        keyword = keyword_candidates(queries, generation, match, pool, scopes) if match else []
        keyword_weight = 1.0
    if not vector and keyword_weight > 0:
        # Degraded (no embeddings): keyword scores alone must be able to pass the floor.
        vector_weight, keyword_weight = 0.0, 1.0

    if preset.assistant_turn_penalty and vector:
        if unread := [i for i, _ in vector if i not in early]:
            early.update(load_candidates(queries, unread))
        vector = weigh_assistant_turns(vector, passages, early, preset.assistant_turn_penalty)
    merged = merge_hybrid(vector, keyword, preset)
    unread = [i for i in merged if i not in early]
    cands = load_candidates(queries, unread) if unread else {}
    cands.update((i, early[i]) for i in merged if i in early)
    if admits is not None:  # a SearchFilter's sources/origins (the scopes are applied above)
        cands = {i: c for i, c in cands.items() if admits(c.source, c.origin)}
        merged = {i: s for i, s in merged.items() if i in cands}
    rerank_weight = preset.line_rerank_weight
    hit_power = 0.0  # preset.keyword_hit_coverage_power, when its gate lets it act
    share_of: dict[int, float] = {}  # each keyword hit's share of the question (its words held)
    if (
        (
            preset.keyword_coverage_power
            or preset.keyword_hit_coverage_power
            or preset.keyword_evidence_share
        )
        and vector
        and keyword
    ):
        held = [i for i, _ in keyword if i in cands]
        shares = chunk_coverages([cands[i].text for i in held], terms)
        share_of = dict(zip(held, shares, strict=True))
        coverage = max(shares, default=0.0)
        if coverage < preset.keyword_hit_coverage_below:
            hit_power = preset.keyword_hit_coverage_power
        if hit_power:
            merged = calibrate_keyword_hits(merged, share_of, hit_power)
        if preset.keyword_coverage_power and coverage < preset.keyword_coverage_below:
            calibration = coverage**preset.keyword_coverage_power
            keyword_weight *= calibration
            rerank_weight *= calibration
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
    near_misses: set[int] = set()  # admitted only beside an answer (preset.evidence_slack)
    slot_floor = relevance_floor
    if preset.require_evidence and relevance_floor is not None:
        raw = dict(vector)
        floor_v = relevance_floor - preset.vector_floor_margin  # meaning alone is evidence
        weak = weak_keyword_hits(ranked, raw, share_of, floor_v, preset)
        slot_floor = floor_v
        strict = [
            c
            for c in ranked
            if (c.keyword_score > 0 and c.id not in weak) or raw.get(c.id, -1.0) >= floor_v
        ]
        if strict and preset.evidence_slack > 0:
            slot_floor = floor_v - preset.evidence_slack
            near_misses = {
                c.id
                for c in ranked
                if (c.keyword_score <= 0 or c.id in weak)
                and slot_floor <= raw.get(c.id, -1.0) < floor_v
            }
            admitted = near_misses | {c.id for c in strict}
            ranked = [c for c in ranked if c.id in admitted]
        else:
            ranked = strict

    if preset.line_rerank_weight > 0 or preset.snippet == "focused":
        head = ranked[: preset.rerank_pool]
        rerank_by_lines(
            head,
            terms,
            rerank_weight,
            preset.line_semantic_weight,
            preset.line_follow_weight,
            hit_power if preset.keyword_hit_weighs_lines else 0.0,
        )
        ranked = head + ranked[preset.rerank_pool :]
    # Keep the reported score in [0, 1] whatever the weights add up to.
    scale = vector_weight + keyword_weight + rerank_weight
    lifted: dict[int, float] = {}  # scores before the cap, when a project is active
    for c in ranked:
        c.score /= scale or 1.0
        c.score *= temporal_multiplier(c.day, now, preset)
        if preset.importance_weight and c.importance:
            c.score *= 1 + preset.importance_weight * (c.importance - 3)
        if project is not None:
            c.score *= project_multiplier(c.project, project, preset)
            lifted[c.id] = c.score
        c.score = min(1.0, c.score)
    if project is None:
        ranked.sort(key=lambda c: (-c.score, c.id))
    else:  # hits capped at 1.0 keep their order, and a tie goes to the active project's hit
        ranked.sort(key=lambda c: (-c.score, -lifted[c.id], c.project != project, c.id))
    ranked = [c for c in ranked if c.score >= floor]
    if preset.mmr_lambda is not None:
        ranked = mmr_select(
            ranked[: max(3 * k, 20)],
            k,
            preset.mmr_lambda,
            preset.mmr_same_source,
            preset.mmr_same_day,
        )
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
        slots = tied_slots(vector, preset.vector_slots, preset.vector_slot_ties, k - 1)
        ranked = keep_vector_best(ranked, k, vector, eligible, slots, slot_floor)
    ranked = ranked[:k]
    if near_misses and all(c.id in near_misses for c in ranked):
        ranked = []  # near misses alone are no answer: what made one fell below min_score
    if preset.snippet == "focused" and (unscored := [c for c in ranked if not c.line_scores]):
        # A chunk kept for its meaning may come from beyond the rerank pool: pick its lines too.
        rerank_by_lines(
            unscored, terms, 0.0, preset.line_semantic_weight, preset.line_follow_weight
        )

    hits = []
    for c in ranked:
        snippet = (
            focused_snippet(c, preset.snippet_chars, preset.snippet_line_share)
            if preset.snippet == "focused"
            else head_snippet(c.text, preset.snippet_chars)
        )
        hits.append(
            SearchHit(
                c.path,
                c.start_line,
                c.end_line,
                c.score,
                snippet,
                c.source,
                c.origin,
                c.day,
                c.project,
            )
        )
    return hits


def _keyword_match(
    queries: SearchQueries,
    generation: int,
    preset: SearchPreset,
    terms: list[str],
    operator: str | None = None,
) -> str | KeywordMatch | None:
    """What the keyword side ranks for `terms`: without the very common words when the preset
    leaves them out (`common_term_match`), else all of them joined by `operator` (by default
    the preset's)."""
    if preset.keyword_common_share is not None and preset.keyword_operator == "OR":
        return common_term_match(queries, generation, terms, preset.keyword_common_share)
    return fts_match_expression(terms, operator=operator or preset.keyword_operator)


def _with_feedback(
    queries: SearchQueries,
    generation: int,
    preset: SearchPreset,
    terms: list[str],
    vector: list[tuple[int, float]],
    relevance_floor: float,
    pool: int,
    scopes: list[str],
    keyword: list[tuple[int, float]],
) -> list[tuple[int, float]]:
    """The keyword candidates of `terms` plus the feedback words of the best vector hits at or
    above the relevance floor (`SearchPreset.feedback_terms`); `keyword` when there are none."""
    best_ids = [i for i, sim in vector[: preset.feedback_docs] if sim >= relevance_floor]
    if not best_ids:
        return keyword
    texts = load_candidates(queries, [i for i, _ in vector])
    best = [texts[i].text for i in best_ids if i in texts]
    extra = feedback_terms(best, [c.text for c in texts.values()], terms, preset.feedback_terms)
    if not extra:
        return keyword
    match = _keyword_match(queries, generation, preset, terms + extra, operator="OR")
    if not match:
        return keyword
    return keyword_candidates(queries, generation, match, pool, scopes, preset.keyword_rank_cap)
