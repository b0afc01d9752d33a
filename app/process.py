"""`Runtime`: what one running Pinch process shares — one memory index, one session store, one
model client, one `Agent`, one watcher — and how it starts and closes. Built only by the
composition root (app/wiring.py `build_runtime`); the gateway, the chat and the scheduler use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.mcp.mcp_tools import McpServers
from agent.model.factory import ModelClient
from agent.runtime import Agent
from app.automations.assembly import Automations
from common.clock import Clock
from memory.errors import MemoryError_
from memory.index.index import MemoryIndex
from memory.index.watch import MemoryWatcher
from memory.store.compact import compact_if_worth_it
from memory.store.sessions import SessionStore

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Everything one running Pinch process shares: one index, one store, one agent."""

    settings: Settings
    index: MemoryIndex
    store: SessionStore
    model: ModelClient
    agent: Agent
    watcher: MemoryWatcher
    clock: Clock
    automations: Automations | None = None  # when [automations] is on
    mcp: McpServers | None = None  # the MCP servers ([mcp.servers.*]); started by start_mcp
    _preloading: asyncio.Future[None] | None = None
    _closed: bool = False

    async def sync_index(self) -> None:
        """Bring the memory index up to date (raises the index's `MemoryError_` on failure) and
        get ready to search: after a rebuild that left a tenth of the file free, compact it.
        The model and the vectors (39 MB at 100k chunks) start loading first, in the background,
        while the sync walks the files; so a first message never waits on a full scan of the
        vectors, even one that comes during the sync. The chat and the gateway call this at
        start-up."""
        await asyncio.to_thread(self.index.warm)
        try:
            report = await asyncio.to_thread(self.index.sync)
            if report.rebuilt:
                await asyncio.to_thread(compact_if_worth_it, self.index.db)
        finally:  # a rebuild swapped in another generation: read that one (else nothing to do)
            await asyncio.to_thread(self.index.warm)

    async def start(self) -> None:
        """Sync the index, start the watcher and the MCP servers (what a long-running process
        does first).

        A failed sync is logged, not raised: search serves the last complete index."""
        try:
            await self.sync_index()
        except MemoryError_ as exc:
            log.warning("The memory index could not be updated: %s", exc)
        self.watcher.start()
        await self.start_mcp()

    async def start_mcp(self) -> None:
        """Start the MCP servers (lazy ones on first use), waiting a bounded time for them; a
        server that fails is logged and retried, never raised. The chat and the gateway call
        this at start-up."""
        if self.mcp is not None:
            await self.mcp.start()

    async def aclose(self) -> None:
        """Stop the MCP servers and the watcher, close the model clients and the database;
        safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._preloading is not None:
            self._preloading.cancel()
        await self.agent.drain()  # notes of sessions ended with /new are not lost
        if self.mcp is not None:  # their processes end here: no orphans
            await self.mcp.aclose()
        await asyncio.to_thread(self.watcher.stop)  # up to a second: not on the event loop
        await _close_model(self.model)
        self.index.close()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _close_model(model: ModelClient) -> None:
    for client in getattr(model, "clients", [model]):  # a FallbackClient holds several
        close = getattr(client, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()
