"""A request marked `resumed`: the agent finishes the turn a stopped gateway began, from the
transcript, without storing the message twice."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.model.errors import ModelError
from agent.requests import AgentRequest, Final
from agent.runtime import Agent
from tests.agent_support import OWNER, make_kit
from tests.fakes.model_server import FakeModelServer, error_reply, text_reply


def final_text(agent: Agent, request: AgentRequest) -> str:
    async def run() -> str:
        events = [event async for event in agent.run(request)]
        final = events[-1]
        assert isinstance(final, Final)
        return final.reply.text

    return asyncio.run(run())


def test_a_resumed_request_already_answered_returns_the_stored_answer_without_a_model_call(
    tmp_path: Path,
) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(text_reply("Stored answer."))
        first = AgentRequest(OWNER, "Hello", message_ids=("m1",))
        assert final_text(kit.agent, first) == "Stored answer."
        again = AgentRequest(OWNER, "Hello", message_ids=("m1",), resumed=True)
        assert final_text(kit.agent, again) == "Stored answer."
        assert len(server.requests) == 1
    users = kit.store.events(kit.store.current(OWNER).id, kinds=("user",))
    assert len(users) == 1


def test_a_resumed_request_whose_turn_failed_is_finished_without_storing_the_message_twice(
    tmp_path: Path,
) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(error_reply(400, "bad request"))
        with pytest.raises(ModelError):  # after the message was stored
            final_text(kit.agent, AgentRequest(OWNER, "Question", message_ids=("m2",)))
        server.script(text_reply("The answer."))
        again = AgentRequest(OWNER, "Question", message_ids=("m2",), resumed=True)
        assert final_text(kit.agent, again) == "The answer."
    session = kit.store.current(OWNER)
    kinds = [e.kind for e in kit.store.events(session.id)]
    assert kinds == ["user", "assistant"]


def test_a_resumed_request_the_transcript_does_not_end_in_is_handled_as_a_new_message(
    tmp_path: Path,
) -> None:
    with FakeModelServer() as server:
        kit = make_kit(tmp_path, server)
        server.script(text_reply("New answer."))
        request = AgentRequest(OWNER, "Never stored", message_ids=("m3",), resumed=True)
        assert final_text(kit.agent, request) == "New answer."
    users = kit.store.events(kit.store.current(OWNER).id, kinds=("user",))
    assert [u.content.get("message_ids") for u in users] == [["m3"]]
