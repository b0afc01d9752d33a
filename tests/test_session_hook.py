"""The session-memory hook: /new and /reset turn the ending session into memory/<date>-<slug>.md."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import agent.runtime
from agent.session_hook import clean_slug
from tests.agent_support import OWNER, SLUG_MARK, Kit, make_kit
from tests.fakes.model_server import FakeModelServer, error_reply, text_reply


def seed_conversation(kit: Kit, pairs: int) -> str:
    """`pairs` owner/assistant exchanges with slash commands between the last ones."""
    session = kit.store.current(OWNER)
    for i in range(pairs):
        kit.store.append(session.id, "user", {"text": f"Question {i} about the Porto trip"})
        kit.store.append(session.id, "assistant", {"text": f"Answer {i}"})
        if i >= pairs - 6:
            kit.store.append(session.id, "command", {"text": "/status"})
    return session.id


def test_new_writes_the_last_15_messages_named_by_the_model(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        old_id = seed_conversation(kit, pairs=10)
        server.script(text_reply("Porto Trip!"))
        reply = asyncio.run(kit.agent.handle(OWNER, "/new"))

    note = kit.workspace / "memory/2026-01-10-porto-trip.md"
    assert (
        reply.text
        == "Started a new session. The last one is saved in memory/2026-01-10-porto-trip.md."
    )
    text = note.read_text(encoding="utf-8")
    # Commands were dropped before the last 15 were taken: 20 messages → answers 2.5 … 9.
    assert text.count("**Owner**") + text.count("**Assistant**") == 15
    assert "Answer 2" in text and "Question 2 " not in text and "Question 3 " in text
    assert "Answer 9" in text and "/status" not in text
    assert f"session: {old_id}" in text
    assert SLUG_MARK in server.requests[0].last_user_text()
    assert kit.store.current(OWNER).id != old_id


def test_the_note_is_indexed_right_away(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        seed_conversation(kit, pairs=2)
        server.script(text_reply("porto"))
        asyncio.run(kit.agent.handle(OWNER, "/reset"))
    hits = kit.index.search("Porto trip question")
    assert any(h.path == "memory/2026-01-10-porto.md" for h in hits)


def test_a_failing_slug_call_falls_back_to_the_time(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        seed_conversation(kit, pairs=2)
        server.script(error_reply(500))
        asyncio.run(kit.agent.handle(OWNER, "/new"))
    assert (kit.workspace / "memory/2026-01-10-1430.md").exists()  # 14:30 in Berlin


def test_a_slow_slug_call_falls_back_to_the_time(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server, slug_timeout_s=0.3)
        seed_conversation(kit, pairs=2)
        server.script(text_reply("too-late", delay_s=3))
        asyncio.run(kit.agent.handle(OWNER, "/new"))
    assert (kit.workspace / "memory/2026-01-10-1430.md").exists()


def test_an_existing_note_is_never_overwritten(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        existing = kit.workspace / "memory/2026-01-10-porto.md"
        existing.write_text("# My own notes\n", encoding="utf-8")
        seed_conversation(kit, pairs=2)
        server.script(text_reply("porto"))
        reply = asyncio.run(kit.agent.handle(OWNER, "/new"))

    assert existing.read_text(encoding="utf-8") == "# My own notes\n"
    assert "memory/2026-01-10-porto-2.md" in reply.text
    assert (kit.workspace / "memory/2026-01-10-porto-2.md").exists()


def test_an_empty_session_writes_no_note_and_asks_no_model(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        reply = asyncio.run(kit.agent.handle(OWNER, "/new"))
    assert reply.text == "Started a new session."
    assert server.requests == [] and list((kit.workspace / "memory").glob("*.md")) == []


def test_slugs_are_one_or_two_plain_words() -> None:
    assert clean_slug("API Design Review") == "api-design"
    assert clean_slug("`bug-fix`") == "bug-fix"
    assert clean_slug("!!!") is None


def test_new_answers_at_once_and_a_slow_note_follows_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model naming the note may take seconds: /new does not wait for it."""
    monkeypatch.setattr(agent.runtime, "NOTE_WAIT_S", 1.0)
    note = "memory/2026-01-10-porto.md"

    async def scenario(kit: Kit) -> tuple[str, float, bool, str]:
        started = time.monotonic()
        reply = await kit.agent.handle(OWNER, "/new")
        took = time.monotonic() - started
        written_by_then = (kit.workspace / note).exists()
        new_session = kit.store.current(OWNER).id
        await kit.agent.drain()
        return reply.text, took, written_by_then, new_session

    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server, slug_timeout_s=20)
        old_id = seed_conversation(kit, pairs=2)
        server.script(text_reply("porto", delay_s=4))
        text, took, written_by_then, new_session = asyncio.run(scenario(kit))

    assert took < 2.5 and not written_by_then
    assert text == "Started a new session. The last one is being saved as a note in memory/."
    assert new_session != old_id
    assert (kit.workspace / note).exists()


def test_a_note_still_being_written_is_finished_when_the_runtime_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.gateway_support import make_rig

    monkeypatch.setattr(agent.runtime, "NOTE_WAIT_S", 0.1)

    async def scenario(server: FakeModelServer) -> Kit:
        rig = make_rig(tmp_path, server, slug_timeout_s=20)
        seed_conversation(rig.kit, pairs=2)
        server.script(text_reply("porto", delay_s=3))
        await rig.kit.agent.handle(OWNER, "/new")
        await rig.gateway.runtime.aclose()  # what a stopping gateway or chat does
        return rig.kit

    with FakeModelServer() as server:
        kit = asyncio.run(scenario(server))
    assert (kit.workspace / "memory/2026-01-10-porto.md").exists()
