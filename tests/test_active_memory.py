"""Active Memory's fast path: trigger-tagged entries of MEMORY.md and USER.md, matched lexically
against the owner's message and put in front of it, with no model call — and never outside the
owner's own messages in the owner's direct chats (asserted on what the model server received).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.active_memory import ActiveMemory
from agent.agent_config import AgentConfig
from agent.requests import AgentRequest, Final
from app.cli.main import TEMPLATE_DIR
from app.cli.setup import initialise
from app.config import Settings
from app.wiring import build_runtime
from memory.lifecycle.triggers import STRONG_MATCH, TriggerFiles, TriggerIndex, parse_entries
from memory.store.sessions import SessionKey
from tests.agent_support import GROUP, OWNER, Kit, all_text, make_kit, template_workspace
from tests.fakes.model_server import FakeModelServer, text_reply

STRANGER = SessionKey("main", "telegram", "direct", "555")
MEMORY = """# MEMORY.md
## Facts to keep
- 2026-01-10: Anna is allergic to peanuts; no nuts. <!-- trigger: Anna, allergy, peanuts -->
- 2025-10: the Kyoto trip, hotel near Gion. <!-- trigger: 京都, 旅行 -->
"""
USER = """# USER.md
<!-- observed: 2026-01-02 | status: active -->
- Dentist is Dr. Lee, Tuesdays at 9. <!-- trigger: dentist --> <!-- importance: 4 -->
"""
ANNA = "Anna is allergic to peanuts"


def with_active_memory(kit: Kit, monotonic: Callable[[], float] | None = None) -> ActiveMemory:
    """`kit`'s agent with Active Memory plugged in as app/wiring.py does."""
    extra: dict[str, Any] = {"monotonic": monotonic} if monotonic else {}
    memory = ActiveMemory(
        model=kit.agent.model,
        store=kit.store,
        tools=kit.agent.tools,
        workspace=kit.workspace,
        config=kit.agent.config,
        index=kit.index,
        **extra,
    )
    kit.agent.recall = memory
    return memory


def recall_kit(tmp_path: Path, server: FakeModelServer, **config: Any) -> tuple[Kit, ActiveMemory]:
    workspace = template_workspace(tmp_path, **{"MEMORY.md": MEMORY, "USER.md": USER})
    kit = make_kit(tmp_path, server, workspace=workspace, **config)
    return kit, with_active_memory(kit)


async def answer(kit: Kit, request: AgentRequest) -> str:
    reply = None
    async for event in kit.agent.run(request):
        reply = event
    assert isinstance(reply, Final)
    return reply.reply.text


def index_of(content: str, path: str = "MEMORY.md") -> TriggerIndex:
    return TriggerIndex(parse_entries(path, content))


def texts(index: TriggerIndex, message: str) -> list[str]:
    return [h.entry.text for h in index.match(message, min_score=STRONG_MATCH)]


# ---- matching -----------------------------------------------------------------------------------


def test_two_trigger_terms_of_an_entry_are_a_strong_match() -> None:
    hits = index_of(MEMORY).match("What can I cook for Anna, given her allergies?")
    assert hits[0].score == 1.0 and ANNA in hits[0].entry.text


def test_one_of_three_terms_is_a_weak_match_and_is_not_injected() -> None:
    index = index_of(MEMORY)
    assert index.match("Is Anna coming on Friday?")[0].score == 0.5 < STRONG_MATCH
    assert texts(index, "Is Anna coming on Friday?") == []


def test_words_match_across_case_width_and_inflection() -> None:
    index = index_of("- x <!-- trigger: Allergy, PEANUT -->\n")
    assert texts(index, "ｐｅａｎｕｔｓ and allergies?") == ["- x"]  # NFKC, case, Porter stems


def test_chinese_terms_match_by_character_bigrams() -> None:
    index = index_of(MEMORY)
    assert texts(index, "我们上次去京都旅行住在哪里？") == [
        "- 2025-10: the Kyoto trip, hotel near Gion."
    ]
    assert texts(index, "京都") == []  # one of two terms: weak


def test_a_single_term_trigger_matches_on_that_term() -> None:
    index = index_of(USER, "USER.md")
    assert texts(index, "When is my dentist appointment?") == [
        "- Dentist is Dr. Lee, Tuesdays at 9."
    ]


def test_a_multi_word_term_needs_its_words_together_for_a_full_match() -> None:
    index = index_of("- Filed in April. <!-- trigger: tax return -->\n")
    assert index.match("Where is my tax return?")[0].score == 1.0
    assert index.match("What about tax?")[0].score == 0.5


TIES = "\n".join(
    [
        "- a <!-- trigger: garden, tomato --> <!-- importance: 1 -->",
        "- b <!-- trigger: garden, tomato --> <!-- importance: 5 -->",
        "- c <!-- trigger: garden, tomato, basil -->",
        "- d <!-- trigger: garden, tomato --> <!-- importance: 2 -->",
        "- e <!-- trigger: garden --> <!-- importance: 5 -->",
    ]
)


def test_entries_are_ordered_best_first_and_importance_breaks_ties() -> None:
    hits = index_of(TIES).match("garden tomato", min_score=STRONG_MATCH)
    assert [h.entry.text for h in hits] == ["- b", "- e", "- c", "- d", "- a"]
    assert [h.score for h in hits] == [1.0] * 5


def test_at_most_three_entries_are_recalled(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        workspace = template_workspace(tmp_path, **{"MEMORY.md": TIES})
        kit = make_kit(tmp_path, server, workspace=workspace, recall_mode="triggers")
        text = asyncio.run(with_active_memory(kit)(OWNER, "garden tomato"))
    assert text is not None and [line[:3] for line in text.splitlines()] == ["- b", "- e", "- c"]


# ---- what counts as an entry ---------------------------------------------------------------------


def test_a_marker_line_above_an_entry_belongs_to_it() -> None:
    entries = parse_entries(
        "USER.md", "<!-- trigger: bike --> <!-- importance: 5 -->\n- Red bike.\n"
    )
    assert [(e.text, e.line, e.importance) for e in entries] == [("- Red bike.", 2, 5)]


def test_an_indented_marker_belongs_to_the_list_item_above() -> None:
    entries = parse_entries(
        "MEMORY.md", "- Red bike,\n  bought 2024.\n  <!-- trigger: bike -->\n- x\n"
    )
    assert [e.text for e in entries] == ["- Red bike, bought 2024."]


def test_superseded_and_commented_out_entries_are_not_recalled() -> None:
    content = (
        "- Old car. <!-- trigger: car --> <!-- observed: 2025-01-01 | status: superseded -->\n"
        "<!-- Example:\n- Fake. <!-- trigger: car --> <!-- importance: 5 -->\n"
        "- New car. <!-- trigger: car -->\n"
    )
    assert [e.text for e in parse_entries("MEMORY.md", content)] == ["- New car."]


def test_the_workspace_templates_example_is_not_an_entry() -> None:
    template = Path(__file__).resolve().parents[1] / "workspace_template" / "MEMORY.md"
    text = template.read_text(encoding="utf-8")
    assert "<!-- trigger:" in text and parse_entries("MEMORY.md", text) == []


def test_only_memory_md_and_user_md_are_read_never_daily_logs(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "2026-01-09.md").write_text("- Log. <!-- trigger: dentist -->\n")
    (tmp_path / "notes.md").write_text("- Note. <!-- trigger: dentist -->\n")
    (tmp_path / "USER.md").write_text(USER)
    index = TriggerFiles(tmp_path).index()
    assert [e.path for e in index.entries] == ["USER.md"]


def test_an_edited_file_is_read_again_and_an_unchanged_one_is_not(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_text("- One. <!-- trigger: one -->\n")
    files = TriggerFiles(tmp_path)
    first = files.index()
    assert files.index() is first  # nothing changed: the parsed entries are reused
    path.write_text("- Two. <!-- trigger: two -->\n")
    os.utime(path, ns=(1, 1))  # a new mtime even on a coarse clock
    assert [e.text for e in files.index().entries] == ["- Two."]
    path.unlink()
    assert len(files.index()) == 0


# ---- in a turn: what the model server received --------------------------------------------------


def test_a_strong_match_is_put_in_front_of_the_owners_message(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit, _ = recall_kit(tmp_path, server, recall_mode="triggers")
        server.script(text_reply("Rice, no satay."))
        asyncio.run(answer(kit, AgentRequest(OWNER, "What should I cook for Anna, allergies?")))
    sent = server.requests[0].last_user_text()
    assert "<recalled_context>" in sent and ANNA in sent and "MEMORY.md, line 3" in sent
    assert sent.index(ANNA) < sent.index("What should I cook")
    assert len(server.requests) == 1  # the fast path made no model call


def test_a_message_matching_nothing_gets_no_recalled_block(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit, memory = recall_kit(tmp_path, server, recall_mode="triggers")
        server.script(text_reply("Sunny."))
        asyncio.run(answer(kit, AgentRequest(OWNER, "How is the weather?")))
    assert "<recalled_context>" not in server.requests[0].last_user_text()
    report = memory.last_turn(OWNER)
    assert report is not None and report.fast_hits == 0 and report.deep == "off"


@pytest.mark.parametrize(
    "request_",
    [
        AgentRequest(GROUP, "Anna allergies peanuts?", sender="person", sender_name="Bob"),
        AgentRequest(STRANGER, "Anna allergies peanuts?", sender="person", sender_name="Eve"),
        AgentRequest(OWNER, "Anna allergies peanuts? Last time?", sender="automation"),
        AgentRequest(OWNER, "Anna allergies peanuts? Last time?", sender="system"),
    ],
    ids=["group", "another-persons-direct-chat", "automation", "system-heartbeat"],
)
def test_recall_never_runs_outside_the_owners_own_private_messages(
    tmp_path: Path, request_: AgentRequest
) -> None:
    with FakeModelServer() as server:
        kit, memory = recall_kit(tmp_path, server, recall_mode="always")
        server.script(text_reply("OK."))
        asyncio.run(answer(kit, request_))
    assert len(server.requests) == 1  # no deep-recall sub-call either
    assert "<recalled_context>" not in all_text(server.requests[0])
    if not request_.key.is_owner_direct:
        assert ANNA not in all_text(server.requests[0])
    assert memory.last_turn(request_.key) is None


def test_called_directly_for_a_shared_session_it_recalls_nothing(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        _, memory = recall_kit(tmp_path, server, recall_mode="always")
        assert asyncio.run(memory(GROUP, "Anna allergies peanuts, last time?")) is None
    assert server.requests == []


def test_the_runtime_recalls_with_the_configured_mode_escalate_by_default(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PINCH_AGENT__RECALL_MODE")  # the test suite's default (conftest.py)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    settings = Settings(
        home=pinch_home, agent={"model": "claude-test"}, memory={"embedding": {"provider": "none"}}
    )
    initialise(settings, TEMPLATE_DIR)

    async def recall_of(settings: Settings) -> object:
        async with await build_runtime(settings) as runtime:
            return runtime.agent.recall

    recall = asyncio.run(recall_of(settings))
    assert isinstance(recall, ActiveMemory) and recall.config.recall_mode == "escalate"
    recall = asyncio.run(
        recall_of(
            settings.model_copy(
                update={"agent": AgentConfig(model="claude-test", recall_mode="off")}
            )
        )
    )
    assert isinstance(recall, ActiveMemory) and recall.config.recall_mode == "off"


def test_an_unreadable_memory_file_costs_the_triggers_only(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit, memory = recall_kit(tmp_path, server, recall_mode="escalate")
        (kit.workspace / "MEMORY.md").unlink()
        (kit.workspace / "MEMORY.md").mkdir()  # reading it fails with an OSError
        server.script(text_reply("Lisbon, in May."))
        text = asyncio.run(memory(OWNER, "What did we decide about Lisbon?"))
    assert text == "From a search of memory and past conversations: Lisbon, in May."
