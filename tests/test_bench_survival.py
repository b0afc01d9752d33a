"""bench/compaction_survival.py stays honest and runnable: its paraphrases share no content word
with their facts, and a tiny run with /new resets and both question kinds completes. (The
figures themselves come from the full run by hand: bench/RESULTS.md.)"""

from __future__ import annotations

import asyncio
import json
from argparse import Namespace
from pathlib import Path

import pytest

from bench import compaction_survival as survival
from tests.fakes.model_server import RecordedRequest


def test_every_paraphrase_shares_no_content_word_with_its_fact() -> None:
    survival.check_paraphrases()  # raises, naming the pair, when one does


def test_shared_words_are_found_after_stemming_and_as_chinese_bigrams() -> None:
    assert survival.shared_terms("My locker code at the gym is 4471", "Gym lockers?") == {
        "gym",
        "locker",
    }
    assert survival.shared_terms("我的护照明年六月过期", "护照哪天过期？") == {"护照", "过期"}
    assert survival.shared_terms("I'm allergic to penicillin", "What am I sensitive to?") == set()


def test_a_paraphrase_sharing_a_word_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    leaky = survival.Fact("My shoe size is EU 43", "What's my shoe size?", "Which size fits me?")
    monkeypatch.setattr(survival, "ALL_FACTS", (leaky,))
    with pytest.raises(ValueError, match="size"):
        survival.check_paraphrases()


def test_resets_are_spread_over_the_conversation_with_the_last_after_it() -> None:
    assert survival.reset_points(300, 3) == {101, 201, 301}
    assert survival.reset_points(300, 0) == set()


def test_a_small_run_resets_plants_in_both_languages_and_asks_every_set(tmp_path: Path) -> None:
    args = Namespace(
        turns=15,
        facts=2,
        zh_facts=1,
        resets=3,
        seed=7,
        context_window=12_000,
        reserve_floor=2_000,
        soft_threshold=1_000,
        questions=list(survival.QUESTION_SETS),
        active_memory=["always"],
        reader="words",
    )
    result = asyncio.run(survival.run_once("none", args, tmp_path))
    json.dumps(result)  # --json prints it
    assert result["resets"] == 3 and result["session_notes"] == 3
    assert result["facts"] == 3
    assert {k: t["n"] for k, t in result["tools"].items()} == {
        "direct": 2,
        "paraphrase": 2,
        "zh-direct": 1,
        "zh-paraphrase": 1,
    }
    # Said once, three sessions ago, never saved: the words of the fact still find it.
    assert result["tools"]["direct"]["found"] == 2
    assert result["tools"]["zh-direct"]["found"] == 1
    assert result["unrelated"]["n"] == len(survival.unrelated_questions())
    assert [(a["questions"], a["mode"]) for a in result["active_memory"]] == [
        (q, "always") for q in survival.QUESTION_SETS
    ]
    for am in result["active_memory"]:
        assert all({"line_rank", "lines"} <= set(miss) for miss in am["misses"])


def test_the_reader_reports_the_order_it_weighed_the_owner_lines_in() -> None:
    results = {
        "results": [
            {"snippet": "[3] User: I keep the spare key under the blue pot.\n[3] Assistant: OK."},
            {"snippet": "[9] User: Where is the spare key?\n[9] User: The blue pot is cracked."},
        ]
    }
    body = {
        "messages": [
            {"role": "user", "content": "The owner's newest message:\nWhere is the spare key?"},
            {"role": "assistant", "content": [{"type": "text", "text": "searching"}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": json.dumps(results)}
                ],
            },
        ]
    }
    request = RecordedRequest("anthropic", "/v1/messages", {}, body, None)
    weighed: list[str] = []
    survival.recall_reply(request, weighed=weighed)
    # Questions are left out; the line sharing most words with the question comes first.
    assert weighed == [
        "[3] User: I keep the spare key under the blue pot.",
        "[9] User: The blue pot is cracked.",
    ]
