"""Receiving Telegram updates: long polling (with its watchdog) or a webhook, one pipeline.

`UpdateDispatcher` turns raw updates into `InboundMessage`s: it skips repeated update_ids,
skips malformed and unknown updates with one log line, and collects an album's parts (several
updates sharing a media_group_id) into one message. `Poller` runs getUpdates and confirms an
update's offset only after the gateway's handler returned for it, so a crash re-delivers and
never loses. It recovers from 409 Conflict (clearing a webhook again), network loss and 5xx
with backoff, honours 429, and rebuilds its connection when no getUpdates has completed for
`poll_stall_s` (a poller that looks connected but receives nothing). `TokenLock` lets only one
process on the machine poll a bot token. `WebhookReceiver` serves Telegram's webhook POSTs with
the secret token checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import hmac
import json
import logging
import os
import tempfile
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiohttp import web
from telegram import Bot, Message, Update
from telegram.error import (
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TimedOut,
)

from channels.base import ChannelError, InboundMessage, MessageHandler
from channels.telegram.inbound import MessageConverter, is_user_content

log = logging.getLogger("channels.telegram.adapter")

ALLOWED_UPDATES = ["message", "channel_post"]
_SEEN_CAPACITY = 4096
_HANDLER_ATTEMPTS = 5  # the gateway failing to take the same update this often: skip it


def retry_after_s(error: RetryAfter) -> float:
    """Seconds Telegram asked to wait (PTB 22 warns on the public int/timedelta attribute)."""
    value: float | timedelta = getattr(error, "_retry_after", None) or error.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def machine_lock_dir() -> Path:
    """Where locks shared by every Pinch process of this user on this machine live, whatever
    its PINCH_HOME: $XDG_RUNTIME_DIR/pinch, else <system temp dir>/pinch-<uid>."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "pinch"
    return Path(tempfile.gettempdir()) / f"pinch-{os.getuid()}"


class TokenLock:
    """One poller per bot token on this machine: an exclusive flock on a file named by a hash
    of the token (never the token itself) in `machine_lock_dir()` — so two data directories
    can't both poll one bot — and one in `state_dir` (this data directory's own check, which
    holds even when two processes see different lock directories). Released on `release` or
    exit."""

    def __init__(self, state_dir: Path, token: str, machine_dir: Path | None = None) -> None:
        name = f"telegram-{hashlib.sha256(token.encode()).hexdigest()[:16]}.lock"
        self.path = state_dir / name
        self.machine_path = (machine_dir or machine_lock_dir()) / name
        self._fds: list[int] = []

    def acquire(self) -> None:
        try:
            for path in dict.fromkeys((self.machine_path, self.path)):
                self._fds.append(_lock_file(path))
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        while self._fds:
            fd = self._fds.pop()
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _lock_file(path: Path) -> int:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ChannelError(
            f"Another Pinch process (pid {holder}) is already receiving this Telegram bot's "
            "messages, perhaps with another PINCH_HOME; stop it first — two pollers on one "
            "token make Telegram answer 409 Conflict and messages go missing."
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


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


@dataclass
class _Album:
    messages: list[Message] = field(default_factory=list)
    update_ids: list[int] = field(default_factory=list)
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    timer: asyncio.Task[None] | None = None
    # Later messages of the same chat wait behind the album, so the gateway sees chat order.
    followers: list[tuple[Message, int, asyncio.Future[None]]] = field(default_factory=list)


class UpdateDispatcher:
    """Raw update → `on_message`, shared by polling and the webhook."""

    def __init__(
        self,
        bot: Bot,
        converter: MessageConverter,
        on_message: MessageHandler,
        *,
        album_wait_s: float,
    ) -> None:
        self._bot = bot
        self._converter = converter
        self._on_message = on_message
        self._album_wait_s = album_wait_s
        self._seen: OrderedDict[int, None] = OrderedDict()
        self._albums: dict[tuple[int, str], _Album] = {}
        self.last_update_at: float | None = None

    async def accept(self, raw: Any) -> asyncio.Future[None]:
        """Take one update; the returned future completes once the gateway's handler returned
        for it (at once for a skipped update; after the album's wait for an album part). It
        raises if the handler raised, and the update is then not marked seen."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        update_id = raw.get("update_id") if isinstance(raw, dict) else None
        if not isinstance(update_id, int):
            log.warning("Telegram: skipped an update without an update_id")
            done.set_result(None)
            return done
        if update_id in self._seen:
            log.info("Telegram: update %s delivered again; already handled", update_id)
            done.set_result(None)
            return done
        self._remember(update_id)
        self.last_update_at = time.time()
        message = self._message(raw, update_id)
        if message is None:
            done.set_result(None)
            return done
        if message.media_group_id:
            return self._add_to_album(message, update_id)
        waiting = self._album_in_chat(message.chat.id)
        if waiting is not None:
            waiting.followers.append((message, update_id, done))
            return done
        try:
            await self._deliver([message], [update_id])
        except Exception as error:
            done.set_exception(error)
        else:
            done.set_result(None)
        return done

    async def close(self) -> None:
        """Drop unfinished albums (their updates are unconfirmed, so Telegram re-delivers)."""
        for album in self._albums.values():
            if album.timer:
                album.timer.cancel()
            for future in [album.done, *(f for _, _, f in album.followers)]:
                if not future.done():
                    future.cancel()
        self._albums.clear()

    def _message(self, raw: dict[str, Any], update_id: int) -> Message | None:
        try:
            update = Update.de_json(raw, self._bot)
        except Exception as error:
            log.warning(
                "Telegram: skipped malformed update %s (%s)", update_id, type(error).__name__
            )
            return None
        message = update.message or update.channel_post
        if message is None:
            kinds = ", ".join(k for k in raw if k != "update_id") or "empty"
            log.info("Telegram: skipped update %s of a kind Pinch ignores (%s)", update_id, kinds)
            return None
        if not is_user_content(message, self._converter.identity):
            return None
        return message

    def _add_to_album(self, message: Message, update_id: int) -> asyncio.Future[None]:
        key = (message.chat.id, str(message.media_group_id))
        album = self._albums.get(key)
        if album is None:
            album = self._albums[key] = _Album()
        album.messages.append(message)
        album.update_ids.append(update_id)
        if album.timer:  # each new part restarts the wait
            album.timer.cancel()
        album.timer = asyncio.create_task(self._flush_album_later(key, album))
        return album.done

    def _album_in_chat(self, chat_id: int) -> _Album | None:
        return next((a for (chat, _), a in self._albums.items() if chat == chat_id), None)

    async def _flush_album_later(self, key: tuple[int, str], album: _Album) -> None:
        await asyncio.sleep(self._album_wait_s)
        self._albums.pop(key, None)
        failure: Exception | None = None
        try:
            await self._deliver(album.messages, album.update_ids)
        except Exception as error:
            failure = error
            album.done.set_exception(error)
        else:
            album.done.set_result(None)
        for message, update_id, done in album.followers:
            if failure is None:
                try:
                    await self._deliver([message], [update_id])
                except Exception as error:
                    failure = error
            if failure is None:
                done.set_result(None)
            else:  # keep chat order: what follows a failed hand-over is fetched again too
                self._seen.pop(update_id, None)
                done.set_exception(failure)

    async def _deliver(self, messages: list[Message], update_ids: list[int]) -> None:
        try:
            inbound: InboundMessage = await self._converter.convert(messages)
        except Exception as error:  # a message shape nobody foresaw: skip it, keep running
            log.warning(
                "Telegram: skipped update %s that could not be read (%s: %s)",
                update_ids[0],
                type(error).__name__,
                error,
            )
            return
        try:
            await self._on_message(inbound)
        except Exception:
            for update_id in update_ids:
                self._seen.pop(update_id, None)
            raise

    def _remember(self, update_id: int) -> None:
        self._seen[update_id] = None
        while len(self._seen) > _SEEN_CAPACITY:
            self._seen.popitem(last=False)


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


class WebhookReceiver:
    """An aiohttp server for Telegram's webhook POSTs: the secret token header is checked, the
    answer is 200 only after the gateway's handler took the update (else Telegram retries)."""

    def __init__(
        self, dispatcher: UpdateDispatcher, *, listen: str, port: int, path: str, secret: str
    ) -> None:
        self._dispatcher = dispatcher
        self._listen = listen
        self._port = port
        self._path = path or "/"
        self._secret = secret
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=2 * 1024 * 1024)
        app.router.add_post(self._path, self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._listen, self._port)
        try:
            await site.start()
        except OSError as error:
            await self._runner.cleanup()
            raise ChannelError(
                f"Cannot listen for the Telegram webhook on {self._listen}:{self._port} "
                f"({error.strerror}); choose another [telegram] webhook_port"
            ) from None

    async def stop(self) -> None:
        await self._dispatcher.close()
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not hmac.compare_digest(given.encode(), self._secret.encode()):
            log.warning("Telegram webhook: refused a request without the right secret token")
            return web.Response(status=403)
        try:
            raw = json.loads(await request.read())
        except ValueError:
            log.warning("Telegram webhook: skipped a request whose body is not JSON")
            return web.Response(status=200)  # Telegram would retry it forever otherwise
        try:
            done = await self._dispatcher.accept(raw)
            await done
        except Exception as error:
            log.warning("Telegram webhook: the gateway did not take the update (%s)", error)
            return web.Response(status=500)
        return web.Response(status=200)
