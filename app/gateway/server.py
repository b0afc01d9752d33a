"""`pinch gateway`: every configured channel, the memory watcher and the agent in one process.

A message goes: adapter → `Gateway.on_message` → access check (app/gateway/access.py; unknown
senders
cost no model call) → session key (app/gateway/routing.py) → de-duplicated and queued durably in the
agent database (app/gateway/queue.py, committed before the adapter acknowledges it) → the session's
worker: one turn at a time per session, sessions in parallel up to `max_concurrent_turns`,
messages that arrive while a turn runs collected into the next one (`collect_window_ms`) → the
agent (app/gateway/turns.py) → the reply streamed by editing one message (app/gateway/delivery.py),
each sent
message recorded right after the platform accepted it.

One turn per session across processes: `pinch chat` runs this same machinery with only the `cli`
channel (app/gateway/repl.py), beside or without `pinch gateway`. Each process claims only its own
queue
rows (a store's `claimant=…`), and a turn first takes the session's lease in the database
(`session_leases`; free when its holder's heartbeat is old or its process gone), so the owner's
main session is never written by two processes at once: the second turn waits, and a channel
that presents turns itself (`channels.terminal.TurnAware`) is told "waiting for a reply on Telegram
to finish…". `cancel_turn(key)` is the terminal's Ctrl-C.

SIGTERM/SIGINT drains: running turns get `shutdown_grace_s` to finish, queued messages stay
queued and are answered after the restart. One gateway per data directory (an OS lock on
<home>/agents/<id>/gateway.lock). A heartbeat file <home>/gateway.heartbeat says every 15 s
which channels are healthy (`pinch doctor --health` reads it).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import re
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from agent.model.errors import ModelError
from agent.requests import Attachment
from app.automations.assembly import owner_zone, start_automations
from app.automations.jobs import Target
from app.automations.nightly_dream import start_nightly_dream
from app.automations.schedule_tool import current_target
from app.channel_registry import CHANNELS, Owners, adapter_class, channel_settings
from app.gateway.access import Access, Pairing
from app.gateway.delivery import ReplyStream
from app.gateway.queue import Batch, GatewayStore, LeaseHolder, this_process
from app.gateway.routing import session_key_for
from app.gateway.turns import Runtime, TurnRequest, TurnResult, open_runtime, run_turn
from app.logging_setup import add_redacted_handler
from channels.base import Attachment as InboundAttachment
from channels.base import Channel, ChannelHealth, InboundMessage, OutboundMessage, SentMessage
from channels.terminal import TurnAware, TurnOutcome
from common.clock import owner_zone as owner_tz
from common.text import shorten
from memory.errors import MemoryError_
from memory.files.inbox import Inbox
from memory.store.pairing_store import SqlitePairingStore
from memory.store.queue_store import SqliteQueueStore
from memory.store.sessions import SessionKey

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger("pinch.gateway")

TYPING_EVERY_S = 4.0  # platforms show "typing…" for about 5 s
HEARTBEAT_EVERY_S = 15.0
PRUNE_EVERY_S = 300.0
IGNORED_LOG_EVERY_S = 3600.0  # an ignored sender is logged (INFO) at most this often
DELIVERY_ATTEMPTS = 3
LEASE_STALE_S = 30.0  # a session lease not renewed for this long is free (its holder hung)
LEASE_POLL_S = 0.5  # how often a turn waiting for another process's turn looks again
TurnRunner = Callable[[Runtime, TurnRequest, Callable[[str], None]], Awaitable[TurnResult]]


class GatewayError(Exception):
    """The gateway cannot start; the message says why and what to do."""


# -- one gateway per data directory ------------------------------------------------------------


def acquire_lock(path: Path) -> IO[str]:
    """Hold an exclusive OS lock on `path` for the life of the process (released by the OS even
    on kill -9). Raises GatewayError when another gateway holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held until the process exits
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        pid = handle.read().strip() or "unknown"
        handle.close()
        raise GatewayError(
            f"Another Pinch gateway is already running for this data directory (pid {pid}, "
            f"lock {path}); stop it first — one gateway per PINCH_HOME."
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


# -- secrets never reach the log ---------------------------------------------------------------


def settings_secrets(settings: Settings) -> list[str]:
    """The channel tokens in the settings (config.toml as well as the environment), which
    `common.redact` cannot know on its own."""
    found = []
    for section in (settings.telegram, settings.slack):
        for value in section.__dict__.values():
            secret = getattr(value, "get_secret_value", None)
            if secret is not None:
                found.append(str(secret()))
    return found


# -- the gateway -------------------------------------------------------------------------------


@dataclass
class GatewayOptions:
    agent_id: str = "main"
    owner_dm_scope: str = "main"
    collect_window_s: float = 1.5
    max_concurrent_turns: int = 4
    dedup_ttl_s: float = 3600.0
    heartbeat_path: Path | None = None
    heartbeat_every_s: float = HEARTBEAT_EVERY_S
    typing_every_s: float = TYPING_EVERY_S
    no_collect_channels: frozenset[str] = field(default_factory=lambda: frozenset({"cli"}))
    lease_stale_s: float = LEASE_STALE_S
    lease_poll_s: float = LEASE_POLL_S


class Gateway:
    def __init__(
        self,
        *,
        runtime: Runtime,
        channels: Mapping[str, Channel],
        store: GatewayStore,
        access: Access,
        options: GatewayOptions | None = None,
        turn_runner: TurnRunner = run_turn,
    ) -> None:
        self.runtime = runtime
        self.channels = dict(channels)
        self.store = store
        self.access = access
        self.options = options or GatewayOptions()
        self.turn_runner = turn_runner
        self.health: dict[str, ChannelHealth] = {}
        self.failed: dict[str, str] = {}  # channels that could not start, and why
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._dirty: set[str] = set()
        self._arrived: dict[str, float] = {}
        self._slots = asyncio.Semaphore(self.options.max_concurrent_turns)
        self._draining = False
        self._background: list[asyncio.Task[None]] = []
        self._heartbeat_lock = asyncio.Lock()
        self._spawned: set[asyncio.Task[None]] = set()
        # Delivery records get their own thread: queued behind a burst of inbound messages in
        # the shared pool, they would widen the window in which a kill means a second send.
        self._records = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pinch-delivery")
        self._turns: dict[str, asyncio.Future[TurnResult]] = {}
        self._cancelled: set[str] = set()
        self._leasing: set[str] = set()
        self._ignored_logged: dict[tuple[str, str, str], float] = {}
        # This process, as the holder of session leases (one turn per session across processes).
        self.holder = this_process("", f"{socket.gethostname()}:{os.getpid()}:{id(self):x}")

    # -- life cycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Requeue interrupted turns, start every channel and the workers of sessions with
        queued messages. A channel that fails to start is logged, and reported unhealthy in
        every heartbeat; when none starts, raises GatewayError with each one's reason."""
        recovered = await asyncio.to_thread(self.store.recover)
        if recovered:
            log.info("Resuming %d message(s) interrupted by the last stop", recovered)
        for name, channel in list(self.channels.items()):
            try:
                await channel.start(self.on_message)
                self.health[name] = ChannelHealth(True, "started")
                log.info("%s: started", name)
            except Exception as exc:
                self.failed[name] = str(exc)
                self.health[name] = ChannelHealth(False, f"could not start: {exc}")
                log.error("%s: could not start: %s", name, exc)
        failures = "; ".join(f"{name}: {why}" for name, why in self.failed.items())
        running = [name for name in self.channels if name not in self.failed]
        if not running and self.failed:
            await self.stop(0)
            raise GatewayError(f"No channel could start — {failures}")
        if self.failed:
            log.warning(
                "Gateway running with %s only; not running: %s",
                ", ".join(running),
                failures,
            )
        else:
            log.info("Gateway running with %s", ", ".join(running))
        for key in await asyncio.to_thread(self.store.pending_sessions):
            self._wake(key)
        self._background.append(asyncio.ensure_future(self._heartbeat_loop()))
        self._background.append(asyncio.ensure_future(self._prune_loop()))

    async def stop(self, grace_s: float) -> None:
        """Let running turns finish for up to `grace_s`, then cancel what is left (it stays
        queued) and stop the channels."""
        self._draining = True
        running = [task for task in self._workers.values() if not task.done()]
        if running:
            log.info("Stopping: waiting up to %.0f s for %d running turn(s)", grace_s, len(running))
            _, pending = await asyncio.wait(running, timeout=grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        for name, channel in self.channels.items():
            try:
                await asyncio.wait_for(channel.stop(), timeout=10)
            except Exception as exc:
                log.warning("%s: did not stop cleanly: %s", name, exc)
        await self.write_heartbeat(stopping=True)
        self._records.shutdown(wait=True)

    def cancel_turns(self) -> None:
        """Cancel every running turn now (its messages stay queued for the next start)."""
        for task in self._workers.values():
            task.cancel()

    async def idle(self) -> None:
        """Wait until no session has a turn running or queued (for tests and benchmarks)."""
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)

    async def _record(self, fn: Callable[..., None], *args: Any) -> None:
        await asyncio.get_running_loop().run_in_executor(self._records, fn, *args)

    # -- inbound -----------------------------------------------------------------------------

    async def on_message(self, msg: InboundMessage) -> None:
        """The adapters' callback: returns once `msg` is stored (or deliberately dropped).

        A malformed message is logged in one line and skipped. Only when the database cannot
        store it does this raise, so the adapter leaves it unconfirmed and the platform
        delivers it again (the de-duplication makes that safe)."""
        try:
            await self._accept(encodable(msg))
        except Exception as exc:
            if _is_storage_error(exc):
                log.warning("Could not store an inbound message (%s); it stays unconfirmed", exc)
                raise
            # Never the text (the owner's words, maybe megabytes), nor str(exc), which may quote it.
            log.error(
                "Skipped an inbound message that could not be handled (%s from %s, %s "
                "characters): %s",
                getattr(msg, "channel", "?"),
                getattr(msg, "sender_id", "?"),
                len(getattr(msg, "text", "") or ""),
                type(exc).__name__,
            )
            await self._not_answered(msg, f"Skipped: {type(exc).__name__}; see the log.")

    async def _accept(self, msg: InboundMessage) -> None:
        if not isinstance(msg, InboundMessage):
            raise TypeError(f"not an InboundMessage: {type(msg).__name__}")
        decision = await asyncio.to_thread(self.access.check, msg)
        if decision.action == "ignore":
            self._log_ignored(msg, decision.reason, routine=decision.routine)
            await self._not_answered(msg, f"Not answered: {decision.reason}.")
            return
        if decision.action == "reply":
            channel = self.channels.get(msg.channel)
            if channel is not None and await asyncio.to_thread(self.store.first_sight, msg):
                await channel.send(
                    OutboundMessage(msg.channel, msg.chat_id, decision.text, msg.thread_id)
                )
            return
        key = session_key_for(
            msg,
            agent_id=self.options.agent_id,
            is_owner=decision.role == "owner",
            owner_dm_scope="per-channel"
            if self.options.owner_dm_scope == "per-channel"
            else "main",
        )
        queued = await asyncio.to_thread(self.store.accept, msg, str(key), decision.role)
        if queued is None:
            log.debug("Ignored a redelivered message on %s", msg.channel)
            await self._not_answered(msg, "Not answered: the same message was queued before.")
            return
        self._arrived[str(key)] = time.monotonic()
        if str(key) not in self._workers:  # "typing…" at once, not after the collect window
            self._spawn(self._type_once(msg))
        self._wake(str(key), collect=msg.channel not in self.options.no_collect_channels)

    def _log_ignored(self, msg: InboundMessage, reason: str, *, routine: bool) -> None:
        """One INFO line per channel, chat and sender an hour (so an owner asking "why doesn't
        it answer my friend?" finds the reason at the default level); never the text."""
        now = time.monotonic()
        where = (msg.channel, msg.chat_id, msg.sender_id)
        last = self._ignored_logged.get(where)
        if routine or (last is not None and now - last < IGNORED_LOG_EVERY_S):
            log.debug("Ignored a message on %s: %s", msg.channel, reason)
            return
        if len(self._ignored_logged) > 1000:  # forget the senders quiet for an hour
            cutoff = now - IGNORED_LOG_EVERY_S
            self._ignored_logged = {k: t for k, t in self._ignored_logged.items() if t > cutoff}
        self._ignored_logged[where] = now
        chat = "" if msg.chat_type == "direct" else f" in {msg.chat_type} {msg.chat_id}"
        log.info(
            "Not answering %s sender %s%s: %s (logged once an hour per sender)",
            msg.channel,
            msg.sender_id,
            chat,
            reason,
        )

    async def _not_answered(self, msg: InboundMessage, why: str) -> None:
        """A channel waiting for each message's turn (the terminal) learns there will be none."""
        channel = self.channels.get(getattr(msg, "channel", ""))
        if isinstance(channel, TurnAware):
            with contextlib.suppress(Exception):
                await channel.turn_done(msg.chat_id, TurnOutcome("failed", why))

    async def _type_once(self, msg: InboundMessage) -> None:
        channel = self.channels.get(msg.channel)
        if channel is not None:
            with contextlib.suppress(Exception):
                await channel.typing(msg.chat_id, msg.thread_id)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._spawned.add(task)  # a reference, so the task is not collected mid-way
        task.add_done_callback(self._spawned.discard)

    # -- per-session workers -------------------------------------------------------------------

    def _wake(self, key: str, collect: bool = True) -> None:
        self._dirty.add(key)
        if key in self._workers or self._draining:
            return
        self._workers[key] = asyncio.ensure_future(self._session_worker(key, collect))

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
                self._wake(key, collect)

    async def _work_on(self, key: str, collect: bool) -> None:
        while not self._draining:
            if collect:
                await self._settle(key)
            async with self._slots:
                if self._draining:
                    return
                self._dirty.discard(key)
                batch = await asyncio.to_thread(self.store.next_batch, key)
                if batch is None:
                    if key in self._dirty:
                        continue
                    return
                if not await self._run_batch(batch):
                    return

    async def _settle(self, key: str) -> None:
        """Wait until the session's newest message is `collect_window_s` old."""
        window = self.options.collect_window_s
        while True:
            wait = self._arrived.get(key, 0.0) + window - time.monotonic()
            if wait <= 0:
                return
            await asyncio.sleep(wait)

    async def _run_batch(self, batch: Batch) -> bool:
        last = batch.messages[-1].message
        channel = self.channels.get(last.channel)
        if channel is None:
            # Left claimed: the next start (with the channel configured) answers it.
            log.warning("No %s channel runs; its messages wait for a restart", last.channel)
            return False
        me = replace(self.holder, channel=last.channel)
        if not await self._lease(batch.session_key, me, channel, last):  # Ctrl-C while waiting
            self._cancelled.discard(batch.session_key)
            if isinstance(channel, TurnAware):
                await channel.turn_done(last.chat_id, TurnOutcome("cancelled", ""))
            await self._record(self.store.finish, batch.turn_id)
            return True
        renew = asyncio.ensure_future(self._renew_lease(batch.session_key, me))
        try:
            await self._answer(batch, channel, last)
        finally:
            renew.cancel()
            with contextlib.suppress(Exception):
                await asyncio.shield(
                    asyncio.to_thread(self.store.release_lease, batch.session_key, me)
                )
        return True

    async def _answer(self, batch: Batch, channel: Channel, last: InboundMessage) -> None:
        key = SessionKey.parse(batch.session_key)
        request = turn_request(key, batch)
        resume = await asyncio.to_thread(self.store.deliveries, batch.turn_id)

        async def record(part: int, sent: SentMessage) -> None:
            await self._record(self.store.record_delivery, batch.turn_id, part, sent)

        stream = ReplyStream(
            channel,
            OutboundMessage(last.channel, last.chat_id, "", last.thread_id),
            on_sent=record,
            resume=resume,
        )
        typing = asyncio.ensure_future(self._keep_typing(channel, last))
        # The schedule tool delivers a job's results to the chat this turn answers (set before
        # the turn's task is created: the task runs in a copy of this context).
        target = current_target.set(Target(last.channel, last.chat_id, last.thread_id))
        turn = asyncio.ensure_future(self.turn_runner(self.runtime, request, stream.feed))
        self._turns[batch.session_key] = turn
        outcome: TurnOutcome
        try:
            result = await turn
            if result.silent:
                outcome = TurnOutcome("silent", result.text, result.command)
            else:
                outcome = TurnOutcome("answered", result.text, result.command)
        except (ModelError, MemoryError_) as exc:  # worded as advice
            outcome = TurnOutcome("failed", str(exc))
            # The chat shows it; the log keeps it too (advice is redacted of keys; cut short, as
            # a server's refusal may quote the request).
            log.warning(
                "A turn of %s failed (%s%s): %s",
                batch.session_key,
                type(exc).__name__,
                f", model {exc.model}" if isinstance(exc, ModelError) else "",
                shorten(str(exc), 300),
            )
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if batch.session_key not in self._cancelled or (me is not None and me.cancelling()):
                await stream.cancel()
                raise
            outcome = TurnOutcome("cancelled", stream.text)  # the owner's Ctrl-C: answered
        except Exception as exc:
            log.exception("A turn of %s failed", batch.session_key)
            text = (
                f"Something went wrong ({type(exc).__name__}); try again, or see the log "
                "(chat.log in the Pinch home for the terminal, else the gateway's output)."
            )
            outcome = TurnOutcome("failed", text)
        finally:
            typing.cancel()
            current_target.reset(target)
            self._turns.pop(batch.session_key, None)
            self._cancelled.discard(batch.session_key)
        if isinstance(channel, TurnAware):
            await stream.cancel()  # the channel presents the turn's end itself
            await channel.turn_done(last.chat_id, outcome)
        elif outcome.kind == "silent":
            await stream.cancel()
        elif outcome.kind == "cancelled":
            if outcome.text.strip():
                await self._deliver(stream, outcome.text + "\n\n(cancelled)")
            else:
                await stream.cancel()
        else:
            await self._deliver(stream, outcome.text)
        await self._record(self.store.finish, batch.turn_id)

    def cancel_turn(self, session_key: str) -> bool:
        """Cancel the running turn of `session_key` (the owner's Ctrl-C): what streamed so far
        is its answer and its messages are not run again. False when no turn of it runs here."""
        if session_key in self._leasing:  # still waiting for another process's turn
            self._cancelled.add(session_key)
            return True
        turn = self._turns.get(session_key)
        if turn is None or turn.done():
            return False
        self._cancelled.add(session_key)
        turn.cancel()
        return True

    async def _lease(
        self, session_key: str, me: LeaseHolder, channel: Channel, last: InboundMessage
    ) -> bool:
        """Wait until no other process runs a turn of this session (`pinch chat` and `pinch
        gateway` share the owner's main session), then hold its lease. Polled: the other
        process cannot signal this one. False when `cancel_turn` gave up the wait."""
        told = False
        self._leasing.add(session_key)
        try:
            while session_key not in self._cancelled:
                other = await asyncio.to_thread(
                    self.store.acquire_lease, session_key, me, self.options.lease_stale_s
                )
                if other is None:
                    return True
                if not told and isinstance(channel, TurnAware):
                    told = True
                    where = "another terminal" if other.channel == "cli" else other.channel.title()
                    with contextlib.suppress(Exception):
                        await channel.waiting(
                            last.chat_id, f"waiting for a reply on {where} to finish…"
                        )
                await asyncio.sleep(self.options.lease_poll_s)
            return False
        finally:
            self._leasing.discard(session_key)

    async def _renew_lease(self, session_key: str, me: LeaseHolder) -> None:
        while True:
            await asyncio.sleep(self.options.lease_stale_s / 3)
            try:
                await asyncio.to_thread(self.store.renew_lease, session_key, me)
            except Exception as exc:
                log.warning("Could not renew the lease of %s: %s", session_key, exc)

    async def _deliver(self, stream: ReplyStream, final: str) -> None:
        for attempt in range(DELIVERY_ATTEMPTS):
            try:
                await stream.finish(final)
                return
            except Exception as exc:
                log.warning("Could not deliver a reply (attempt %d): %s", attempt + 1, exc)
                await asyncio.sleep(2**attempt)
        log.error("Gave up delivering a reply after %d attempts", DELIVERY_ATTEMPTS)

    async def _keep_typing(self, channel: Channel, msg: InboundMessage) -> None:
        while True:
            with contextlib.suppress(Exception):
                await channel.typing(msg.chat_id, msg.thread_id)
            await asyncio.sleep(self.options.typing_every_s)

    # -- health and housekeeping ---------------------------------------------------------------

    async def write_heartbeat(self, *, stopping: bool = False) -> None:
        path = self.options.heartbeat_path
        if path is None:
            return
        for name, channel in self.channels.items():
            if name in self.failed:  # reachable or not, it is not running
                continue
            try:
                self.health[name] = await asyncio.wait_for(channel.check(), timeout=10)
            except Exception as exc:
                self.health[name] = ChannelHealth(False, f"health check failed: {exc}")
        data: dict[str, Any] = {
            "pid": os.getpid(),
            "at": time.time(),
            "stopping": stopping,
            "channels": {n: {"ok": h.ok, "detail": h.detail} for n, h in self.health.items()},
        }
        tmp = path.with_name(path.name + ".tmp")
        async with self._heartbeat_lock:  # the loop and a final write must not share the tmp file
            await asyncio.to_thread(_write_atomically, tmp, path, json.dumps(data))

    async def _heartbeat_loop(self) -> None:
        while True:
            try:
                await self.write_heartbeat()
            except Exception as exc:
                log.warning("Could not write the heartbeat file: %s", exc)
            await asyncio.sleep(self.options.heartbeat_every_s)

    async def _prune_loop(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.store.prune, self.options.dedup_ttl_s)
            except Exception as exc:
                log.warning("Could not prune old queue records: %s", exc)
            await asyncio.sleep(PRUNE_EVERY_S)


_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(msg: InboundMessage) -> InboundMessage:
    """`msg` with every character UTF-8 cannot store replaced by U+FFFD: a lone surrogate (a
    platform's JSON may carry "\\udcff") would otherwise fail the queue and lose the message."""
    if not isinstance(msg, InboundMessage):
        return msg
    attachments = tuple(_replace_surrogates(a) for a in msg.attachments)
    return replace(_replace_surrogates(msg), attachments=attachments)


_Fields = TypeVar("_Fields", InboundMessage, InboundAttachment)


def _replace_surrogates(item: _Fields) -> _Fields:
    changes: dict[str, Any] = {
        name: _SURROGATE.sub("\ufffd", value)
        for name, value in vars(item).items()
        if isinstance(value, str) and _SURROGATE.search(value)
    }
    return replace(item, **changes) if changes else item


def _is_storage_error(exc: BaseException) -> bool:
    """SQLite's errors (stdlib or pysqlite3 driver) and the database's own advice errors."""
    module = type(exc).__module__
    return isinstance(exc, MemoryError_) or module.startswith(("sqlite3", "pysqlite3"))


def _write_atomically(tmp: Path, path: Path, text: str) -> None:
    """Write via a 0600 temporary file beside `path`, then rename (readers never see half)."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def turn_request(key: SessionKey, batch: Batch) -> TurnRequest:
    """One turn's request: the batch's messages in order (with the paths of saved attachments),
    from the owner only if every one of them is the owner's. Several people's messages collected
    in one group turn are each prefixed with their sender's name."""
    messages = [q.message for q in batch.messages]
    senders = {m.sender_id for m in messages}
    parts = []
    attachments: list[Attachment] = []
    for msg in messages:
        text = msg.text
        for item in msg.attachments:
            if item.path:
                attachments.append(Attachment(item.path, item.kind, item.file_name))
            else:
                text += f"\n[{item.kind} not saved: {item.error or 'unavailable'}]"
        if len(senders) > 1:
            text = f"{msg.sender_name or msg.sender_id}: {text}"
        if text.strip():
            parts.append(text.strip())
    owner = all(q.sender_role == "owner" for q in batch.messages)
    last = messages[-1]
    return TurnRequest(
        key,
        "\n\n".join(parts),
        "owner" if owner else "person",
        sender_id=None if owner or len(senders) > 1 else last.sender_id,
        sender_name=None if owner or len(senders) > 1 else last.sender_name,
        attachments=tuple(attachments),
        message_ids=tuple(m.dedup_key for m in messages),
        channel=last.channel,
        resumed=batch.resumed,
    )


# -- running it --------------------------------------------------------------------------------


def build_channels(settings: Settings, note: Callable[[str], None]) -> dict[str, Channel]:
    """The channels whose tokens are set; a one-line note for each that is skipped."""
    found: dict[str, Channel] = {}
    # Received files are dated in the owner's zone, as everything else the owner reads.
    inbox = Inbox(
        settings.workspace_dir, tz=owner_tz(settings.agent.timezone, settings.workspace_dir)
    )
    for row in CHANNELS:
        if row.adapter is None or row.config_section is None:
            continue  # not run by the gateway (the terminal)
        config = getattr(settings, row.config_section)
        if config.bot_token is None:
            note(f"{row.name}: skipped (no token; set {row.token_variable} to run it)")
            continue
        try:
            found[row.name] = adapter_class(row)(
                config,
                inbox=inbox,
                state_dir=settings.home / "state",
            )
        except Exception as exc:
            note(f"{row.name}: skipped ({type(exc).__name__}: {exc})")
    return found


def options_from(settings: Settings) -> GatewayOptions:
    return GatewayOptions(
        agent_id=settings.agent_id,
        owner_dm_scope=settings.gateway.owner_dm_scope,
        collect_window_s=settings.gateway.collect_window_ms / 1000,
        max_concurrent_turns=settings.gateway.max_concurrent_turns,
        dedup_ttl_s=settings.slack.dedup_ttl_s,
        heartbeat_path=settings.home / "gateway.heartbeat",
    )


def configure_logging(settings: Settings, level: int = logging.INFO) -> None:
    add_redacted_handler(logging.StreamHandler(), settings_secrets(settings))
    logging.getLogger().setLevel(level)
    for noisy in (
        "httpx",
        "httpx2",
        "httpcore",
        "anthropic",
        "telegram",
        "slack_bolt",
        "slack_sdk",
        "aiohttp.access",
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING)


async def run_gateway(
    settings: Settings,
    *,
    extra_channels: Mapping[str, Channel] | None = None,
    note: Callable[[str], None] = print,
) -> int:
    """Run until SIGTERM/SIGINT; returns the exit status. Raises GatewayError when it cannot
    start (another gateway, no channel)."""
    lock = acquire_lock(settings.agent_dir / "gateway.lock")
    try:
        channels = build_channels(settings, note)
        channels.update(extra_channels or {})
        if not channels:
            raise GatewayError(
                "No channel to run: set PINCH_TELEGRAM__BOT_TOKEN or PINCH_SLACK__BOT_TOKEN "
                "(and PINCH_SLACK__APP_TOKEN), then start `pinch gateway` again."
            )
        runtime = await open_runtime(settings)
        try:
            try:
                await runtime.sync_index()
            except MemoryError_ as exc:  # answering still works from the last complete index
                log.warning("The memory index could not be updated: %s", exc)
            runtime.watcher.start()
            db = runtime.index.db
            access = Access(
                owners=Owners.from_settings(settings),
                channels=channel_settings(settings),
                pairing=Pairing(SqlitePairingStore(db)),
            )
            gateway = Gateway(
                runtime=runtime,
                channels=channels,
                store=GatewayStore(SqliteQueueStore(db)),
                access=access,
                options=options_from(settings),
            )
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()

            def on_signal() -> None:
                if stop.is_set():  # a second Ctrl-C: don't wait out the grace period
                    log.warning("Stopping now; interrupted turns are answered after the restart")
                    gateway.cancel_turns()
                stop.set()

            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, on_signal)
            await gateway.start()  # logs which channels run; raises when none could start
            health = await _start_health_server(settings, gateway)
            scheduler = await start_automations(runtime, gateway.channels)  # reminders, tasks
            dreams = await start_nightly_dream(settings, owner_zone(runtime.clock))  # either way
            await stop.wait()
            if dreams is not None:
                dreams.shutdown(wait=False)
            if scheduler is not None:
                await scheduler.stop()
            await gateway.stop(settings.gateway.shutdown_grace_s)
            if health is not None:
                await health.cleanup()
        finally:
            await runtime.aclose()
    finally:
        lock.close()
    return 0


async def _start_health_server(settings: Settings, gateway: Gateway) -> Any:
    """GET /healthz on [gateway] health_port: 200 when every channel is healthy, else 503."""
    if settings.gateway.health_port is None:
        return None
    from aiohttp import web

    async def healthz(_request: web.Request) -> web.Response:
        channels = {n: {"ok": h.ok, "detail": h.detail} for n, h in gateway.health.items()}
        ok = all(h.ok for h in gateway.health.values())
        return web.json_response({"ok": ok, "channels": channels}, status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.gateway.health_listen, settings.gateway.health_port).start()
    return runner
