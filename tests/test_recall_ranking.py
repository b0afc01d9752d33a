"""Issue 20, second round: near misses of the relevance floor beside an answer
(`SearchPreset.evidence_slack`), diversity by date in MMR (`mmr_same_day`) and pseudo-relevance
feedback (`feedback_terms`). Real SQLite and the real offline USE model (floor 0.25)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from memory.index.index import MemoryIndex
from memory.search.presets import get_preset
from memory.search.ranking import Candidate, mmr_select
from tests.conftest import use_config

NOW = datetime(2026, 1, 10, 12, 0)
PINCH = get_preset("pinch")
PLUMBER = "memory/2026-01-03.md"
FILES = {
    PLUMBER: "# 2026-01-03\n\nIlse Brandt is our plumber; she repairs the boiler.\n",
    # Filler sharing one incidental word ("system") with the question.
    "memory/2026-01-04.md": "# 2026-01-04\n\nThe filing system at work is a mess.\n",
    "memory/2026-01-05.md": "# 2026-01-05\n\nWatered the balcony plants again.\n",
}


def build(root: Path, files: dict[str, str]) -> MemoryIndex:
    ws = root / "workspace"
    for rel, text in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text, encoding="utf-8")
    idx = MemoryIndex.open(ws, root / "agent.sqlite", use_config())
    idx.sync()
    return idx


def cosine(idx: MemoryIndex, question: str, path: str) -> float:
    hits = idx.search(question, preset="vector", min_score=0.0, now=NOW, max_results=20)
    return next(h.score for h in hits if h.path == path)


@pytest.mark.usefixtures("use_model")
def test_a_near_miss_of_the_floor_is_admitted_beside_an_answer(tmp_path: Path) -> None:
    idx = build(tmp_path, FILES)
    question = "When should the heating system get serviced?"
    floor = idx.provider.relevance_floor  # type: ignore[union-attr]
    near = cosine(idx, question, PLUMBER)
    assert floor - 0.1 < near < floor  # the premise: below the floor, within the slack
    strict = PINCH.with_overrides(evidence_slack=0.0)
    slack = PINCH.with_overrides(evidence_slack=0.1)

    before = [h.path for h in idx.search(question, preset=strict, now=NOW, min_score=0.0)]
    after = [h.path for h in idx.search(question, preset=slack, now=NOW, min_score=0.0)]
    idx.close()

    assert "memory/2026-01-04.md" in before and PLUMBER not in before
    assert "memory/2026-01-04.md" in after and PLUMBER in after


@pytest.mark.usefixtures("use_model")
def test_near_misses_alone_are_still_no_answer(tmp_path: Path) -> None:
    idx = build(tmp_path, FILES)
    question = "When should the heating get serviced?"  # no word of it in any note
    assert cosine(idx, question, PLUMBER) < idx.provider.relevance_floor  # type: ignore[union-attr]

    hits = idx.search(question, preset=PINCH.with_overrides(evidence_slack=0.1), now=NOW)
    idx.close()

    assert hits == []


@pytest.mark.usefixtures("use_model")
def test_feedback_words_of_the_best_vector_hit_find_its_companion_note(tmp_path: Path) -> None:
    files = {
        PLUMBER: FILES[PLUMBER],
        # Shares no word with the question and means little to it; shares the name with the hit.
        "memory/2026-01-06.md": "# 2026-01-06\n\nIlse Brandt comes back on Friday.\n",
    } | {
        f"memory/2026-02-{day:02d}.md": f"# 2026-02-{day:02d}\n\nWatered the balcony plants.\n"
        for day in range(1, 7)
    }
    idx = build(tmp_path, files)
    question = "Who repairs our heating?"
    # (The companion holds none of the question's own words, so it needs every keyword hit to
    # count as evidence: feedback, off in `pinch`, was measured before `keyword_evidence_share`.)
    plain = PINCH.with_overrides(feedback_terms=0, keyword_evidence_share=0.0)
    fed = plain.with_overrides(feedback_terms=3)

    # (min_score 0: the companion's keyword score is small beside the hit that lent it its words)
    before = [h.path for h in idx.search(question, preset=plain, now=NOW, min_score=0.0)]
    after = [h.path for h in idx.search(question, preset=fed, now=NOW, min_score=0.0)]
    idx.close()

    assert before[0] == PLUMBER and "memory/2026-01-06.md" not in before
    assert after[0] == PLUMBER and "memory/2026-01-06.md" in after


def dated(cid: int, text: str, score: float, day: str) -> Candidate:
    return Candidate(cid, f"f{cid}.md", "memory", "owner", 1, 1, text, None, day, score=score)


def test_mmr_same_day_prefers_evidence_from_another_date() -> None:
    a = dated(1, "Caroline went to the support group.", 1.0, "2023-05-07")
    b = dated(2, "Melanie painted a sunrise over the lake.", 0.95, "2023-05-07")
    c = dated(3, "Caroline joined a pottery class afterwards.", 0.9, "2023-06-20")

    by_words = mmr_select([a, b, c], 2, 0.8)
    by_date = mmr_select([a, b, c], 2, 0.8, same_day=0.5)

    assert [x.id for x in by_words] == [1, 2]  # no word shared: B looks new
    assert [x.id for x in by_date] == [1, 3]  # B is the same day as A: C from another date
