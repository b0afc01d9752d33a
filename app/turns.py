"""The gateway's one way into the agent: `run_turn(runtime, request, on_text)`.

Everything the gateway knows about the agent's API is in this module, so moving to the typed
agent entry (app/wiring.py's `build_runtime`, an AgentRequest with a sender and streamed events)
is a change here only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from agent.model import ModelClient, create_model_client
from agent.runtime import Agent, _Turn
from memory.index import MemoryIndex
from memory.sessions import SessionKey, SessionStore
from memory.watch import MemoryWatcher

if TYPE_CHECKING:
    from app.config import Settings

Sender = Literal["owner", "person", "automation", "system"]
SILENT = "NO_REPLY"  # an answer that means "say nothing"


@dataclass(frozen=True)
class TurnRequest:
    key: SessionKey
    text: str
    sender: Sender  # "person" never gets owner-only tools or the owner's files
    # The same message was handed to the agent before a restart: what it stored then is used
    # (the user message is not stored twice; a stored final answer is returned as it is).
    resumed: bool = False


@dataclass(frozen=True)
class TurnResult:
    text: str
    command: str | None = None

    @property
    def silent(self) -> bool:
        return not self.text.strip() or self.text.strip() == SILENT


@dataclass
class Runtime:
    """The agent and what it needs, opened once per process."""

    index: MemoryIndex
    agent: Agent
    model: ModelClient
    watcher: MemoryWatcher

    async def close(self) -> None:
        self.watcher.stop()
        for client in getattr(self.model, "clients", [self.model]):
            close = getattr(client, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()
        self.index.close()


async def open_runtime(settings: Settings) -> Runtime:
    """Open the memory index (syncing it with the files), the model client and the agent."""
    index = await asyncio.to_thread(
        MemoryIndex.open, settings.workspace_dir, settings.database_path, settings.memory
    )
    model = create_model_client(
        settings.agent.model,
        fallbacks=settings.agent.fallback_models,
        api_base=settings.agent.api_base,
        timeout_s=settings.agent.timeout_s,
        max_retries=settings.agent.max_retries,
    )
    agent = Agent(
        model=model,
        store=SessionStore(index.db),
        index=index,
        workspace=settings.workspace_dir,
        config=settings.agent,
    )
    return Runtime(index=index, agent=agent, model=model, watcher=MemoryWatcher(index))


async def run_turn(
    runtime: Runtime, request: TurnRequest, on_text: Callable[[str], None]
) -> TurnResult:
    """Answer `request`, streaming text to `on_text`. Raises ModelError / MemoryError_ (worded
    as advice) when it cannot."""
    if request.resumed:
        resumed = await _resume(runtime.agent, request, on_text)
        if resumed is not None:
            return resumed
    reply = await runtime.agent.handle(request.key, request.text, on_text=on_text)
    return TurnResult(reply.text, reply.command)


async def _resume(
    agent: Agent, request: TurnRequest, on_text: Callable[[str], None]
) -> TurnResult | None:
    """Finish a turn a stopped gateway began, from its transcript; None when the transcript
    does not end in this request's message (then it is handled as a new one)."""
    # Uses the Agent's private tool loop until the typed agent entry takes request ids.
    key = request.key
    async with agent._locks.setdefault(str(key), asyncio.Lock()):
        session = await asyncio.to_thread(agent.store.current, key)
        events = await asyncio.to_thread(agent.store.events, session.id)
        users = [i for i, e in enumerate(events) if e.kind == "user"]
        if not users or events[users[-1]].content.get("text") != request.text:
            return None
        tail = events[users[-1] + 1 :]
        if tail and tail[-1].kind == "assistant":  # answered; only the delivery was missing
            return TurnResult(str(tail[-1].content.get("text", "")))
        content = dict(events[users[-1]].content)
        answer = await agent._tool_loop(_Turn(key, session, content, on_text))
        return TurnResult(answer)
