"""Search behaviour as named, declarative presets.

A preset is data, not code: every knob of `memory_search` lives here, so comparing two
behaviours side by side (bench/retrieval.py) is comparing two values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal


@dataclass(frozen=True)
class SearchPreset:
    name: str
    description: str
    vector_weight: float = 0.7
    keyword_weight: float = 0.3
    candidate_multiplier: int = 4  # candidates from each side = multiplier × max_results
    min_candidates: int = 0  # …but at least this many
    max_results: int = 6
    min_score: float = 0.35
    # Keyword side: 'openclaw' = every [\p{L}\p{N}_]+ run quoted; 'pinch' = stopwords dropped,
    # CJK split into bigrams. Joined with AND or OR.
    keyword_terms: Literal["openclaw", "pinch"] = "openclaw"
    keyword_operator: Literal["AND", "OR"] = "AND"
    # OR-joined keywords only: a term in more than this share of the generation's chunks (and in
    # more than search.COMMON_TERM_FLOOR of them) is left out of the FTS5 query, as long as a
    # rarer term is left; it still counts when lines are scored. FTS5 ranks every row any term
    # matches, so one very common word makes the keyword search rank a large part of the index
    # for a term bm25 weighs at almost nothing.
    keyword_common_share: float | None = None
    # FTS5 computes bm25 for every row a query matches: rank only the newest this many matching
    # chunks (None: all). Only a query whose words are in thousands of chunks reaches it.
    keyword_rank_cap: int | None = None
    # 'weighted': w_v·cosine + w_k·(−r)/(1−r) on FTS5's bm25 rank r (OpenClaw);
    # 'normalized': each side divided by its best candidate, then weighted;
    # 'rrf': reciprocal rank fusion, 1 / (60 + rank) per side (scaled so rank 1 scores 1).
    fusion: Literal["weighted", "normalized", "rrf"] = "weighted"
    # The keyword side (fusion weight and line reranking) × c ** power, c = the share of the
    # question's IDF-weighted words the best keyword candidate holds (`best_chunk_coverage`):
    # keywords that explain little of the question say little. 0: no calibration.
    keyword_coverage_power: float = 0.0
    # …only when c is below this (1.0: always): a question its keywords mostly explain keeps
    # the full keyword side.
    keyword_coverage_below: float = 1.0
    # Each keyword hit's keyword score × (the share of the question's IDF-weighted words it
    # holds) ** power (`calibrate_keyword_hits`), and so is its line-rerank bonus
    # (`rerank_by_lines`): filler sharing one incidental word with the question weighs little
    # beside a chunk the vectors found. 0: off.
    keyword_hit_coverage_power: float = 0.0
    # …only when the best keyword hit holds less than this share of the question (1.0: always).
    keyword_hit_coverage_below: float = 1.0
    # …and so is each hit's line-rerank bonus (False: its keyword score alone is weighed; a hit
    # whose lines hold part of the question keeps that bonus).
    keyword_hit_weighs_lines: bool = True
    # Pseudo-relevance feedback: this many words of the best `feedback_docs` vector hits at or
    # above the embedding model's relevance floor (memory/search/feedback.py) are added to the
    # keyword query (candidates and bm25 only; lines are still scored by the question's words).
    feedback_terms: int = 0
    feedback_docs: int = 3
    # Reranking by how well the best lines of a chunk cover the query's (rarer) terms.
    line_rerank_weight: float = 0.0
    rerank_pool: int = 40
    line_semantic_weight: float = 0.5  # passage similarity vs query words when picking lines
    line_follow_weight: float = 0.0  # share of a line's word score passed to the line after it
    decay_half_life_days: float | None = None
    decay_floor: float = 0.0  # decayed score = score × (floor + (1 − floor) × 0.5^(age/half_life))
    importance_weight: float = 0.0  # score × (1 + weight × (importance − 3)) for marked chunks
    # score × (1 + boost) for chunks tagged with the active project (memory/project_tags.py);
    # untagged chunks and other projects' keep their score, and a tie goes to the active one.
    # No active project, or no tags: no change at all.
    project_boost: float = 0.0
    mmr_lambda: float | None = None
    # MMR: a hit from the same file as one already chosen counts as at least this redundant
    # (0: word overlap only).
    mmr_same_source: float = 0.0
    # …and one of the same date as one already chosen (whatever file it is in) at least this.
    mmr_same_day: float = 0.0
    snippet: Literal["head", "focused"] = "head"
    snippet_chars: int = 700
    # Focused snippets: lines are picked by score only down to this share of the best line's,
    # then their neighbours fill what is left (0: any line with a positive score).
    snippet_line_share: float = 0.0
    # Drop hits with no query word in them whose vector similarity is below the embedding
    # model's relevance floor, so "nothing relevant" can be an empty answer.
    require_evidence: bool = False
    # …but once the search has an answer (a hit with a query word, or one at or above the
    # floor), a hit this far below the floor is admitted beside it, and may take a vector slot:
    # the floor decides whether anything at all is relevant, not which of the near misses
    # accompany an answer. Alone, such hits are still no answer (0: the floor is strict).
    evidence_slack: float = 0.0
    # Meaning alone is evidence down to this far below the embedding model's relevance floor.
    vector_floor_margin: float = 0.0
    # A keyword hit holding less than this (IDF-weighted) share of the question's words is
    # evidence only as far as its meaning is (at or above the floor less the margin): one
    # incidental word shared with a question about something else is no answer, and such a
    # hit is dropped. 0: every keyword hit is evidence.
    keyword_evidence_share: float = 0.0
    # A passage that is one of the assistant's own turns (in a transcript or a session note)
    # counts this much less by meaning: at equal meaning what the owner said comes first, and
    # an answer of general advice needs a little more meaning to be evidence. 0: off.
    assistant_turn_penalty: float = 0.0
    # The best this many chunks by meaning alone (best passage cosine at or above the embedding
    # model's relevance floor) always make the results, in place of the lowest-ranked hybrid
    # hits. A question asked in other words than the note shares no keyword with it, and
    # filler sharing one incidental word with the question would otherwise outrank it.
    vector_slots: int = 0
    # …only when the keyword candidates hold less than this (IDF-weighted) share of the query's
    # words: a question its keywords explain is left to the hybrid ranking (`query_coverage`).
    vector_slots_below: float = 0.5
    # …and, past those, every further chunk whose best passage is within this of the best
    # chunk's cosine (up to `max_results` − 1 slots in all): near ties by meaning are equally
    # likely answers, and an incidental keyword should not be what picks among them. 0: off.
    # Measured, not adopted (bench/RESULTS.md, 2026-12-03 21:30): at 0.005 the survival bench's
    # reworded questions over four conversations 167 → 170 of 200, within its noise and on that
    # one data set alone (LoCoMo −1, MADial and the reworded multi-session set unchanged).
    vector_slot_ties: float = 0.0

    def with_overrides(self, **changes: object) -> SearchPreset:
        return replace(self, **changes)  # type: ignore[arg-type]


OPENCLAW = SearchPreset(
    name="openclaw",
    description="OpenClaw's April-2026 reference: 0.7/0.3, AND-joined keywords, min 0.35, ×4.",
)

KEYWORD = SearchPreset(
    name="keyword",
    description="Keyword only (BM25, OR-joined, stopwords dropped, CJK bigrams).",
    vector_weight=0.0,
    keyword_weight=1.0,
    keyword_terms="pinch",
    keyword_operator="OR",
    keyword_common_share=0.05,
    keyword_rank_cap=3000,
    fusion="normalized",
    min_score=0.0,
    snippet="focused",
    require_evidence=True,
)

VECTOR = SearchPreset(
    name="vector",
    description="Vector only (cosine similarity of the embeddings).",
    vector_weight=1.0,
    keyword_weight=0.0,
    fusion="weighted",
    min_score=0.0,
)

PINCH = SearchPreset(
    name="pinch",
    description=(
        "Pinch's default: hybrid with OR-joined keywords, per-side normalisation, line-level "
        "reranking, focused snippets, gentle decay for dated logs, importance, MMR."
    ),
    vector_weight=0.5,
    keyword_weight=0.5,
    candidate_multiplier=8,
    min_candidates=40,
    keyword_terms="pinch",
    keyword_operator="OR",
    keyword_common_share=0.05,
    keyword_rank_cap=3000,
    fusion="normalized",
    line_rerank_weight=0.5,
    min_score=0.2,
    # Gentle: a year-old note keeps 90 % of its score, so recency breaks ties without burying
    # the past (LoCoMo dev: half-life 90 d / floor 0.7 cost 1.2 points of located_any@6).
    decay_half_life_days=365.0,
    decay_floor=0.8,
    importance_weight=0.1,
    mmr_lambda=0.8,
    snippet="focused",
    # LoCoMo dev, evidence turn inside the top-6 snippets (located anywhere in the hits: 92.8 %):
    # 700 chars 85.5 %, 800 88.4 %, 900 89.6 %, 1,000 90.8 % (5.4k chars for 6 hits, was 3.8k).
    snippet_chars=1000,
    line_follow_weight=0.5,
    require_evidence=True,
    # Slots for the best chunks by meaning, when the keywords explain less than half of the
    # question (2026-12-01: one slot, reworded questions 27 → 37 of 50). Issue 20, third round
    # (2026-12-02, bench/RESULTS.md h-recall3): three slots, near misses of the relevance floor
    # beside an answer (`evidence_slack`), and — when the best keyword hit holds less than 35 %
    # of the question — each keyword hit weighed by the share it holds, squared
    # (`keyword_hit_coverage_power`): survival paraphrases 40 → 44 of 50 on the kept index
    # (the vectors alone: 44; the bench itself 42 → 45), Active Memory 36 → 38; the reworded
    # multi-session set (bench/reworded_sessions.py) located_all@10 42 → 46 of 50, MRR
    # 0.57 → 0.77; LoCoMo (2 conversations, 302 q.) within one question. Slots and slack alone
    # cost that set 3 questions; the weighing ungated cost LoCoMo 6-7.
    vector_slots=3,
    evidence_slack=0.02,
    # Issue 20, fifth round (bench/RESULTS.md, h-am2): the weighing squared, line bonus too,
    # pushed LoCoMo evidence holding part of the question (a question naming a year the
    # evidence says in other words: "summer 2021" / "last summer") down to filler level: −6
    # questions at located_any@6 of 997. Its keyword score alone, × its share (power 1):
    # LoCoMo 924 / 925 (rule off; the one is a vector slot's), survival 44 → 45 of 50 on the
    # kept index, the reworded set's located_all@10 46 kept.
    keyword_hit_coverage_power=1.0,
    keyword_hit_coverage_below=0.35,
    keyword_hit_weighs_lines=False,
    # Issue 20, sixth round (bench/RESULTS.md, 2026-12-04): 130 of the survival bench's 210
    # questions about nothing in memory were answered only by keyword hits sharing an
    # incidental word with them (median share of the question 0.15, median cosine 0.772).
    # A keyword hit holding less than 35 % of the question now counts only as far as its
    # meaning does, and meaning alone counts from 0.02 below the model's floor: questions
    # about nothing answered with nothing 61 → 156 of 210, reworded questions 43 → 44-45 of 50
    # (four conversations 170 → 176-177; Active Memory 159 → 166-167), the reworded
    # multi-session set located_any@6 42 → 43 of 50, LoCoMo +1 to +2 of 997, MADial en any@5
    # −1 of 80 (its noise: 2), zh unchanged. Search at 100k unchanged.
    keyword_evidence_share=0.35,
    vector_floor_margin=0.02,
    # …and a passage holding only the assistant's turns 0.02 less by meaning than the owner's
    # words (2026-12-04, same entry): replies of general advice sat in near ties with the
    # owner's facts. Reworded questions 176 → 180 of 200 over four conversations (46 on the
    # bench's own; ranked first 108 → 104), Active Memory 166 → 166, the reworded multi-session
    # set located_any@6 43 → 44 of 50; LoCoMo and MADial have no assistant turns: unchanged.
    assistant_turn_penalty=0.02,
    # Issue 20 (2026-12-02, bench/RESULTS.md): when the best keyword hit holds less than a
    # quarter of the question's (IDF-weighted) words, the keyword side × √(that share). MADial
    # dev zh hit@1 / any@5 10.0 / 47.5 → 21.2 / 51.2 % (vectors alone 20.0 / 47.5), en any@5
    # 53.8 → 60.0 %; reworded questions 38 → 39 of 50; LoCoMo dev within one question on every
    # figure. Ungated it cost LoCoMo 4-7 questions of 997 (located_any@10 −0.7 points).
    keyword_coverage_power=0.5,
    keyword_coverage_below=0.25,
    # bench/projects.py (three projects' notes worded alike, 60 questions EN+ZH; 2026-12-01):
    # top-1 for the active project's note 33 % without it; boost 0.2 → 85 %, 0.3 → 95 % (USE
    # 98 %), 1.0 → 100 %; questions about untagged notes with a project active 100 → 93 % at
    # 0.3, 80 % at 1.0. The smallest value meeting 90 % on both models.
    project_boost=0.3,
)

PRESETS: dict[str, SearchPreset] = {p.name: p for p in (PINCH, OPENCLAW, KEYWORD, VECTOR)}


def get_preset(name: str) -> SearchPreset:
    try:
        return PRESETS[name]
    except KeyError:
        known = ", ".join(sorted(PRESETS))
        raise ValueError(f"Unknown search preset {name!r}; choose one of: {known}.") from None
