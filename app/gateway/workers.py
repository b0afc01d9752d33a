"""Per-session workers: one task per session with queued messages, so the turns of one session
run one at a time, in order, while sessions run in parallel up to `max_concurrent` turns — and,
with `shared` (one `TurnSlots` for every agent of a `pinch gateway` process), up to that many
turns in the whole process. A session waiting for a slot leaves its messages in the durable
queue (claimed only once a slot is free); slots are handed out first come, first served.

A worker first waits until the session's newest message is `collect_window_s` old (messages
sent in a burst become one turn), then asks for the next batch and runs it, until the session's
queue is empty. `drain()` lets no new batch start (queued messages stay queued for the next
start); the running ones are the caller's to wait for or cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from app.gateway.queue import Batch

log = logging.getLogger("pinch.gateway")

# The next batch of a session's queued messages, or None (blocking: runs in a worker thread).
NextBatch = Callable[[str], Batch | None]
# Runs one batch's turn; False stops the session's worker (its batch waits for a restart).
RunBatch = Callable[[Batch], Awaitable[bool]]


class TurnSlots:
    """The turns one process runs at once, all its agents together (`[gateway]
    max_concurrent_turns_per_process`): beyond it a turn waits for a slot (FIFO)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._free = asyncio.Semaphore(limit)
        self.running = 0
        self.waiting = 0
        self.peak = 0  # the most turns that ran at once (for tests and benchmarks)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        self.waiting += 1
        try:
            await self._free.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            yield
        finally:
            self.running -= 1
            self._free.release()


class SessionWorkers:
    def __init__(
        self,
        next_batch: NextBatch,
        run_batch: RunBatch,
        *,
        collect_window_s: float,
        max_concurrent: int,
        shared: TurnSlots | None = None,
    ) -> None:
        self.next_batch = next_batch
        self.run_batch = run_batch
        self.collect_window_s = collect_window_s
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._dirty: set[str] = set()
        self._arrived: dict[str, float] = {}
        self._slots = asyncio.Semaphore(max_concurrent)
        self._shared = shared
        self._draining = False

    def busy(self, key: str) -> bool:
        """Whether `key` has a worker (a turn running or about to)."""
        return key in self._workers

    def arrived(self, key: str) -> None:
        """A message of `key` was queued just now (its collect window starts again)."""
        self._arrived[key] = time.monotonic()

    def wake(self, key: str, collect: bool = True) -> None:
        """Make sure `key`'s queue is worked on (a no-op once draining)."""
        self._dirty.add(key)
        if key in self._workers or self._draining:
            return
        self._workers[key] = asyncio.ensure_future(self._session_worker(key, collect))

    def drain(self) -> list[asyncio.Task[None]]:
        """Start no more batches; returns the workers still running."""
        self._draining = True
        return [task for task in self._workers.values() if not task.done()]

    def cancel_all(self) -> None:
        for task in self._workers.values():
            task.cancel()

    async def idle(self) -> None:
        """Wait until no session has a turn running or queued."""
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)

    async def _session_worker(self, key: str, collect: bool) -> None:
        failed = False
        try:
            await self._work_on(key, collect)
        except Exception:
            failed = True
            log.exception("The queue of %s stalled; it resumes with its next message", key)
        finally:
            # Synchronously, with no await in between: a message accepted after the last
            # `next_batch` found nothing has set `_dirty` and gets a new worker.
            del self._workers[key]
            if key in self._dirty and not self._draining and not failed:
                self.wake(key, collect)

    async def _work_on(self, key: str, collect: bool) -> None:
        while not self._draining:
            if collect:
                await self._settle(key)
            async with self._slots, self._process_slot():
                if self._draining:
                    return
                self._dirty.discard(key)
                batch = await asyncio.to_thread(self.next_batch, key)
                if batch is None:
                    if key in self._dirty:
                        continue
                    return
                if not await self.run_batch(batch):
                    return

    def _process_slot(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self._shared.slot() if self._shared is not None else contextlib.nullcontext()

    async def _settle(self, key: str) -> None:
        """Wait until the session's newest message is `collect_window_s` old."""
        window = self.collect_window_s
        while True:
            wait = self._arrived.get(key, 0.0) + window - time.monotonic()
            if wait <= 0:
                return
            await asyncio.sleep(wait)
