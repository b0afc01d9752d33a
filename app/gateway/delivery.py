"""Streaming a reply to a chat: one message, edited as text arrives, split when it grows long.

    stream = ReplyStream(channel, target, on_sent=record)   # target: an OutboundMessage ("" text)
    stream.feed("Hel"); stream.feed("lo")                   # synchronous, from the model stream
    await stream.finish("Hello")                           # the final text, authoritative

The first text is sent as soon as it arrives; later text edits that message at most every
`channel.min_edit_interval_s`. The text is cut with `channel.split` — pieces the platform shows
as one message each, as it renders them (on Telegram: the HTML, code blocks closed and reopened
at each cut) — and piece N is always message N: when the text outgrows a message, the rest
continues in new ones, and nothing is shown twice or dropped. `on_sent(part, sent)` is awaited
right after the platform accepts each new message, so the caller can record it at once.
`resume` takes messages a previous run of the same turn already sent: they are edited instead of
sent again. A piece whose send failed with no answer (it may or may not have arrived) is not
sent again while the reply streams; the final push sends it once more (at least once: a rare
second copy rather than a lost reply). A final text shorter than what streamed turns the
messages it no longer needs into a pointer to the reply above (there is no delete in the
Channel interface).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from channels.base import Channel, ChannelError, OutboundMessage, SentMessage

log = logging.getLogger(__name__)

OnSent = Callable[[int, SentMessage], Awaitable[None]]
LEFTOVER = "(the reply is above)"  # a streamed message the final reply no longer needs


def _report_failed_push(push: asyncio.Future[None]) -> None:
    if not push.cancelled() and (exc := push.exception()) is not None:
        log.warning("Could not update the streamed reply: %s", exc)


class ReplyStream:
    def __init__(
        self,
        channel: Channel,
        target: OutboundMessage,
        *,
        on_sent: OnSent | None = None,
        resume: Sequence[SentMessage] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.channel = channel
        self.target = target
        self.on_sent = on_sent
        self.sent: list[SentMessage] = list(resume)
        self.shown: list[str] = ["" for _ in resume]  # the piece each sent message shows now
        # The message of each piece (an index into `sent`). One each, unless an adapter had to
        # add messages after one (then later pieces still go to their own messages).
        self._message_of: list[int] = list(range(len(resume)))
        self.text = ""
        self.clock = clock
        self._changed = asyncio.Event()
        self._last_push = float("-inf")
        self._pusher: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        # The piece whose send failed in a way the platform may still have acted on (part ->
        # text): the same text for that part is not sent again while the reply streams (the
        # final push sends it once more: at least once).
        self._maybe_sent: dict[int, str] = {}
        self._sent_again: set[int] = set()  # parts the final push sent a second time

    def feed(self, delta: str) -> None:
        """Add streamed text (safe to call from a synchronous callback on the event loop)."""
        if not delta:
            return
        self.text += delta
        self._changed.set()
        if self._pusher is None:
            self._pusher = asyncio.ensure_future(self._push_loop())

    async def finish(self, final_text: str | None = None) -> list[SentMessage]:
        """Show `final_text` (or everything fed) in full; returns the messages it occupies."""
        if self._pusher is not None:
            self._pusher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pusher
        if final_text is not None:
            self.text = final_text
        await self._push(final=True)
        return self.sent

    async def cancel(self) -> None:
        if self._pusher is not None:
            self._pusher.cancel()

    async def _push_loop(self) -> None:
        interval = self.channel.min_edit_interval_s
        while True:
            await self._changed.wait()
            wait = self._last_push + interval - self.clock()
            if self.sent and wait > 0:  # the first message goes out at once
                await asyncio.sleep(wait)
            self._changed.clear()
            # Shielded: cancelling the loop (finish) must not cut a send in half — the
            # platform may have accepted it, and we'd not know its id and send it again. The
            # push may then fail after the loop is gone: its callback, not asyncio, reports it.
            push = asyncio.ensure_future(self._push())
            push.add_done_callback(_report_failed_push)
            with contextlib.suppress(Exception):  # the final push tries again; a failed edit
                await asyncio.shield(push)  # is no reason to stop streaming

    async def _push(self, *, final: bool = False) -> None:
        async with self._lock:
            text = self.text.strip()
            if not text:
                return
            pieces = self.channel.split(text)
            for part, piece in enumerate(pieces):
                if part < len(self._message_of):
                    index = self._message_of[part]
                    if self.shown[index] != piece:
                        occupied = await self.channel.edit(self.sent[index], piece)
                        self.shown[index] = piece
                        await self._add(occupied[1:], part)
                    continue
                if self._maybe_sent.get(part) == piece and part == len(pieces) - 1:
                    if not final or part in self._sent_again:
                        break  # while streaming: it may be shown; the final push decides
                    # The turn ends and this piece's only send failed with no answer from the
                    # platform: it may have been shown, or never have arrived (a connection
                    # reset before the platform read it: 2 of 51,000 replies lost so in
                    # bench/scale.py). Sent once more — a rare second copy rather than a reply
                    # that silently never came.
                    del self._maybe_sent[part]
                    self._sent_again.add(part)  # once: a failing retry of finish() adds none
                    log.warning(
                        "Sending reply part %d again: its send may not have reached %s",
                        part,
                        self.channel.name,
                    )
                try:
                    sent = await self.channel.send(replace(self.target, text=piece))
                except ChannelError as exc:
                    if exc.maybe_delivered:
                        self._maybe_sent[part] = piece
                    raise
                if sent:
                    self._message_of.append(len(self.sent))
                    await self._add(sent[:1], part, piece)
                    await self._add(sent[1:], part)
            if final:
                await self._empty_leftovers(len(pieces))
            self._last_push = self.clock()

    async def _add(self, messages: Sequence[SentMessage], part: int, piece: str = "") -> None:
        """Keep new messages (recorded at once); those beyond one per piece are an adapter's
        continuation of piece `part` (it found the piece too long), never edited later."""
        if messages and not piece:
            log.warning("The %s adapter split reply part %d further", self.channel.name, part)
        for message in messages:
            self.sent.append(message)
            self.shown.append(piece)
            if self.on_sent is not None:
                await self.on_sent(len(self.sent) - 1, message)

    async def _empty_leftovers(self, pieces: int) -> None:
        """Messages of pieces the final text no longer has (it came out shorter than what was
        streamed) would repeat stale text: they say where the reply is instead."""
        for index in self._message_of[pieces:]:
            if self.shown[index] != LEFTOVER:
                await self.channel.edit(self.sent[index], LEFTOVER)
                self.shown[index] = LEFTOVER
