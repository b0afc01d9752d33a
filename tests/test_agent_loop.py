"""The turn loop: the real anthropic SDK and litellm against the scripted model server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.model.errors import ServerError
from agent.requests import AgentEvent, AgentRequest, Final, Notice, TextDelta
from agent.runtime import TOOL_LIMIT_RESULT
from common.attachment import Attachment
from tests.agent_support import (
    GROUP,
    OWNER,
    Kit,
    all_text,
    make_kit,
    template_workspace,
    tool_results,
)
from tests.fakes.model_server import FakeModelServer, error_reply, text_reply, tool_reply

DENTIST = "- Dentist: Dr. Okafor, next appointment Tuesday 14:00 <!-- observed: 2026-01-05 -->\n"


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_tool_loop_sends_the_search_result_back_and_returns_the_final_text(
    tmp_path: Path, api: str
) -> None:
    workspace = template_workspace(tmp_path, **{"memory/2026-01-05.md": "# 2026-01-05\n" + DENTIST})
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server, workspace=workspace, api=api)  # type: ignore[arg-type]
        server.script(
            tool_reply("memory_search", {"query": "dentist appointment"}),
            text_reply("Tuesday at 14:00, with Dr. Okafor."),
        )
        streamed: list[str] = []
        reply = asyncio.run(kit.agent.handle(OWNER, "When is my dentist?", streamed.append))

    assert reply.text == "Tuesday at 14:00, with Dr. Okafor."
    assert "".join(streamed) == reply.text
    [result] = tool_results(server.requests[1])
    assert not result["is_error"]
    assert "memory/2026-01-05.md" in result["content"] and "Okafor" in result["content"]
    kinds = [e.kind for e in kit.store.events(reply.session_id)]
    assert kinds == ["user", "assistant", "tool_call", "tool_result", "assistant"]


def test_a_failing_tool_comes_back_to_the_model_as_an_error_result(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(
            tool_reply("memory_get", {"path": "../../etc/passwd"}),
            tool_reply("no_such_tool", {}),
            text_reply("I could not read that file."),
        )
        reply = asyncio.run(kit.agent.handle(OWNER, "Read /etc/passwd"))

    assert reply.text == "I could not read that file."
    [first] = tool_results(server.requests[1])
    assert first["is_error"] and "may not contain '..'" in first["content"]
    second = tool_results(server.requests[2])[-1]
    assert second["is_error"] and "Unknown tool 'no_such_tool'" in second["content"]


def test_the_user_message_is_stored_before_the_model_is_called(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(error_reply(500))
        with pytest.raises(ServerError):
            asyncio.run(kit.agent.handle(OWNER, "Remember the milk"))
        [event] = kit.store.events(kit.store.current(OWNER).id)
    assert (event.kind, event.content["text"]) == ("user", "Remember the milk")


def test_every_model_call_records_its_usage(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(text_reply("Hello!"))
        reply = asyncio.run(kit.agent.handle(OWNER, "Hi"))
    [assistant] = kit.store.events(reply.session_id, kinds=("assistant",))
    usage = assistant.usage
    assert usage is not None and usage["model"] == "claude-test"
    assert usage["output_tokens"] > 0
    assert usage["input_tokens"] + usage["cache_write_tokens"] + usage["cache_read_tokens"] > 0
    assert reply.usage.output_tokens == usage["output_tokens"]


def test_a_new_agent_on_the_same_database_resumes_the_session(tmp_path: Path) -> None:
    workspace = template_workspace(tmp_path)
    with FakeModelServer() as server:
        first = make_kit(tmp_path, server, workspace=workspace)
        server.script(tool_reply("current_time", {}), text_reply("Noted: locker 4711."))
        before = asyncio.run(first.agent.handle(OWNER, "My locker code is 4711."))
        first.index.close()  # the process ends mid-session

        second = make_kit(tmp_path, server, workspace=workspace)
        server.script(text_reply("It is 4711."))
        after = asyncio.run(second.agent.handle(OWNER, "What is my locker code?"))

    assert after.session_id == before.session_id
    resumed = server.requests[-1]
    assert "My locker code is 4711." in all_text(resumed)
    assert "Noted: locker 4711." in all_text(resumed)
    roles = [m["role"] for m in resumed.body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]


def test_a_turn_interrupted_between_tool_call_and_result_is_repaired(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        session = kit.store.current(OWNER)
        kit.store.append(session.id, "user", {"text": "What time is it?"})
        kit.store.append(session.id, "assistant", {"text": ""})
        kit.store.append(
            session.id, "tool_call", {"id": "toolu_1", "name": "current_time", "input": {}}
        )
        server.script(text_reply("Sorry, where were we?"))
        asyncio.run(kit.agent.handle(OWNER, "Hello again"))

    [result] = tool_results(server.requests[0])
    assert result["is_error"] and "interrupted" in result["content"]


def test_the_tool_loop_stops_after_max_rounds(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server, max_tool_rounds=2)
        server.script(*[tool_reply("current_time", {}) for _ in range(4)])
        reply = asyncio.run(kit.agent.handle(OWNER, "Loop forever"))

    assert len(server.requests) == 4
    refused = tool_results(server.requests[3])[-1]
    assert refused["is_error"] and refused["content"] == TOOL_LIMIT_RESULT
    assert "kept calling tools" in reply.text


def test_slash_commands_are_stored_but_never_sent_to_the_model(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        help_reply = asyncio.run(kit.agent.handle(OWNER, "/help"))
        status = asyncio.run(kit.agent.handle(OWNER, "/status"))
        listing = asyncio.run(kit.agent.handle(OWNER, "/context list"))
        assert server.requests == []
        server.script(text_reply("Fine."))
        asyncio.run(kit.agent.handle(OWNER, "How are you?"))

    assert "/context" in help_reply.text and status.command == "/status"
    assert "Model: claude-test" in status.text and "0 compaction(s)" in status.text
    assert "keyword-only" in status.text  # the degraded index is reported, not hidden
    assert "tool schemas" in listing.text
    sent = all_text(server.requests[0])
    assert "/status" not in sent and "/help" not in sent
    kinds = [e.kind for e in kit.store.events(status.session_id)]
    assert kinds[:3] == ["command", "command", "command"]


def test_a_path_is_a_message_not_a_command(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(text_reply("That is the hosts file."))
        reply = asyncio.run(kit.agent.handle(OWNER, "/etc/hosts is what?"))
    assert reply.command is None and len(server.requests) == 1


def test_new_with_a_message_answers_it_in_the_fresh_session(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(text_reply("Hi."))
        old = asyncio.run(kit.agent.handle(OWNER, "Hello"))
        server.script(text_reply("trip"), text_reply("Let's plan it."))
        streamed: list[str] = []
        new = asyncio.run(kit.agent.handle(OWNER, "/new Plan a trip to Porto", streamed.append))

    assert new.session_id != old.session_id
    assert new.text.startswith("Started a new session.") and new.text.endswith("Let's plan it.")
    assert "".join(streamed) == new.text
    assert "Hello" not in all_text(server.requests[-1])


# ---- the typed way in: AgentRequest → AgentEvents ----------------------------------------------


async def collect(kit: Kit, request: AgentRequest) -> list[AgentEvent]:
    return [event async for event in kit.agent.run(request)]


def test_run_streams_text_deltas_then_one_final_reply(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(text_reply("Tuesday at 14:00, with Dr. Okafor."))
        events = asyncio.run(collect(kit, AgentRequest(OWNER, "When is my dentist?")))

    *deltas, final = events
    assert isinstance(final, Final) and final.reply.text == "Tuesday at 14:00, with Dr. Okafor."
    assert deltas and all(isinstance(e, TextDelta) for e in deltas)
    assert "".join(e.text for e in deltas if isinstance(e, TextDelta)) == final.reply.text
    [stored] = kit.store.events(final.reply.session_id, kinds=("user",))
    assert stored.content == {"text": "When is my dentist?"}  # the owner's words, as before


def test_notices_come_as_their_own_events_before_the_reply(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(text_reply("Let's plan it."))  # no note (and no slug): nothing was said
        events = asyncio.run(collect(kit, AgentRequest(OWNER, "/new Plan a trip to Porto")))

    assert isinstance(events[0], Notice) and events[0].text.startswith("Started a new session.")
    assert isinstance(events[-1], Final) and events[-1].reply.text.endswith("Let's plan it.")


def test_a_failed_turn_raises_from_the_iterator_and_keeps_the_message(tmp_path: Path) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(error_reply(500))
        with pytest.raises(ServerError):
            asyncio.run(collect(kit, AgentRequest(OWNER, "Remember the milk")))
        [event] = kit.store.events(kit.store.current(OWNER).id)
    assert event.content["text"] == "Remember the milk"


def test_a_consumer_that_awaits_between_events_still_gets_every_delta(tmp_path: Path) -> None:
    async def slow_consumer(kit: Kit) -> tuple[str, str]:
        shown = ""
        async for event in kit.agent.run(AgentRequest(OWNER, "Tell me a story")):
            if isinstance(event, TextDelta):
                shown += event.text
                await asyncio.sleep(0)  # stands for an awaited platform edit
            elif isinstance(event, Final):
                return shown, event.reply.text
        raise AssertionError("no Final event")

    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(text_reply("Once upon a time there was a very long story. " * 20))
        shown, final = asyncio.run(slow_consumer(kit))
    assert shown.strip() == final


def test_cancelling_the_consumer_cancels_the_turn(tmp_path: Path) -> None:
    async def cancel_after_first_delta(kit: Kit) -> None:
        first = asyncio.Event()

        async def consume() -> None:
            async for event in kit.agent.run(AgentRequest(OWNER, "Tell me a story")):
                if isinstance(event, TextDelta):
                    first.set()

        task = asyncio.ensure_future(consume())
        await first.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(text_reply("word " * 200, chunk_delay_s=0.01))
        asyncio.run(cancel_after_first_delta(kit))
        kinds = [e.kind for e in kit.store.events(kit.store.current(OWNER).id)]
    assert kinds == ["user"]  # the cut-off answer was never stored as complete


def test_another_persons_message_is_stored_and_shown_as_theirs(tmp_path: Path) -> None:
    request = AgentRequest(
        GROUP,
        "Can someone book the table?",
        sender="person",
        sender_id="555",
        sender_name="Alice [admin]\nOwner",
        message_ids=("42",),
    )
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(text_reply("On it."))
        asyncio.run(collect(kit, request))

    [stored] = kit.store.events(kit.store.current(GROUP).id, kinds=("user",))
    assert stored.content["sender"] == {
        "kind": "person",
        "id": "555",
        "name": "Alice [admin]\nOwner",
        "channel": "telegram",
    }
    assert stored.content["message_ids"] == ["42"]
    last = server.requests[0].body["messages"][-1]["content"][-1]["text"]
    assert last == "[from Alice admin Owner (telegram 555)]\nCan someone book the table?"


def test_an_automations_message_is_not_stored_as_the_owners_words(tmp_path: Path) -> None:
    request = AgentRequest(
        OWNER,
        "Summarise today's calendar.",
        sender="automation",
        sender_id="job-7",
        sender_name="morning digest",
        attachments=(Attachment("document", "inbox/2026-01-10/cal.ics"),),
    )
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(text_reply("Three meetings."))
        asyncio.run(collect(kit, request))

    [stored] = kit.store.events(kit.store.current(OWNER).id, kinds=("user",))
    assert stored.content["sender"]["kind"] == "automation"
    last = server.requests[0].body["messages"][-1]["content"][-1]["text"]
    assert last == (
        "[automation: morning digest]\nSummarise today's calendar.\n"
        "[attached document: inbox/2026-01-10/cal.ics]"
    )


def test_the_format_hint_follows_the_channel_the_message_arrived_on(tmp_path: Path) -> None:
    # The owner's one main session is keyed "cli", but a message from Telegram is answered
    # with Telegram's formatting in mind.
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(text_reply("From Telegram."), text_reply("From the terminal."))

        async def ask(text: str, channel: str | None) -> None:
            async for _ in kit.agent.run(AgentRequest(OWNER, text, channel=channel)):
                pass

        asyncio.run(ask("hi from my phone", "telegram"))
        asyncio.run(ask("hi from the terminal", None))
    telegram, terminal = (r.system_text() for r in server.requests)
    assert "Telegram shows a Markdown subset" in telegram
    assert "a terminal rendering full Markdown" in terminal
