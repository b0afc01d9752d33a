"""Long polling: the getUpdates loop and its watchdog.

`Poller` confirms an update's offset only after the gateway's handler returned for it, so a
crash re-delivers and never loses. It recovers from 409 Conflict (clearing a webhook again),
network loss and 5xx with backoff, honours 429, and rebuilds its connection when no getUpdates
has completed for `poll_stall_s` (a poller that looks connected but receives nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from telegram import Bot
from telegram.error import (
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TimedOut,
)

log = logging.getLogger("channels.telegram.adapter")

ALLOWED_UPDATES = ["message", "channel_post"]
_HANDLER_ATTEMPTS = 5  # the gateway failing to take the same update this often: skip it


def retry_after_s(error: RetryAfter) -> float:
    """Seconds Telegram asked to wait (PTB 22 warns on the public int/timedelta attribute)."""
    value: float | timedelta = getattr(error, "_retry_after", None) or error.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class RawUpdatesBot(Bot):
    """A Bot whose getUpdates returns the raw JSON, so one malformed update can be skipped
    instead of failing the whole batch (PTB's `get_updates` parses all or raises)."""

    async def get_raw_updates(
        self, *, offset: int, timeout: int, read_timeout: float, limit: int = 100
    ) -> list[Any]:
        data = {
            "offset": offset or None,
            "timeout": timeout,
            "limit": limit,
            "allowed_updates": ALLOWED_UPDATES,
        }
        result = await self._post("getUpdates", data, read_timeout=read_timeout)
        return result if isinstance(result, list) else []


class Backoff:
    def __init__(self, base_s: float, max_s: float = 30.0) -> None:
        self.base_s = base_s
        self.max_s = max_s
        self.failures = 0

    def next_delay(self) -> float:
        self.failures += 1
        return min(self.base_s * 2 ** (self.failures - 1), self.max_s)

    def reset(self) -> None:
        self.failures = 0


@dataclass
class PollHealth:
    started_at: float = 0.0
    last_completed_at: float | None = None  # time.monotonic of the last completed getUpdates
    last_error: str | None = None
    last_error_at: float | None = None
    rebuilds: int = 0


class Poller:
    """The getUpdates loop and its watchdog."""

    def __init__(
        self,
        make_bot: Callable[[], RawUpdatesBot],
        *,
        accept: Callable[[Any], Awaitable[asyncio.Future[None]]],
        drop_unfinished: Callable[[], Awaitable[None]],
        poll_timeout_s: int,
        poll_stall_s: float,
        album_poll_s: float,
        drop_pending_updates: bool,
        retry_base_s: float,
        before_polling: Callable[[], Awaitable[None]],
        describe: Callable[[BaseException], str],
    ) -> None:
        self._make_bot = make_bot
        self._bot = make_bot()
        self._accept = accept
        self._drop_unfinished = drop_unfinished
        self._poll_timeout_s = poll_timeout_s
        self._poll_stall_s = poll_stall_s
        self._album_poll_s = album_poll_s
        self._drop_pending = drop_pending_updates
        self._clear_webhook = True
        self._before_polling = before_polling
        self._ready = False
        self._describe = describe
        self._backoff = Backoff(retry_base_s)
        self._handler_backoff = Backoff(retry_base_s)
        self._alive_at = 0.0  # last sign of life of the loop: a completed poll or dispatch
        self._closing: set[asyncio.Task[None]] = set()
        self._next_offset = 0  # the first update_id not yet handed to the gateway
        self._confirmed_offset = 0  # the offset Telegram was last told
        self._pending: dict[int, asyncio.Future[None]] = {}
        self._handler_failures: dict[int, int] = {}
        self._dispatching = False
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self.health = PollHealth()

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        self.health.started_at = self._alive_at = time.monotonic()
        self._task = asyncio.create_task(self._run(), name="telegram-poll")
        self._watchdog = asyncio.create_task(self._watch(), name="telegram-poll-watchdog")

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop polling. A hand-over to the gateway in progress gets `grace_s` to finish."""
        self._stopping = True
        if self._watchdog:
            self._watchdog.cancel()
        if self._task and self._dispatching:
            await asyncio.wait({self._task}, timeout=grace_s)
        for task in (self._watchdog, self._task):
            if task:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._task = self._watchdog = None
        await self._drop_unfinished()
        await self._confirm_on_exit()
        await _shutdown(self._bot)

    # -- the loop
    async def _run(self) -> None:
        while not self._stopping:
            try:
                if not self._ready:
                    await self._before_polling()
                    self._ready = True
                if self._clear_webhook:
                    # Also drops the backlog when configured — once, at start, never on a retry.
                    await self._bot.delete_webhook(drop_pending_updates=self._drop_pending)
                    self._clear_webhook = self._drop_pending = False
                offset = self._offset()
                raw = await self._bot.get_raw_updates(
                    offset=offset,
                    timeout=self._poll_timeout_s,
                    read_timeout=self._poll_timeout_s + 15,
                )
                self._confirmed_offset = max(self._confirmed_offset, offset)
                self.health.last_completed_at = self._alive_at = time.monotonic()
                if self._backoff.failures:
                    log.info(
                        "Telegram polling recovered after %d failed attempts",
                        self._backoff.failures,
                    )
                    self._backoff.reset()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                await self._after_error(error)
                continue
            await self._dispatch(raw)

    async def _dispatch(self, raw: list[Any]) -> None:
        self._dispatching = True
        try:
            fresh = 0
            for item in raw:
                update_id = item.get("update_id") if isinstance(item, dict) else None
                if isinstance(update_id, int) and update_id < self._next_offset:
                    continue  # already handed over (or pending in an album)
                fresh += 1
                done = await self._accept(item)
                if isinstance(update_id, int):
                    self._next_offset = max(self._next_offset, update_id + 1)
                    if not done.done():
                        self._pending[update_id] = done
                        continue
                    if not self._settled(update_id, done):
                        self._next_offset = update_id  # fetch it again after the backoff
                        await asyncio.sleep(self._handler_backoff.next_delay())
                        return
            self._settle_albums()
            if self._pending and not fresh:
                # Only album parts came back: the offset stays below them until their album is
                # handed over, so a long poll returns at once. Poll briefly instead of in a tight
                # loop, to still catch the album's remaining parts.
                await asyncio.wait(set(self._pending.values()), timeout=self._album_poll_s)
                self._settle_albums()
        finally:
            self._dispatching = False
            self._alive_at = time.monotonic()

    def _settled(self, update_id: int, done: asyncio.Future[None]) -> bool:
        """True if the update is finished with (handled, or given up on after retries)."""
        error = done.exception()
        if error is None:
            self._handler_failures.pop(update_id, None)
            self._handler_backoff.reset()
            return True
        failures = self._handler_failures.get(update_id, 0) + 1
        self._handler_failures[update_id] = failures
        if failures >= _HANDLER_ATTEMPTS:
            log.error(
                "Telegram: gave up on update %s after %d failed hand-overs (%s); skipping it",
                update_id,
                failures,
                self._describe(error),
            )
            self._handler_failures.pop(update_id, None)
            return True
        log.warning(
            "Telegram: the gateway did not take update %s (%s); it will be fetched again",
            update_id,
            self._describe(error),
        )
        return False

    def _settle_albums(self) -> None:
        for update_id, done in list(self._pending.items()):
            if done.cancelled():  # an album dropped at stop: leave it for Telegram to re-deliver
                self._next_offset = min(self._next_offset, update_id)
            elif done.done():
                del self._pending[update_id]
                if not self._settled(update_id, done):
                    self._next_offset = min(self._next_offset, update_id)

    def _offset(self) -> int:
        self._settle_albums()
        if self._pending:
            return min(self._pending)
        return self._next_offset

    async def _after_error(self, error: BaseException) -> None:
        delay = self._backoff.next_delay()
        if isinstance(error, RetryAfter):
            delay = max(delay, retry_after_s(error))
            line = f"Telegram asked to slow down (429); polling again in {delay:.0f} s"
        elif isinstance(error, Conflict):
            self._clear_webhook = True
            line = (
                "Telegram answered 409 Conflict: another poller or a webhook is using this bot "
                f"token ({error.message}); clearing the webhook and retrying in {delay:.0f} s — "
                "if this repeats, stop the other process using the token"
            )
        elif isinstance(error, InvalidToken | Forbidden):
            delay = self._backoff.max_s
            line = (
                f"Telegram refused the bot token ({error.message}); check "
                f"PINCH_TELEGRAM__BOT_TOKEN (from @BotFather); retrying in {delay:.0f} s"
            )
        elif isinstance(error, TimedOut | NetworkError):
            line = f"Telegram unreachable ({self._describe(error)}); retrying in {delay:.0f} s"
        else:
            line = f"Telegram polling failed ({self._describe(error)}); retrying in {delay:.0f} s"
        log.warning(line)
        self.health.last_error = line
        self.health.last_error_at = time.monotonic()
        await asyncio.sleep(delay)

    # -- the watchdog
    async def _watch(self) -> None:
        interval = max(0.05, min(self._poll_stall_s / 4, 5.0))
        while True:
            await asyncio.sleep(interval)
            task = self._task
            if task is not None and task.done():
                error = None if task.cancelled() else task.exception()
                reason = self._describe(error) if error else "no error"
                log.error("Telegram polling stopped unexpectedly (%s); restarting it", reason)
                await self._rebuild()
                continue
            # Only the poll loop's own progress counts: sends and other API traffic are not a
            # sign that updates are arriving.
            age = time.monotonic() - max(self._alive_at, self.health.started_at)
            if not self._dispatching and age > self._poll_stall_s:
                line = (
                    f"Telegram polling stalled: no completed getUpdates for {age:.0f} s; "
                    "rebuilding the connection"
                )
                log.warning(line)
                self.health.last_error = line
                self.health.last_error_at = time.monotonic()
                await self._rebuild()

    async def _rebuild(self) -> None:
        """Drop the poll connection (tearing it down must not hang) and poll afresh."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, timeout=5)
        old = self._bot
        self._bot = self._make_bot()
        closing = asyncio.create_task(_shutdown(old))
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)
        self.health.rebuilds += 1
        self.health.started_at = time.monotonic()
        self._clear_webhook = True
        self._task = asyncio.create_task(self._run(), name="telegram-poll")

    async def _confirm_on_exit(self) -> None:
        """Tell Telegram which updates were handed over, so a restart doesn't re-fetch them."""
        offset = self._offset()
        if offset > self._confirmed_offset:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self._bot.get_raw_updates(offset=offset, timeout=0, read_timeout=5, limit=1),
                    timeout=5,
                )


async def _shutdown(bot: Bot) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(bot.shutdown(), timeout=5)
