"""The turn loop: the real anthropic SDK and litellm against the scripted model server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.model_errors import ServerError
from agent.runtime import TOOL_LIMIT_RESULT
from tests.agent_support import OWNER, all_text, make_kit, template_workspace, tool_results
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
