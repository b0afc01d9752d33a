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
from agent.runtime import Agent
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
    reply = await runtime.agent.handle(request.key, request.text, on_text=on_text)
    return TurnResult(reply.text, reply.command)
