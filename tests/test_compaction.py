"""Compaction with the memory flush, against the scripted model server.

A small context window (threshold 2,500 tokens) makes a handful of ~300-token messages enough to
trigger it; `kind_of` tells the server's requests apart (turn, flush, summary).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agent.compaction import choose_cut, split_by_tokens
from agent.history import split_turns
from agent.runtime import RESET_NOTICE, AgentReply
from memory.store.sessions import TranscriptEvent
from tests.agent_support import (
    OWNER,
    SUMMARY,
    Kit,
    kind_of,
    make_kit,
    responder,
    small_workspace,
    tool_results,
)
from tests.fakes.model_server import (
    FakeModelServer,
    RecordedRequest,
    Reply,
    error_reply,
    text_reply,
    tool_reply,
)

SMALL_WINDOW = {"context_window": 4_000, "reserve_floor": 1_000, "soft_threshold": 500}
PASSPORT = "My passport number is X1234-5678-Q."


def filler(i: int) -> str:
    return f"Filler message {i}: " + "lorem ipsum dolor sit amet " * 44


def small_kit(tmp_path: Path, server: FakeModelServer, **config: Any) -> Kit:
    return make_kit(
        tmp_path, server, workspace=small_workspace(tmp_path), **{**SMALL_WINDOW, **config}
    )


def chat_until_compacted(kit: Kit, first: int = 0, limit: int = 20) -> tuple[AgentReply, int]:
    """Send filler messages until one turn compacts; returns that reply and the next index."""

    async def run() -> tuple[AgentReply, int]:
        for i in range(first, first + limit):
            reply = await kit.agent.handle(OWNER, filler(i))
            if reply.compacted or reply.text.startswith(RESET_NOTICE):
                return reply, i + 1
        raise AssertionError("no compaction happened")

    return asyncio.run(run())


def kinds(server: FakeModelServer) -> list[str]:
    return [kind_of(r) for r in server.requests]


def test_the_flush_runs_first_then_the_summary_then_the_request_is_retried(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = small_kit(tmp_path, server)
        server.respond_with(responder())
        reply, _ = chat_until_compacted(kit)

    sequence = kinds(server)
    assert sequence[-3:] == ["flush", "summary", "turn"]
    assert sequence.count("flush") == 1 and set(sequence[:-3]) == {"turn"}
    flush, _summary, retried = server.requests[-3:]
    # The flush shares the turn's cached prefix: same system prompt and tools, tools allowed.
    assert flush.body["system"] == retried.body["system"]
    assert [t["name"] for t in flush.body["tools"]] == [t["name"] for t in retried.body["tools"]]
    assert "memory_append" in flush.last_user_text() and "NO_REPLY" in flush.last_user_text()
    # The retried request starts with the summary and no longer carries the first turn.
    assert "<conversation_summary>" in json.dumps(retried.body["messages"][0])
    assert "Filler message 0:" not in json.dumps(retried.body)

    session = kit.store.get(reply.session_id)
    assert session is not None and session.compactions == 1 and session.flushed_cycle == 0
    compaction = kit.store.latest_compaction(session.id)
    assert compaction is not None and compaction.content["summary"] == SUMMARY
    events = kit.store.events(session.id)
    flush_seq = next(e.seq for e in events if e.kind == "flush")
    assert flush_seq < compaction.seq


def test_each_compaction_cycle_gets_exactly_one_flush(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = small_kit(tmp_path, server)
        server.respond_with(responder())
        _, next_i = chat_until_compacted(kit)
        reply, _ = chat_until_compacted(kit, first=next_i)

    assert kinds(server).count("flush") == 2 and kinds(server).count("summary") == 2
    flushes = kit.store.events(reply.session_id, kinds=("flush",))
    assert [e.content["cycle"] for e in flushes] == [0, 1]


def test_a_flush_that_already_ran_in_this_cycle_is_not_repeated(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = small_kit(tmp_path, server)
        server.respond_with(responder())
        # As if the process died after the flush of cycle 0 but before its compaction.
        kit.store.mark_flushed(kit.store.current(OWNER).id, 0)
        chat_until_compacted(kit)

    assert "flush" not in kinds(server)
    assert kinds(server)[-2:] == ["summary", "turn"]


def test_a_failing_summary_resets_the_session_after_the_flush(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = small_kit(tmp_path, server)
        old = kit.store.current(OWNER)
        kit.store.append(old.id, "user", {"text": PASSPORT})
        kit.store.append(old.id, "assistant", {"text": "Noted."})
        server.respond_with(responder(summary=error_reply(500), turn=text_reply("Here I am.")))
        reply, _ = chat_until_compacted(kit)

    assert kinds(server)[-3:] == ["flush", "summary", "turn"]
    assert reply.text == RESET_NOTICE + "\n\nHere I am."
    assert reply.session_id != old.id and not reply.compacted
    assert [e.kind for e in kit.store.events(old.id, kinds=("flush",))] == ["flush"]
    new_events = kit.store.events(reply.session_id)
    assert [e.kind for e in new_events] == ["user", "assistant"]
    assert new_events[0].content["text"].startswith("Filler message")
    # Nothing of the old session is lost to search.
    hits = kit.index.search("passport number", scopes=("", OWNER.memory_scope))
    assert hits and hits[0].path == f"sessions/{old.id}"


def test_a_context_too_long_answer_compacts_and_retries(tmp_path: Path) -> None:
    answers = iter([text_reply("a"), text_reply("b"), text_reply("c")])
    overflowed: list[bool] = []

    def turn(request: RecordedRequest) -> Reply:
        if "question four" in request.last_user_text() and not overflowed:
            overflowed.append(True)
            return error_reply(400, "prompt is too long: 210000 tokens > 200000 maximum")
        return next(answers, text_reply("d"))

    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server, workspace=small_workspace(tmp_path))
        server.respond_with(responder(turn=turn))

        async def run() -> AgentReply:
            for text in ("question one", "question two", "question three"):
                await kit.agent.handle(OWNER, text)
            return await kit.agent.handle(OWNER, "question four")

        reply = asyncio.run(run())

    assert kinds(server) == ["turn"] * 4 + ["flush", "summary", "turn"]
    assert reply.compacted and reply.text == "d"


def test_a_fact_the_flush_did_not_save_is_still_found_after_compaction(tmp_path: Path) -> None:
    def turn(request: RecordedRequest) -> Reply:
        if "passport" not in request.last_user_text():
            return text_reply("OK.")
        if tool_results(request):
            return text_reply("Found it in our earlier conversation.")
        return tool_reply("memory_search", {"query": "passport number", "max_results": 2})

    with FakeModelServer() as server:
        kit = small_kit(tmp_path, server)
        server.respond_with(responder(turn=turn))  # the flush answers NO_REPLY: nothing saved
        first = asyncio.run(kit.agent.handle(OWNER, PASSPORT))
        chat_until_compacted(kit)
        asyncio.run(kit.agent.handle(OWNER, "What is my passport number?"))

    last = server.requests[-1]
    assert PASSPORT not in json.dumps(last.body["messages"][0])  # summarised away …
    [result] = tool_results(last)
    hits = json.loads(result["content"])["results"]
    assert hits[0]["path"] == f"sessions/{first.session_id}"  # … but found in the transcript
    assert "X1234-5678-Q" in hits[0]["snippet"]
    saved = "".join(p.read_text() for p in (kit.workspace / "memory").glob("*.md"))
    assert "X1234" not in saved


def test_the_cut_keeps_the_newest_turn_and_summarises_at_least_one() -> None:
    events = [
        TranscriptEvent(seq, kind, {"text": "x" * 400}, 0.0)
        for seq, kind in enumerate(["user", "assistant"] * 4, start=1)
    ]
    turns = split_turns(events)
    assert choose_cut(turns, keep_tokens=0) == 3  # only the newest turn kept
    assert choose_cut(turns, keep_tokens=10_000) == 1  # the oldest one still summarised
    assert choose_cut(turns[:1], keep_tokens=0) == 0  # nothing to summarise


def test_a_long_transcript_is_summarised_in_pieces() -> None:
    text = "\n".join(f"[#{i}] Owner: " + "word " * 100 for i in range(40))
    pieces = split_by_tokens(text, max_tokens=1_000)
    assert len(pieces) > 1 and "\n".join(pieces) == text


def test_the_flush_may_append_to_todays_log_but_not_edit_bootstrap_files(tmp_path: Path) -> None:
    flush_replies = iter(
        [
            tool_reply("remember", {"file": "USER.md", "text": "Likes Porto"}),
            tool_reply("memory_append", {"text": "- Decided: Porto trip in May."}),
            text_reply("NO_REPLY"),
        ]
    )
    with FakeModelServer() as server:
        kit = small_kit(tmp_path, server)
        server.respond_with(responder(flush=lambda request: next(flush_replies)))
        user_md = (kit.workspace / "USER.md").exists()
        reply, _ = chat_until_compacted(kit)

    assert (kit.workspace / "USER.md").exists() == user_md  # nothing written there
    log = (kit.workspace / "memory/2026-01-10.md").read_text(encoding="utf-8")
    assert "- Decided: Porto trip in May." in log
    flush_requests = [r for r in server.requests if kind_of(r) == "flush"]
    refused = tool_results(flush_requests[1])[-1]
    assert refused["is_error"] and "remember is not allowed now" in refused["content"]
    [flush] = kit.store.events(reply.session_id, kinds=("flush",))
    assert flush.content["appended"] == ["Appended to memory/2026-01-10.md."]
    assert flush.content["reply"] == "NO_REPLY"
