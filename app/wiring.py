"""The composition root: the one place the memory index, session store, watcher, model client
and `Agent` are built from settings and wired together.

    runtime = await build_runtime(settings)
    try:
        async for event in runtime.agent.run(AgentRequest(key, text)): ...
    finally:
        await runtime.aclose()

`pinch chat` uses it, and so do the gateway and (later) the scheduler: nothing else constructs
an `Agent` from settings. Building opens the agent database and the index (blocking work, done in
a worker thread) but does not sync the index nor start the watcher: `await runtime.start()` does
both (the gateway); the chat calls `sync_index()` and `watcher.start()` itself, to show progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.active_memory import ActiveMemory
from agent.model.factory import ModelClient, create_model_client, preload
from agent.runtime import Agent
from app.automations.assembly import Automations, build_automations
from common.clock import Clock, owner_zone
from memory.errors import MemoryError_
from memory.index.index import MemoryIndex
from memory.index.watch import MemoryWatcher
from memory.lifecycle.signals import stop_recording
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
    _preloading: asyncio.Future[None] | None = None
    _closed: bool = False

    async def sync_index(self) -> None:
        """Bring the memory index up to date (raises the index's `MemoryError_` on failure) and
        get ready to search: after a rebuild that left a quarter of the file free, compact it;
        then start reading the vectors (150 MB at 100k chunks) in the background, so the first
        message finds them in memory. The chat and the gateway call this at start-up."""
        try:
            report = await asyncio.to_thread(self.index.sync)
            if report.rebuilt:
                await asyncio.to_thread(compact_if_worth_it, self.index.db)
        finally:
            await asyncio.to_thread(self.index.warm)

    async def start(self) -> None:
        """Sync the index and start the watcher (what a long-running process does first).

        A failed sync is logged, not raised: search serves the last complete index."""
        try:
            await self.sync_index()
        except MemoryError_ as exc:
            log.warning("The memory index could not be updated: %s", exc)
        self.watcher.start()

    async def aclose(self) -> None:
        """Stop the watcher, close the model clients and the database; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._preloading is not None:
            self._preloading.cancel()
        self.watcher.stop()
        await _close_model(self.model)
        self.index.close()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def build_runtime(
    settings: Settings, *, model: ModelClient | None = None, clock: Clock | None = None
) -> Runtime:
    """The runtime for `settings`. `model` and `clock` replace the configured ones (tests).

    The model SDK (seconds to import) starts loading in the background at once."""
    index = await asyncio.to_thread(
        MemoryIndex.open, settings.workspace_dir, settings.database_path, settings.memory
    )
    try:
        model = model or create_model_client(
            settings.agent.model,
            fallbacks=settings.agent.fallback_models,
            api_base=settings.agent.api_base,
            timeout_s=settings.agent.timeout_s,
            max_retries=settings.agent.max_retries,
        )
        clock = clock or Clock(owner_zone(settings.agent.timezone, settings.workspace_dir))
        if not settings.dreaming.enabled:
            stop_recording(index.db)  # no recall signals are kept for a disabled Dreaming
        store = SessionStore(index.db)
        agent = Agent(
            model=model,
            store=store,
            index=index,
            workspace=settings.workspace_dir,
            config=settings.agent,
            clock=clock,
        )
        agent.recall = ActiveMemory(
            model=model,
            store=store,
            tools=agent.tools,
            workspace=agent.workspace,
            config=settings.agent,
            index=index,
        )
    except BaseException:
        index.close()
        raise
    runtime = Runtime(
        settings=settings,
        index=index,
        store=store,
        model=model,
        agent=agent,
        watcher=MemoryWatcher(index),
        clock=clock,
        _preloading=asyncio.ensure_future(_preload_quietly(model)),
    )
    if settings.automations.enabled:  # the jobs, a scheduler the gateway starts, the tool
        runtime.automations = await asyncio.to_thread(build_automations, settings, index.db, clock)
        agent.tools.add(runtime.automations.tool)
    return runtime


async def _preload_quietly(model: ModelClient) -> None:
    with contextlib.suppress(Exception):  # the first reply imports it again, and says what failed
        await preload(model)


async def _close_model(model: ModelClient) -> None:
    for client in getattr(model, "clients", [model]):  # a FallbackClient holds several
        close = getattr(client, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()
