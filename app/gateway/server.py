"""The `Gateway`: channels in, the agent's replies out, one turn at a time per session.

A message goes: adapter → `Gateway.on_message` → access check (app/gateway/access.py; unknown
senders cost no model call) → session key (app/gateway/routing.py) → de-duplicated and queued
durably in the agent database (app/gateway/queue.py, committed before the adapter acknowledges
it) → the session's worker: one turn at a time per session, sessions in parallel up to
`max_concurrent_turns` (all agents of a process: `turn_slots`, app/gateway/workers.py),
messages arriving while a turn runs collected into the next one (`collect_window_ms`) → the
agent (app/gateway/turns.py) → the reply streamed by editing one message (delivery.py), each
sent message recorded once the platform accepted it. app/wiring.py `build_gateway` builds it
for `pinch gateway` (run.py) and `pinch chat` (repl.py, the `cli` channel only).

One turn per session across processes: each process claims only its own queue rows
(`GatewayStore(claimant=…)`), and a turn first takes the session's lease (app/gateway/leases.py),
so the owner's main session is never written by two processes at once: the second turn waits,
and a channel that presents turns itself (`channels.terminal.TurnAware`) is told "waiting for a
reply on Telegram to finish…". `cancel_turn(key)` is the terminal's Ctrl-C; `stop(grace_s)`
drains; a heartbeat file says every 15 s which channels are healthy (heartbeat.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.model.errors import ModelError
from agent.requests import AgentRequest
from app.automations.jobs import Target
from app.automations.schedule_tool import current_target
from app.gateway.access import Access
from app.gateway.advice import without_server_paths
from app.gateway.delivery import ReplyStream
from app.gateway.heartbeat import write_heartbeat_file
from app.gateway.inbound import (
    UNREADABLE,
    IgnoredSenders,
    encodable,
    is_storage_error,
    turn_request,
    unreadable,
)
from app.gateway.leases import LEASE_POLL_S, LEASE_STALE_S, SessionLeases
from app.gateway.queue import Batch, GatewayStore, LeaseHolder, this_process
from app.gateway.routing import session_key_for
from app.gateway.turns import Runtime, TurnResult, run_turn
from app.gateway.workers import SessionWorkers, TurnSlots
from channels.base import Channel, ChannelHealth, InboundMessage, OutboundMessage, SentMessage
from channels.terminal import TurnAware, TurnOutcome
from common.channel_table import messaging
from common.text import shorten
from memory.errors import MemoryError_
from memory.store.sessions import SessionKey

log = logging.getLogger("pinch.gateway")

TYPING_EVERY_S = 4.0  # platforms show "typing…" for about 5 s
HEARTBEAT_EVERY_S = 15.0
CLAIM_BEAT_S = 10.0  # a third of the queue's CLAIM_STALE_S: a live claim never looks stale
PRUNE_EVERY_S = 300.0
DELIVERY_ATTEMPTS = 3
TurnRunner = Callable[[Runtime, AgentRequest, Callable[[str], None]], Awaitable[TurnResult]]


class GatewayError(Exception):
    """The gateway cannot start; the message says why and what to do."""


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
    claim_beat_s: float = CLAIM_BEAT_S  # how often claims are confirmed and dead ones taken
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
        turn_slots: TurnSlots | None = None,
    ) -> None:
        self.runtime = runtime
        self.channels = dict(channels)
        self.store = store
        self.access = access
        self.options = options or GatewayOptions()
        self.turn_runner = turn_runner
        self.health: dict[str, ChannelHealth] = {}
        self.failed: dict[str, str] = {}  # channels that could not start, and why
        self.workers = SessionWorkers(
            store.next_batch,
            self._run_batch,
            collect_window_s=self.options.collect_window_s,
            max_concurrent=self.options.max_concurrent_turns,
            shared=turn_slots,
        )
        self._background: list[asyncio.Task[None]] = []
        self._heartbeat_lock = asyncio.Lock()
        self._spawned: set[asyncio.Task[None]] = set()
        # Delivery records get their own thread: queued behind a burst of inbound messages in
        # the shared pool, they would widen the window in which a kill means a second send.
        self._records = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pinch-delivery")
        self._turns: dict[str, asyncio.Future[TurnResult]] = {}
        self._cancelled: set[str] = set()
        self.leases = SessionLeases(
            store, stale_s=self.options.lease_stale_s, poll_s=self.options.lease_poll_s
        )
        self._ignored = IgnoredSenders()
        # This process, as the holder of session leases (one turn per session across processes).
        self.holder = this_process("", f"{socket.gethostname()}:{os.getpid()}:{id(self):x}")
        store.me = self.holder  # its claims are recorded as this process's

    # -- life cycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Requeue interrupted turns, start every channel and the workers of sessions with
        queued messages. A channel that fails to start is logged, and reported unhealthy in
        every heartbeat; when none starts, raises GatewayError with each one's reason."""
        await asyncio.to_thread(self.store.beat)
        if recovered := await asyncio.to_thread(self.store.recover):
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
        # A platform that was set up and could not start is an error to fix, even when the
        # web page runs beside it: exit with each reason rather than run on without it.
        platforms = [name for name in self.channels if messaging(name)]
        if self.failed and (not running or all(name in self.failed for name in platforms)):
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
            self.workers.wake(key)
        self._background.append(asyncio.ensure_future(self._heartbeat_loop()))
        self._background.append(asyncio.ensure_future(self._prune_loop()))
        self._background.append(asyncio.ensure_future(self._claims_loop()))

    async def stop(self, grace_s: float) -> None:
        """Let running turns finish for up to `grace_s`, then cancel what is left (it stays
        queued) and stop the channels."""
        running = self.workers.drain()
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
        with contextlib.suppress(Exception):  # claims given up: the next holder resumes them
            await asyncio.to_thread(self.store.give_up)
        self._records.shutdown(wait=True)

    def cancel_turns(self) -> None:
        """Cancel every running turn now (its messages stay queued for the next start)."""
        self.workers.cancel_all()

    async def idle(self) -> None:
        """Wait until no session has a turn running or queued (for tests and benchmarks)."""
        await self.workers.idle()

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
            if is_storage_error(exc):
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
            self._ignored.log(msg, decision.reason, routine=decision.routine)
            await self._not_answered(msg, f"Not answered: {decision.reason}.")
            return
        if decision.action == "reply":
            channel = self.channels.get(msg.channel)
            if channel is not None and await asyncio.to_thread(self.store.first_sight, msg):
                await channel.send(
                    OutboundMessage(msg.channel, msg.chat_id, decision.text, msg.thread_id)
                )
            return
        if not msg.text.strip() and await self._nothing_to_read(msg):
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
        self.workers.arrived(str(key))
        if not self.workers.busy(str(key)):  # "typing…" at once, not after the collect window
            self._spawn(self._type_once(msg))
        self.workers.wake(str(key), collect=msg.channel not in self.options.no_collect_channels)

    async def _nothing_to_read(self, msg: InboundMessage) -> bool:
        """True when `msg` (without text) was dealt with here, with no model call: nothing at all
        (whitespace only) is not answered; only things the assistant cannot read (a sticker, a
        location) get a polite answer."""
        if msg.attachments and not all(unreadable(a) for a in msg.attachments):
            return False
        channel = self.channels.get(msg.channel)
        if not msg.attachments:
            log.debug("Ignored an empty message on %s", msg.channel)
            await self._not_answered(msg, "Not answered: the message is empty.")
        elif channel is not None and await asyncio.to_thread(self.store.first_sight, msg):
            await channel.send(OutboundMessage(msg.channel, msg.chat_id, UNREADABLE, msg.thread_id))
        return True

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
        renew = asyncio.ensure_future(self.leases.keep(batch.session_key, me))
        try:
            await self._answer(batch, channel, last)
        finally:
            renew.cancel()
            with contextlib.suppress(Exception):
                await asyncio.shield(self.leases.release(batch.session_key, me))
        return True

    async def _answer(self, batch: Batch, channel: Channel, last: InboundMessage) -> None:
        key = SessionKey.parse(batch.session_key)
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
        turn = asyncio.ensure_future(self._run_turn(key, batch, stream.feed))
        self._turns[batch.session_key] = turn
        outcome: TurnOutcome
        try:
            result = await turn
            if result.silent:
                outcome = TurnOutcome("silent", result.text, result.command)
            else:
                outcome = TurnOutcome("answered", result.text, result.command, result.cut_off)
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
            try:  # its message is kept, not answered again with the next one
                await self.runtime.agent.mark_cancelled(turn_request(key, batch))
            except Exception:
                log.warning("Could not mark the cancelled turn of %s", key, exc_info=True)
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
        elif outcome.kind == "failed":  # the log has the whole advice; a chat no server path
            await self._deliver(stream, without_server_paths(outcome.text))
        else:
            await self._deliver(stream, outcome.text)
        await self._record(self.store.finish, batch.turn_id)

    async def _run_turn(
        self, key: SessionKey, batch: Batch, on_text: Callable[[str], None]
    ) -> TurnResult:
        # The request is made inside the turn: one the agent refuses fails this turn only.
        return await self.turn_runner(self.runtime, turn_request(key, batch), on_text)

    def cancel_turn(self, session_key: str) -> bool:
        """Cancel the running turn of `session_key` (the owner's Ctrl-C): what streamed so far
        is its answer and its messages are not run again. False when no turn of it runs here."""
        if self.leases.waiting(session_key):  # still waiting for another process's turn
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
        """Hold the session's lease (app/gateway/leases.py); False when `cancel_turn` gave up
        the wait. A channel that presents turns itself is told what it waits for."""

        async def tell(other: LeaseHolder) -> None:
            if isinstance(channel, TurnAware):
                where = "another terminal" if other.channel == "cli" else other.channel.title()
                with contextlib.suppress(Exception):
                    await channel.waiting(
                        last.chat_id, f"waiting for a reply on {where} to finish…"
                    )

        return await self.leases.acquire(
            session_key, me, given_up=lambda: session_key in self._cancelled, on_busy=tell
        )

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
        async with self._heartbeat_lock:  # the loop and a final write must not share the tmp file
            health = dict(self.health)  # read here: no older beat lands over a newer failure
            await asyncio.to_thread(write_heartbeat_file, path, health, stopping=stopping)

    async def _heartbeat_loop(self) -> None:
        while True:
            try:
                await self.write_heartbeat()
            except Exception as exc:
                log.warning("Could not write the heartbeat file: %s", exc)
            await asyncio.sleep(self.options.heartbeat_every_s)

    async def _claims_loop(self) -> None:
        """Beat (its claims stay its own), take over the claims of gateways gone (killed or
        stopped), then wake the queued sessions (the agent lease keeps one gateway per agent)."""
        while True:
            await asyncio.sleep(self.options.claim_beat_s)
            try:
                await asyncio.to_thread(self.store.beat)
                taken = await asyncio.to_thread(self.store.recover)
                if not taken:
                    continue
                log.info("Taking over %d message(s) of a gateway that stopped", taken)
                for key in await asyncio.to_thread(self.store.pending_sessions):
                    self.workers.wake(key)
            except Exception as exc:
                log.warning("Could not check the queue's claims: %s", exc)

    async def _prune_loop(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.store.prune, self.options.dedup_ttl_s)
            except Exception as exc:
                log.warning("Could not prune old queue records: %s", exc)
            await asyncio.sleep(PRUNE_EVERY_S)
