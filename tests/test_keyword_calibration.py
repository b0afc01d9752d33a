"""The keyword side weighed by how much of the question its best hit holds
(`SearchPreset.keyword_coverage_power`): filler sharing one incidental word with a reworded
question no longer outranks what the vectors found; a question its keywords explain is ranked
as before."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from memory.index.index import MemoryIndex
from memory.search.presets import get_preset
from memory.search.ranking import best_chunk_coverage
from tests.conftest import use_config

NOW = datetime(2026, 1, 10, 12, 0)
PINCH = get_preset("pinch")


def build(root: Path, files: dict[str, str]) -> MemoryIndex:
    ws = root / "workspace"
    for rel, text in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text, encoding="utf-8")
    idx = MemoryIndex.open(ws, root / "agent.sqlite", use_config())
    idx.sync()
    return idx


def test_best_chunk_coverage_is_the_share_the_best_single_chunk_holds() -> None:
    texts = ["The reading group meets at the library.", "We plan a picnic.", "Nothing here."]

    assert best_chunk_coverage(texts, ["reading", "group"]) == 1.0
    # "plan" and "reading" are in different chunks: no single one holds the whole question.
    assert 0.3 < best_chunk_coverage(texts, ["plan", "reading"]) < 0.7
    assert best_chunk_coverage(texts, ["feline", "companion"]) == 0.0
    assert best_chunk_coverage([], ["reading"]) == 0.0
    assert best_chunk_coverage(texts, []) == 1.0


def test_chinese_bigrams_across_word_boundaries_count_for_little() -> None:
    texts = ["我今天很开心。", "我今天去了公园。", "我的猫喜欢蓝色的沙发。"]

    # 今天 and 开心 are in most notes; 钢琴 (piano) and 比赛 (contest) in none.
    assert best_chunk_coverage(texts, ["今天", "开心", "钢琴", "比赛"]) < 0.5
    assert best_chunk_coverage(texts, ["猫", "沙发"]) == 1.0


FILLER = {
    f"memory/2026-01-0{day}.md": (
        f"# 2026-01-0{day}\n\nWe still need a name for the new project at work.\n\n"
        "The name on the parcel was spelled wrong again.\n"
    )
    for day in range(1, 9)  # eight notes that share only "name" with the reworded question
}


@pytest.mark.usefixtures("use_model")
def test_a_reworded_question_finds_its_note_by_meaning_without_a_vector_slot(
    tmp_path: Path,
) -> None:
    idx = build(
        tmp_path,
        {"MEMORY.md": "# Memory\n\n- My cat is called Tom and he sleeps on the blue sofa.\n"}
        | FILLER,
    )
    question = "What is the name of my feline companion?"
    # (Each hit weighed by its own share, `keyword_hit_coverage_power`, off: the global rule alone.)
    today = PINCH.with_overrides(
        vector_slots=0,
        keyword_coverage_power=0.0,
        keyword_hit_coverage_power=0.0,
        keyword_evidence_share=0.0,
        vector_floor_margin=0.0,
    )
    calibrated = today.with_overrides(keyword_coverage_power=1.0)

    before = [h.path for h in idx.search(question, preset=today, now=NOW, max_results=3)]
    after = [h.path for h in idx.search(question, preset=calibrated, now=NOW, max_results=3)]
    idx.close()

    assert "MEMORY.md" not in before  # the filler outranks it by its one shared word
    assert after[0] == "MEMORY.md"


@pytest.mark.usefixtures("use_model")
def test_a_question_its_keywords_explain_ranks_as_before(tmp_path: Path) -> None:
    idx = build(
        tmp_path,
        {
            "MEMORY.md": "# Memory\n\n- My cat is called Tom and he sleeps on the blue sofa.\n",
            "memory/2026-01-09.md": "# 2026-01-09\n\nThe parcel from Lisbon arrived torn.\n",
        }
        | FILLER,
    )
    question = "Which name was spelled wrong on the parcel?"
    today = PINCH.with_overrides(keyword_coverage_power=0.0)
    calibrated = PINCH.with_overrides(keyword_coverage_power=1.0)

    before = idx.search(question, preset=today, now=NOW)
    after = idx.search(question, preset=calibrated, now=NOW)
    idx.close()

    assert [h.path for h in after] == [h.path for h in before]
    assert "spelled wrong" in after[0].snippet
