"""Deep recall's follow-up search (issue 20): after the sub-call's first memory_search, Pinch
searches again with the query plus the words its best hits share, and adds what that finds to
the same result — the other half of a question whose evidence is in two notes. The model server
is scripted; search is the real keyword index."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agent.active_memory import FOLLOW_UP_TERMS
from agent.requests import AgentRequest
from memory.search.feedback import feedback_terms
from tests.agent_support import OWNER, make_kit, template_workspace
from tests.fakes.model_server import FakeModelServer, text_reply, tool_reply
from tests.test_active_memory import MEMORY, USER, answer, with_active_memory
from tests.test_active_memory_deep import recall_requests

QUESTION = "What did we decide about the Lisbon trip?"
FILES = {
    "MEMORY.md": MEMORY,
    "USER.md": USER,
    # The decision names who travels; the booking (another day) names them but not the trip.
    "memory/2026-01-05.md": "# 2026-01-05\n- Decided: Lisbon trip in May with Ottoline Varga.\n",
    "memory/2026-02-10.md": "# 2026-02-10\n- Booked the sleeper for Ottoline Varga: cabin 12.\n",
} | {  # other days, so that a name in two notes is a rare word
    f"memory/2026-03-{day:02d}.md": f"# 2026-03-{day:02d}\n- Watered the balcony plants again.\n"
    for day in range(1, 9)
}


def run(tmp_path: Path, follow_up_terms: int | None = None) -> tuple[str, list[str]]:
    """What the sub-call read after its one search, and the queries the index was asked."""
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server, workspace=template_workspace(tmp_path, **FILES))
        memory = with_active_memory(kit)
        memory.follow_up_terms = FOLLOW_UP_TERMS if follow_up_terms is None else follow_up_terms
        asked: list[str] = []
        search = kit.agent.index.search

        def spy(query: str, **kwargs: object) -> object:
            asked.append(query)
            return search(query, **kwargs)  # type: ignore[arg-type]

        kit.agent.index.search = spy  # type: ignore[method-assign]
        server.script(
            tool_reply("memory_search", {"query": "Lisbon trip decided"}),
            text_reply("2026-01-05: Lisbon in May."),
            text_reply("Lisbon in May."),
        )
        asyncio.run(answer(kit, AgentRequest(OWNER, QUESTION)))
    return str(recall_requests(server)[1].body["messages"]), asked


def test_the_follow_up_finds_the_note_that_shares_the_first_hits_words(tmp_path: Path) -> None:
    saw, asked = run(tmp_path)

    assert "Decided: Lisbon trip" in saw and "cabin 12" in saw
    assert asked[0] == "Lisbon trip decided"
    assert asked[1].startswith("Lisbon trip decided ") and "ottoline" in asked[1].lower()


def test_without_the_follow_up_the_second_note_is_not_seen(tmp_path: Path) -> None:
    saw, asked = run(tmp_path, follow_up_terms=0)  # the default

    assert "Decided: Lisbon trip" in saw and "cabin 12" not in saw
    assert asked == ["Lisbon trip decided"]


def test_the_follow_up_hits_are_added_after_the_first_and_say_so(tmp_path: Path) -> None:
    saw, _ = run(tmp_path)
    assert saw.index("Decided: Lisbon trip") < saw.index("cabin 12")
    assert "a second search with" in saw


def test_feedback_terms_are_the_words_the_best_hits_share_and_the_rest_rarely_hold() -> None:
    best = [
        "[3] User: The plumber Ilse Brandt fixes the boiler on Friday.",
        "[9] User: Ilse Brandt said the boiler valve is worn.",
        "[12] Assistant: Friday works.",
    ]
    pool = [*best, "We talked about Friday plans.", "Friday is movie night.", "The valve shop."]

    terms = feedback_terms(best, pool, ["heating", "repair"], 3)

    # In two of the best texts and nowhere else: the plumber's name and the boiler.
    assert set(terms) == {"ilse", "brandt", "boiler"}
    assert "user" not in feedback_terms(best, pool, [], 10)  # speakers are not content
    assert feedback_terms(best, pool, ["boilers", "ilse", "brandt"], 3)[0] not in {"boiler"}
    assert feedback_terms([], pool, ["x"], 3) == [] and feedback_terms(best, pool, ["x"], 0) == []


def test_a_follow_up_that_finds_nothing_new_leaves_the_result_as_it_was(tmp_path: Path) -> None:
    files = dict(FILES)
    del files["memory/2026-02-10.md"]
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server, workspace=template_workspace(tmp_path, **files))
        with_active_memory(kit).follow_up_terms = FOLLOW_UP_TERMS
        server.script(
            tool_reply("memory_search", {"query": "Lisbon trip decided"}),
            text_reply("NONE"),
            text_reply("OK."),
        )
        asyncio.run(answer(kit, AgentRequest(OWNER, QUESTION)))
    messages = recall_requests(server)[1].body["messages"]
    result = next(
        b["content"]
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    )
    text = result if isinstance(result, str) else "".join(b["text"] for b in result)
    assert "follow_up" not in json.loads(text)
