"""Each keyword hit weighed by how much of the question it holds
(`SearchPreset.keyword_hit_coverage_power`, issue 20): a filler chunk sharing one incidental
word with a reworded question does not outrank the vector side's clear best hit, and a hit
holding the question's words keeps its rank."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from memory.index.index import MemoryIndex
from memory.search.presets import get_preset
from memory.search.ranking import (
    Candidate,
    calibrate_keyword_hits,
    chunk_coverages,
    rerank_by_lines,
)
from tests.conftest import use_config

NOW = datetime(2026, 1, 10, 12, 0)
PINCH = get_preset("pinch")


def candidate(cid: int, text: str) -> Candidate:
    return Candidate(cid, f"memory/{cid}.md", "memory", "owner", 1, 1, text, None, None)


def test_chunk_coverages_weigh_a_term_in_no_chunk_the_most() -> None:
    texts = ["We ordered pizza from the Italian place.", "Italian lessons start in May."]
    terms = ["normally", "italian", "takeaway"]

    shares = chunk_coverages(texts, terms)

    # Each holds only "italian" (in every chunk: the lowest weight); the two words no chunk
    # has carry most of the question.
    assert shares[0] == shares[1] < 0.25
    # A chunk holding a rarer word of the question too weighs more than one of them.
    more = chunk_coverages([*texts, "Our usual takeaway is the Italian one."], terms)
    assert more[2] > 2 * more[0]
    assert chunk_coverages(texts, []) == [1.0, 1.0]


def test_calibrate_keyword_hits_scales_each_hit_by_its_share() -> None:
    merged = {1: (0.9, 0.0), 2: (0.2, 1.0), 3: (0.1, 0.8)}

    out = calibrate_keyword_hits(merged, {2: 0.2, 3: 0.9}, 2.0)

    assert out[1] == (0.9, 0.0)  # a vector-only hit is untouched
    assert out[2] == pytest.approx((0.2, 0.04))  # one incidental word: little left
    assert out[3] == pytest.approx((0.1, 0.8 * 0.81))  # most of the question: most kept
    assert calibrate_keyword_hits({4: (0.0, 1.0)}, {4: 0.0}, 2.0)[4][1] > 0  # still a hit


def test_the_line_bonus_of_one_incidental_word_is_small() -> None:
    terms = ["son", "soccer", "practice", "over"]
    filler = candidate(1, "Piano practice went fine today.")
    answer = candidate(2, "The soccer practice of my son is over at five.")

    plain = [candidate(1, filler.text), candidate(2, answer.text)]
    rerank_by_lines(plain, terms, 0.5)
    weighed = [filler, answer]
    rerank_by_lines(weighed, terms, 0.5, coverage_power=2.0)

    assert weighed[1].score == pytest.approx(plain[1].score, rel=0.5)  # holds it all: kept
    assert weighed[0].score < plain[0].score / 4  # holds one word of four: small


FILLER = {
    f"memory/2026-01-0{day}.md": (
        f"# 2026-01-0{day}\n\nWe still need a name for the new project at work.\n\n"
        "The name on the parcel was spelled wrong again.\n"
    )
    for day in range(1, 9)  # eight notes that share only "name" with the reworded question
}


def build(root: Path, files: dict[str, str]) -> MemoryIndex:
    ws = root / "workspace"
    for rel, text in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text, encoding="utf-8")
    idx = MemoryIndex.open(ws, root / "agent.sqlite", use_config())
    idx.sync()
    return idx


@pytest.mark.usefixtures("use_model")
def test_filler_with_one_incidental_keyword_does_not_outrank_the_vectors_best_hit(
    tmp_path: Path,
) -> None:
    idx = build(
        tmp_path,
        {"MEMORY.md": "# Memory\n\n- My cat is called Tom and he sleeps on the blue sofa.\n"}
        | FILLER,
    )
    question = "What is the name of my feline companion?"
    # Neither the global calibration nor a vector slot: the rule alone.
    without = PINCH.with_overrides(
        vector_slots=0,
        keyword_coverage_power=0.0,
        keyword_hit_coverage_power=0.0,
        keyword_evidence_share=0.0,  # (which alone drops the filler: test_keyword_evidence.py)
        vector_floor_margin=0.0,
    )
    with_rule = without.with_overrides(keyword_hit_coverage_power=PINCH.keyword_hit_coverage_power)

    before = [h.path for h in idx.search(question, preset=without, now=NOW, max_results=3)]
    after = [h.path for h in idx.search(question, preset=with_rule, now=NOW, max_results=3)]
    full = [h.path for h in idx.search(question, preset=PINCH, now=NOW, max_results=3)]
    idx.close()

    assert "MEMORY.md" not in before  # the filler outranks it by its one shared word
    # The rule alone lifts it among them (the fillers keep their line bonus: h-am2); with the
    # preset's global calibration and vector slots it comes first.
    assert "MEMORY.md" in after
    assert full[0] == "MEMORY.md"


@pytest.mark.usefixtures("use_model")
def test_a_hit_holding_the_questions_words_keeps_its_rank(tmp_path: Path) -> None:
    idx = build(
        tmp_path,
        {
            "MEMORY.md": "# Memory\n\n- My cat is called Tom and he sleeps on the blue sofa.\n",
            "memory/2026-01-09.md": "# 2026-01-09\n\nThe parcel from Lisbon arrived torn.\n",
        }
        | FILLER,
    )
    question = "Which name was spelled wrong on the parcel?"

    hits = idx.search(question, preset=PINCH, now=NOW)
    idx.close()

    assert "spelled wrong" in hits[0].snippet


@pytest.mark.usefixtures("use_model")
def test_evidence_holding_part_of_the_question_is_not_pushed_down_to_filler(
    tmp_path: Path,
) -> None:
    # LoCoMo's shape (bench/RESULTS.md, h-am2): the question names words no note holds ("state",
    # "visit", "2021"), so the gate opens; the evidence holds its rarer word ("summer"), while
    # session openings holding only the name rank higher by meaning. Its line bonus is kept.
    files = {
        f"memory/2026-01-0{day}.md": (
            f"# 2026-01-0{day}\n\nHey Joanna! Long time no see! What's up? Anything new?\n\n"
            "Not much, work has been busy this week.\n"
        )
        for day in range(1, 8)
    }
    files["memory/2026-01-08.md"] = (
        "# 2026-01-08\n\nThat sunset pic looks incredible!\n\n"
        "Joanna: I took that pic on a hike last summer near Fort Wayne.\n"
    )
    idx = build(tmp_path, files)
    question = "What state did Joanna visit in summer 2021?"
    squared_with_lines = PINCH.with_overrides(
        keyword_hit_coverage_power=2.0, keyword_hit_weighs_lines=True
    )

    hits = idx.search(question, preset=PINCH, now=NOW)
    before = idx.search(question, preset=squared_with_lines, now=NOW)
    idx.close()

    assert hits[0].path == "memory/2026-01-08.md"
    assert before[0].path != "memory/2026-01-08.md"  # h-recall3's weighing: a filler first
