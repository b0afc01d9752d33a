"""Issue 20, sixth round: one incidental word is no evidence
(`SearchPreset.keyword_evidence_share`), and meaning a little below the model's floor is
(`vector_floor_margin`). A question about something memory does not hold, sharing one
word with a note ("system", "plan"), is answered with nothing; a keyword hit that holds most of
the question (a code, a name) is still an answer however far its meaning. Real SQLite and the
real offline USE model (floor 0.25)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from memory.index.index import MemoryIndex
from memory.search.presets import get_preset
from memory.search.ranking import Candidate, weak_keyword_hits, weigh_assistant_turns
from tests.conftest import keyword_config, use_config

NOW = datetime(2026, 1, 10, 12, 0)
PINCH = get_preset("pinch")
FILING = "memory/2026-01-04.md"
FILES = {
    "memory/2026-01-03.md": "# 2026-01-03\n\nWatered the balcony plants again.\n",
    # Shares one incidental word ("system") with the question below, and nothing of its meaning.
    FILING: "# 2026-01-04\n\nThe filing system at work is a mess.\n",
    "memory/2026-01-05.md": "# 2026-01-05\n\nThe garage door code is 7788-KQ.\n",
}
QUESTION = "How does the immune system fight a cold?"


def build(root: Path, files: dict[str, str], *, vectors: bool = True) -> MemoryIndex:
    ws = root / "workspace"
    for rel, text in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text, encoding="utf-8")
    config = use_config() if vectors else keyword_config()
    idx = MemoryIndex.open(ws, root / "agent.sqlite", config)
    idx.sync()
    return idx


def cosine(idx: MemoryIndex, question: str, path: str) -> float:
    hits = idx.search(question, preset="vector", min_score=0.0, now=NOW, max_results=20)
    return next(h.score for h in hits if h.path == path)


def paths(idx: MemoryIndex, question: str, **knobs: object) -> list[str]:
    preset = PINCH.with_overrides(**knobs)
    return [h.path for h in idx.search(question, preset=preset, now=NOW, min_score=0.0)]


@pytest.mark.usefixtures("use_model")
def test_one_incidental_word_is_no_answer(tmp_path: Path) -> None:
    idx = build(tmp_path, FILES)
    floor = idx.provider.relevance_floor  # type: ignore[union-attr]
    # The premise: the filing note is far from the question by meaning.
    assert cosine(idx, QUESTION, FILING) < floor - PINCH.vector_floor_margin

    before = paths(idx, QUESTION, keyword_evidence_share=0.0)  # every keyword hit counts
    after = paths(idx, QUESTION)  # the default
    idx.close()

    assert before == [FILING]
    assert after == []


@pytest.mark.usefixtures("use_model")
def test_a_keyword_hit_holding_most_of_the_question_is_an_answer(tmp_path: Path) -> None:
    idx = build(tmp_path, FILES)
    question = "7788-KQ"  # a code: its meaning says little, its words say everything
    assert PINCH.keyword_evidence_share > 0

    found = paths(idx, question)
    idx.close()

    assert found[:1] == ["memory/2026-01-05.md"]


@pytest.mark.usefixtures("use_model")
def test_meaning_a_little_below_the_floor_is_an_answer_within_the_margin(tmp_path: Path) -> None:
    plumber = "memory/2026-01-06.md"
    idx = build(
        tmp_path, {plumber: "# 2026-01-06\n\nIlse Brandt is our plumber; she repairs the boiler.\n"}
    )
    question = "When should the heating get serviced?"  # no word of it in the note
    floor = idx.provider.relevance_floor  # type: ignore[union-attr]
    near = cosine(idx, question, plumber)
    assert floor - 0.1 < near < floor  # the premise

    strict = paths(idx, question, vector_floor_margin=0.0, evidence_slack=0.0)
    margin = paths(idx, question, vector_floor_margin=0.1, evidence_slack=0.0)
    idx.close()

    assert strict == []
    assert margin == [plumber]


def test_without_vectors_every_keyword_hit_is_evidence(tmp_path: Path) -> None:
    idx = build(tmp_path, FILES, vectors=False)

    found = paths(idx, QUESTION)
    idx.close()

    assert found == [FILING]  # the degraded mode has no meaning to weigh a word against


def hit(cid: int, keyword: float) -> Candidate:
    c = Candidate(cid, f"memory/{cid}.md", "memory", "owner", 1, 1, "text", None, None)
    c.keyword_score = keyword
    return c


def test_weak_keyword_hits_are_those_low_in_both_share_and_meaning() -> None:
    preset = PINCH.with_overrides(keyword_evidence_share=0.35)
    ranked = [hit(1, 0.9), hit(2, 0.9), hit(3, 0.9), hit(4, 0.0), hit(5, 0.4)]
    raw = {1: 0.70, 2: 0.70, 3: 0.795, 4: 0.50, 5: 0.60}
    shares = {1: 0.10, 2: 0.50, 3: 0.10, 5: 0.349}

    weak = weak_keyword_hits(ranked, raw, shares, 0.79, preset)

    # 1: one word, far by meaning; 2: most of the question; 3: evidence by meaning anyway;
    # 4: no keyword hit at all (the vector floor decides); 5: just under the share.
    assert weak == {1, 5}
    assert weak_keyword_hits(ranked, {}, shares, 0.79, preset) == set()  # no vectors
    off = preset.with_overrides(keyword_evidence_share=0.0)
    assert weak_keyword_hits(ranked, raw, shares, 0.79, off) == set()


# ---- the assistant's own turns (`assistant_turn_penalty`) ----------------------------------


def test_a_passage_of_the_assistant_counts_the_penalty_less() -> None:
    owner = Candidate(
        1, "sessions/a", "sessions", "", 10, 11, "[10] User: my boiler\n[11] x", None, None
    )
    reply = "[20] Assistant: General advice.\n**Assistant** (10:01): more advice"
    assistant = Candidate(2, "sessions/a", "sessions", "", 20, 21, reply, None, None)
    vector = [(2, 0.84), (1, 0.83), (3, 0.825)]
    passages = {1: [(10, 10, 0.83)], 2: [(20, 20, 0.84), (21, 21, 0.82)]}

    out = weigh_assistant_turns(vector, passages, {1: owner, 2: assistant}, 0.02)

    # 2's passages are both the assistant's; 3 is not at hand and keeps its cosine.
    assert [cid for cid, _ in out] == [1, 3, 2]
    assert dict(out)[2] == pytest.approx(0.82)
    assert weigh_assistant_turns(vector, passages, {1: owner, 2: assistant}, 0.0) == vector


def test_a_passage_grouping_an_acknowledgement_with_the_owners_words_is_the_owners() -> None:
    text = "[11] Assistant: Noted.\n[12] User: My locker code is 4471.\n[13] Assistant: Got it."
    fact = Candidate(1, "sessions/a", "sessions", "", 11, 13, text, None, None)
    vector = [(1, 0.83)]

    grouped = weigh_assistant_turns(vector, {1: [(11, 12, 0.83)]}, {1: fact}, 0.02)
    alone = weigh_assistant_turns(vector, {1: [(13, 13, 0.83)]}, {1: fact}, 0.02)

    assert grouped == [(1, 0.83)]  # short turns grouped: the owner's fact is in it
    assert alone == [(1, pytest.approx(0.81))]


@pytest.mark.usefixtures("use_model")
def test_at_equal_meaning_what_the_owner_said_comes_first(tmp_path: Path) -> None:
    said = "Ilse Brandt repairs the boiler every November."
    files = {  # the same words, once as the owner's and once as the assistant's
        "memory/2026-01-01-chat.md": f"# Session 2026-01-01\n\n**Assistant** (10:01): {said}\n",
        "memory/2026-01-02-chat.md": f"# Session 2026-01-02\n\n**Owner** (10:00): {said}\n",
    }
    idx = build(tmp_path, files)
    vector = get_preset("vector")
    question = "Who fixes our heating?"

    plain = idx.search(question, preset=vector, now=NOW, min_score=0.0)
    weighed = idx.search(
        question, preset=vector.with_overrides(assistant_turn_penalty=0.2), now=NOW, min_score=0.0
    )
    idx.close()

    assert abs(plain[0].score - plain[1].score) < 0.05  # the premise: a near tie by meaning
    assert [h.path for h in weighed] == ["memory/2026-01-02-chat.md", "memory/2026-01-01-chat.md"]
    assert weighed[1].score < plain[0].score - 0.1
