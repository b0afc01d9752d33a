"""The gateway's one way into the agent: `run_turn(runtime, request, on_text)`.

Everything the gateway knows about the agent's API is in this module: the typed entry
(`Agent.run(AgentRequest)`, streamed events) and resuming a turn that a stopped gateway began.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.policy import policy_for
from agent.requests import (
    AgentEvent,
    AgentRequest,
    Attachment,
    Final,
    Notice,
    SenderKind,
    TextDelta,
)
from agent.runtime import Agent, _Turn
from app.wiring import Runtime, build_runtime
from memory.store.sessions import SessionKey

if TYPE_CHECKING:
    from app.config import Settings

SILENT = "NO_REPLY"  # an answer that means "say nothing"

__all__ = ["Runtime", "TurnRequest", "TurnResult", "open_runtime", "run_turn"]


@dataclass(frozen=True)
class TurnRequest:
    key: SessionKey
    text: str
    sender: SenderKind  # "person" never gets owner-only tools or the owner's files
    sender_id: str | None = None
    sender_name: str | None = None
    attachments: tuple[Attachment, ...] = ()
    # The platform ids of the message(s) answered; they identify the turn in the transcript.
    message_ids: tuple[str, ...] = ()
    channel: str | None = None  # where the messages arrived (the reply's format)
    # The same messages were handed to the agent before a restart: what it stored then is used
    # (the user message is not stored twice; a stored final answer is returned as it is).
    resumed: bool = False


@dataclass(frozen=True)
class TurnResult:
    text: str
    command: str | None = None
    cut_off: bool = False  # the answer stopped early

    @property
    def silent(self) -> bool:
        return not self.text.strip() or self.text.strip() == SILENT


async def open_runtime(settings: Settings) -> Runtime:
    """The process's agent, index, watcher and model client (app/wiring.py)."""
    return await build_runtime(settings)


async def run_turn(
    runtime: Runtime, request: TurnRequest, on_text: Callable[[str], None]
) -> TurnResult:
    """Answer `request`, streaming text to `on_text`. Raises ModelError / MemoryError_ (worded
    as advice) when it cannot."""
    if request.resumed:
        resumed = await _resume(runtime.agent, request, on_text)
        if resumed is not None:
            return resumed
    agent_request = AgentRequest(
        request.key,
        request.text,
        sender=request.sender,
        sender_id=request.sender_id,
        sender_name=request.sender_name,
        attachments=request.attachments,
        message_ids=request.message_ids,
        channel=request.channel,
    )
    async for event in runtime.agent.run(agent_request):
        if isinstance(event, TextDelta):
            on_text(event.text)
        elif isinstance(event, Notice):
            on_text(event.text + "\n\n")
        elif isinstance(event, Final):
            return TurnResult(event.reply.text, event.reply.command, event.reply.cut_off)
    raise RuntimeError("the agent ended a turn without its Final event")


async def _resume(
    agent: Agent, request: TurnRequest, on_text: Callable[[str], None]
) -> TurnResult | None:
    """Finish a turn a stopped gateway began, from its transcript; None when the transcript
    does not end in this request's messages (then it is handled as a new one)."""
    # Uses the Agent's tool loop directly: `Agent.run` would store the user message again.
    key = request.key
    async with agent._locks.setdefault(str(key), asyncio.Lock()):
        session = await asyncio.to_thread(agent.store.current, key)
        users = await asyncio.to_thread(agent.store.events, session.id, kinds=("user",))
        if not users or not _same_turn(users[-1].content, request):
            return None
        tail = await asyncio.to_thread(agent.store.events, session.id, after_seq=users[-1].seq)
        if tail and tail[-1].kind == "assistant":  # answered; only the delivery was missing
            return TurnResult(str(tail[-1].content.get("text", "")))

        def emit(event: AgentEvent) -> None:
            if isinstance(event, TextDelta):
                on_text(event.text)

        policy = policy_for(key, request.sender)
        turn = _Turn(key, session, dict(users[-1].content), policy, emit)
        return TurnResult(await agent._tool_loop(turn), cut_off=turn.cut_off)


def _same_turn(content: dict[str, object], request: TurnRequest) -> bool:
    if request.message_ids:
        return content.get("message_ids") == list(request.message_ids)
    return content.get("text") == request.text
