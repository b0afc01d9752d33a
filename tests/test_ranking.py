"""The pure ranking steps of memory_search, one at a time: passage splitting, hybrid merge, line
rerank, temporal decay, MMR and focused snippets. No database, no model."""

from __future__ import annotations

import itertools
from datetime import datetime

import pytest

from memory.index.chunking import Chunk, hash_text, split_units
from memory.search.presets import get_preset
from memory.search.ranking import (
    Candidate,
    keep_vector_best,
    merge_hybrid,
    mmr_select,
    query_coverage,
    rerank_by_lines,
    stems_by_line,
    temporal_multiplier,
    text_stems,
    tied_slots,
)
from memory.search.snippets import focused_snippet, head_snippet
from memory.text import line_terms, query_terms, stem_term

PINCH = get_preset("pinch")


def chunk(text: str, start_line: int = 1) -> Chunk:
    lines = text.split("\n")
    return Chunk(start_line, start_line + len(lines) - 1, text, hash_text(text), None)


def cand(cid: int, text: str, score: float = 0.0, start_line: int = 1) -> Candidate:
    end = start_line + len(text.split("\n")) - 1
    return Candidate(
        cid, f"f{cid}.md", "memory", "owner", start_line, end, text, None, None, 0.0, 0.0, score
    )


# ---- passage splitting ----------------------------------------------------------------------


def test_each_list_item_is_its_own_passage() -> None:
    units = split_units(chunk("- Anna likes tea.\n- Ben likes coffee.\n- Chloe likes juice."))

    assert [(u.start_line, u.end_line, u.text) for u in units] == [
        (1, 1, "- Anna likes tea."),
        (2, 2, "- Ben likes coffee."),
        (3, 3, "- Chloe likes juice."),
    ]


def test_a_heading_goes_with_the_paragraph_after_it() -> None:
    units = split_units(chunk("## Pets\nMy cat is called Tom.\n\n## Food\nI like ramen.", 10))

    assert [(u.start_line, u.end_line) for u in units] == [(10, 11), (13, 14)]
    assert units[0].text == "## Pets\nMy cat is called Tom."


def test_a_long_paragraph_is_cut_at_lines_into_bounded_passages() -> None:
    line = "The observatory telescope needs recalibration before the eclipse."  # 65 chars
    units = split_units(chunk("\n".join([line] * 20)))

    assert len(units) > 1
    assert all(len(u.text) <= 600 for u in units)
    assert units[0].start_line == 1 and units[-1].end_line == 20
    # Passages tile the paragraph: each starts on the line after the previous one ends.
    assert all(b.start_line == a.end_line + 1 for a, b in itertools.pairwise(units))


def test_passage_hashes_are_the_hash_of_their_text() -> None:
    (unit,) = split_units(chunk("Just one line."))

    assert unit.hash == hash_text("Just one line.")


# ---- hybrid merge ---------------------------------------------------------------------------


def test_normalized_fusion_scales_each_side_to_its_best() -> None:
    merged = merge_hybrid([(1, 0.9), (2, 0.8), (3, 0.7)], [(2, -4.0), (4, -2.0)], PINCH)

    assert merged[1] == (1.0, 0.0)  # best vector, no keyword match
    assert merged[2] == pytest.approx((0.5, 1.0))
    assert merged[3] == (0.0, 0.0)  # the worst vector candidate maps to 0
    assert merged[4] == pytest.approx((0.0, 0.5))


def test_weighted_fusion_keeps_raw_cosines_and_maps_bm25_into_0_1() -> None:
    merged = merge_hybrid([(1, 0.6), (2, -0.2)], [(1, -3.0)], get_preset("openclaw"))

    assert merged[1] == pytest.approx((0.6, 0.75))  # -r / (1 - r) for r = -3
    assert merged[2] == (0.0, 0.0)  # negative cosine clipped


def test_rrf_fusion_gives_rank_one_a_score_of_one() -> None:
    rrf = PINCH.with_overrides(fusion="rrf")

    merged = merge_hybrid([(1, 0.9), (2, 0.1)], [(2, -5.0)], rrf)

    assert merged[1] == (1.0, 0.0)
    assert merged[2] == pytest.approx((61 / 62, 1.0))


def test_equal_vector_scores_all_count_as_best() -> None:
    merged = merge_hybrid([(1, 0.8), (2, 0.8)], [], PINCH)

    assert merged == {1: (1.0, 0.0), 2: (1.0, 0.0)}


def test_no_candidates_merge_to_nothing() -> None:
    assert merge_hybrid([], [], PINCH) == {}


# ---- line rerank ----------------------------------------------------------------------------


def test_a_chunk_whose_one_line_holds_every_query_word_gains_most() -> None:
    together = cand(1, "Nothing here.\nAnna's passport is in the safe.")
    apart = cand(2, "Anna went out.\nThe safe is heavy.\nA passport photo.")

    rerank_by_lines([together, apart], ["anna", "passport", "safe"], weight=1.0)

    assert together.score > apart.score > 0


def test_rare_query_words_weigh_more_than_common_ones() -> None:
    rare = cand(1, "The zeppelin landed.")
    common = cand(2, "Anna said hello.")
    others = [cand(i, f"Anna line {i}.") for i in range(3, 8)]

    rerank_by_lines([rare, common, *others], ["anna", "zeppelin"], weight=1.0)

    assert rare.score > common.score


def test_line_scores_mark_the_matching_line_and_the_line_after_it() -> None:
    c = cand(1, "Intro.\nWhen is the dentist?\nThursday at 3.\nUnrelated.")

    rerank_by_lines([c], ["dentist"], weight=0.0, semantic_weight=0.0, follow_weight=0.5)

    assert c.line_scores == pytest.approx((0.0, 1.0, 0.5, 0.0))
    assert c.score == 0.0  # weight 0: scores lines for snippets, leaves the ranking alone


def test_passage_similarity_lifts_the_lines_of_its_passage() -> None:
    c = cand(1, "Alpha.\nBeta.\nGamma.", start_line=5)
    c.passages = ((6, 7, 0.8),)

    rerank_by_lines([c], ["zzz"], weight=0.0, semantic_weight=0.5)

    assert c.line_scores == pytest.approx((0.0, 0.4, 0.4))


# ---- temporal decay -------------------------------------------------------------------------


def test_decay_halves_toward_the_floor_per_half_life() -> None:
    now = datetime(2026, 1, 1)

    assert temporal_multiplier("2026-01-01", now, PINCH) == 1.0
    assert temporal_multiplier("2025-01-01", now, PINCH) == pytest.approx(0.8 + 0.2 * 0.5)
    assert temporal_multiplier(None, now, PINCH) == 1.0  # evergreen
    assert temporal_multiplier("not-a-date", now, PINCH) == 1.0
    assert temporal_multiplier("2027-01-01", now, PINCH) == 1.0  # future: no boost


# ---- MMR ------------------------------------------------------------------------------------


def test_mmr_skips_a_near_duplicate_for_a_different_chunk() -> None:
    a = cand(1, "anna birthday garden hose gift", 1.0)
    a_copy = cand(2, "anna birthday garden hose gift again", 0.95)
    other = cand(3, "anna birthday party italian restaurant", 0.85)

    chosen = mmr_select([a, a_copy, other], k=2, lam=0.8)
    plain = mmr_select([a, a_copy, other], k=2, lam=1.0)

    assert [c.id for c in plain] == [1, 2]  # by score alone the copy comes second
    assert [c.id for c in chosen] == [1, 3]


def test_mmr_same_source_prefers_evidence_from_another_day() -> None:
    first = cand(1, "caroline went to the pride parade", 1.0)
    same_day = cand(2, "melanie painted a sunset by the lake", 0.95)
    other_day = cand(3, "caroline joined a support group", 0.9)
    same_day.path = first.path  # one day's log, two chunks

    plain = mmr_select([first, same_day, other_day], k=2, lam=0.8)
    spread = mmr_select([first, same_day, other_day], k=2, lam=0.8, same_source=0.5)

    assert [c.id for c in plain] == [1, 2]
    assert [c.id for c in spread] == [1, 3]


def test_mmr_with_lambda_one_is_plain_ranking() -> None:
    cands = [cand(1, "x y", 1.0), cand(2, "x y", 0.9), cand(3, "z", 0.1)]

    assert [c.id for c in mmr_select(cands, k=3, lam=1.0)] == [1, 2, 3]


# ---- the best chunks by meaning --------------------------------------------------------------


def _pool(n: int) -> dict[int, Candidate]:
    return {i: cand(i, f"line {i}", score=1.0 - i / 100) for i in range(1, n + 1)}


def test_the_best_chunk_by_meaning_replaces_the_lowest_ranked_hit() -> None:
    pool = _pool(8)
    ranked = [pool[i] for i in (1, 2, 3, 4)]
    vector = [(8, 0.86), (1, 0.84), (2, 0.80)]  # chunk 8: best by meaning, no keyword in it

    kept = keep_vector_best(ranked, 3, vector, pool, slots=3, relevance_floor=0.82)

    assert [c.id for c in kept] == [1, 2, 8]


def test_a_chunk_below_the_relevance_floor_gets_no_slot() -> None:
    pool = _pool(8)
    ranked = [pool[i] for i in (1, 2, 3)]

    kept = keep_vector_best(ranked, 3, [(8, 0.81)], pool, slots=3, relevance_floor=0.82)

    assert [c.id for c in kept] == [1, 2, 3]


def test_slots_take_only_the_best_few_by_meaning() -> None:
    pool = _pool(9)
    ranked = [pool[i] for i in (1, 2, 3, 4, 5, 6)]
    vector = [(7, 0.9), (8, 0.89), (9, 0.88)]

    kept = keep_vector_best(ranked, 6, vector, pool, slots=2, relevance_floor=None)

    assert [c.id for c in kept] == [1, 2, 3, 4, 7, 8]


def test_a_chunk_the_filter_left_out_never_gets_a_slot() -> None:
    pool = _pool(8)
    admitted = {i: c for i, c in pool.items() if i != 8}  # e.g. another source or origin
    ranked = [pool[i] for i in (1, 2, 3)]

    kept = keep_vector_best(ranked, 3, [(8, 0.95)], admitted, slots=3, relevance_floor=0.82)

    assert [c.id for c in kept] == [1, 2, 3]


def test_hits_already_in_the_results_keep_their_places() -> None:
    pool = _pool(4)
    ranked = [pool[i] for i in (1, 2, 3)]

    kept = keep_vector_best(ranked, 3, [(3, 0.9), (2, 0.88)], pool, slots=3, relevance_floor=0.8)

    assert kept == ranked


def test_near_ties_by_meaning_each_get_a_slot_up_to_one_less_than_the_results() -> None:
    vector = [(7, 0.846), (8, 0.843), (9, 0.843), (10, 0.842), (11, 0.84), (12, 0.80)]

    assert tied_slots(vector, 3, 0.0, 5) == 3  # off
    assert tied_slots(vector, 3, 0.005, 5) == 4  # 0.842 is within 0.005 of 0.846, 0.84 not
    assert tied_slots(vector, 3, 0.01, 5) == 5  # never more than `most`
    assert tied_slots(vector[:2], 3, 0.01, 5) == 3  # never fewer than `slots`
    assert tied_slots([], 3, 0.01, 5) == 3
    pool = _pool(12)
    ranked = [pool[i] for i in (1, 2, 3, 4, 5, 6)]
    kept = keep_vector_best(ranked, 6, vector, pool, tied_slots(vector, 3, 0.005, 5), 0.82)
    assert [c.id for c in kept] == [1, 2, 7, 8, 9, 10]


def test_a_question_whose_words_the_candidates_all_hold_is_fully_covered() -> None:
    texts = ["We booked the cabin for May.", "The cabin wifi is PineHollow."]
    assert query_coverage(texts, ["cabin", "wifi"]) == 1.0


def test_a_question_matched_only_by_its_common_word_is_barely_covered() -> None:
    texts = [f"line {i}: the plan for the week" for i in range(10)]
    coverage = query_coverage(texts, ["plan", "reading", "group", "gather"])
    assert 0 < coverage < 0.3  # the rare words, not found, weigh the most


def test_no_keyword_candidates_cover_nothing() -> None:
    assert query_coverage([], ["reading", "group"]) == 0.0


# ---- snippets -------------------------------------------------------------------------------


def test_focused_snippet_keeps_the_best_lines_and_marks_gaps() -> None:
    lines = [f"Filler line number {i} about nothing in particular." for i in range(12)]
    lines[2] = "The spare key is under the blue flowerpot."
    lines[9] = "The flowerpot was moved to the porch."
    c = cand(1, "\n".join(lines))
    c.line_scores = tuple(1.0 if i in (2, 9) else 0.0 for i in range(12))

    snippet = focused_snippet(c, 200)

    assert len(snippet) <= 200
    assert lines[2] in snippet and lines[9] in snippet
    assert "…" in snippet.split("\n")  # the skipped stretch is shown, never hidden
    assert snippet.index(lines[2]) < snippet.index(lines[9])  # file order


def test_focused_snippet_without_line_scores_is_the_head() -> None:
    c = cand(1, "First line.\nSecond line.")

    assert focused_snippet(c, 700) == "First line.\nSecond line."


def test_a_best_line_longer_than_the_limit_is_cut_with_an_ellipsis() -> None:
    c = cand(1, "short\n" + "x" * 900)
    c.line_scores = (0.0, 1.0)

    snippet = focused_snippet(c, 100)

    assert len(snippet) == 100 and snippet.endswith("…")


def test_head_snippet_cuts_at_the_limit() -> None:
    assert head_snippet("abc", 10) == "abc"
    assert head_snippet("a" * 20, 10) == "a" * 9 + "…"


LINES = [
    "User: My locker code at the Gym is 4471, by the way.",
    "Running RUNS runner ran; the runners' shoes",
    "<!-- trigger: passport renewal --> Renew it before September",
    "<!-- origin: owner --> plain words after a marker",
    "<!-- a comment that does not end on this line",
    "张伟说婚礼的截止日期是下周五",
    "Mixed 中文 and English: 妈妈说搬家",
    "ΟΔΟΣ'Α and ΟΔΟΣ, odos",
    "ΤΟ ΟΔΟΣ'Α",
    "İstanbul trips — İSTANBUL",
    "ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ letters",
    "emoji 🎉 party-planning and parties",
    "",
    "   ",
]
QUESTIONS = [
    "When does my locker code run out?",
    "How do runners renew a passport?",
    "张伟的婚礼截止是什么时候",
    "οδος odos ΟΔΟΣ",
    "istanbul İstanbul trip",
    "full-width abc letters",
    "party planning plain words marker",
]


@pytest.mark.parametrize("question", QUESTIONS)
def test_stems_by_line_are_the_stems_of_each_lines_terms(question: str) -> None:
    stems = list(dict.fromkeys(stem_term(t) for t in query_terms(question, drop_stopwords=False)))
    # also each line's own words, as terms of a question that holds them exactly
    stems += sorted({t for line in LINES for t in line_terms(line)} - set(stems))
    expected = [frozenset(t for t in stems if t in line_terms(line)) for line in LINES]
    assert stems_by_line(LINES, stems) == expected
    # what one search asks three times is remembered by text, the same answer each time
    text = "\n".join(LINES)
    assert list(text_stems(text, tuple(stems))) == expected
    assert text_stems(text, tuple(stems)) is text_stems(text, tuple(stems))
