"""The web page's chat as a channel (`web`): the owner types in the browser, the gateway answers
through the same queue, leases and delivery records as on Telegram.

    channel = WebChannel(settings.web, inbox=inbox, state_dir=home / "state")
    await channel.receive("hello", client_id="…")          # the page's POST: queued durably
    async for event in channel.events(last_event_id): ...   # the page's event stream (SSE)

Like every adapter it knows nothing of the agent: `receive` builds an `InboundMessage` and awaits
the gateway's handler (which stores it before returning); `send` and `edit` (the gateway's
streamed reply) become events that every open page receives as they happen. Events are numbered
"<boot>-<seq>", and the last few hundred are kept, so a browser that reconnects (EventSource
sends Last-Event-ID) misses nothing of this process; after a gateway restart it gets what the
new process has sent (an interrupted turn is answered again from the queue). Uploaded files go
to the inbox as Telegram's and Slack's do (`InboxWriter`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import secrets
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from channels.base import (
    Channel,
    ChannelHealth,
    InboundMessage,
    InboxWriter,
    MessageHandler,
    OutboundMessage,
    SentMessage,
)
from common.attachment import Attachment, AttachmentKind

OWNER = "owner"  # the page's one user and its one chat
REPLAY_EVENTS = 500
MAX_UPLOAD_BYTES = 20 * 1024 * 1024  # Telegram's bot download limit: the same everywhere
_CLIENT_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


@dataclass(frozen=True)
class WebEvent:
    """What the page is told: `message` (a reply's message `message_id` now shows `text`,
    Markdown source) or `typing`."""

    id: str
    kind: str
    message_id: str = ""
    text: str = ""


@dataclass(frozen=True)
class Upload:
    """A file from the page's form."""

    name: str
    data: bytes
    mime_type: str | None = None


class Listener:
    """One open page's events (`WebChannel.listen`)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[WebEvent | None] = asyncio.Queue()
        self.closed = False

    async def get(self, timeout: float) -> WebEvent | None:
        """The next event, or None after `timeout` seconds without one or once the channel
        stopped (then `closed` is true)."""
        if self.closed:
            return None
        try:
            event = await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None
        if event is None:
            self.closed = True
        return event


class WebChannelError(ValueError):
    """A message from the page that cannot be taken (too big, no handler yet), as advice."""


class WebChannel(Channel):
    name = "web"
    max_message_chars = 1_000_000  # a page shows a reply of any length in one piece
    min_edit_interval_s = 0.05  # streaming to a browser is cheap: show text as it comes

    def __init__(self, config: Any = None, *, inbox: InboxWriter, state_dir: Any = None) -> None:
        """`config`: the `[web]` settings (host and port, for `pinch doctor`)."""
        self._where = f"{config.host}:{config.port}" if config is not None else "the gateway"
        self._inbox = inbox
        self._handler: MessageHandler | None = None
        self._boot = secrets.token_hex(4)
        self._seq = itertools.count(1)
        self._last_seq = 0
        self._ids = itertools.count(1)
        self._recent: deque[WebEvent] = deque(maxlen=REPLAY_EVENTS)
        self._listeners: set[asyncio.Queue[WebEvent | None]] = set()

    # -- the gateway's side ------------------------------------------------------------------

    async def start(self, on_message: MessageHandler) -> None:
        self._handler = on_message

    async def stop(self) -> None:
        self._handler = None
        for queue in list(self._listeners):
            queue.put_nowait(None)  # every open event stream ends

    async def send(self, message: OutboundMessage) -> list[SentMessage]:
        message_id = f"{self._boot}-m{next(self._ids)}"
        self._publish("message", message_id, message.text)
        return [SentMessage(self.name, message.chat_id, message_id, message.thread_id)]

    async def edit(self, sent: SentMessage, text: str) -> list[SentMessage]:
        self._publish("message", sent.message_id, text)
        return [sent]

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        self._publish("typing")

    async def check(self) -> ChannelHealth:
        count = len(self._listeners)
        opened = f"; {count} page(s) open" if count else ""
        return ChannelHealth(True, f"served on {self._where}{opened}")

    # -- the page's side ---------------------------------------------------------------------

    async def receive(
        self, text: str, *, client_id: str, uploads: Sequence[Upload] = ()
    ) -> InboundMessage:
        """Queue the owner's message (returns once the gateway stored it). `client_id` is the
        page's id for this message: sending the same again (a double click, a retry) is
        answered once."""
        if self._handler is None:
            raise WebChannelError("The chat is not running yet; try again in a moment.")
        if not _CLIENT_ID.match(client_id):
            raise WebChannelError("The message has no valid id; reload the page.")
        now = datetime.now(UTC)
        attachments = [await self._save(upload, now) for upload in uploads]
        msg = InboundMessage(
            channel=self.name,
            sender_id=OWNER,
            chat_id=OWNER,
            chat_type="direct",
            text=text,
            message_id=client_id,
            dedup_key=f"{OWNER}:{client_id}",
            mentioned=True,
            attachments=tuple(attachments),
            received_at=now.timestamp(),
        )
        await self._handler(msg)
        return msg

    async def _save(self, upload: Upload, now: datetime) -> Attachment:
        image = (upload.mime_type or "").startswith("image/")
        kind: AttachmentKind = "photo" if image else "document"
        if len(upload.data) > MAX_UPLOAD_BYTES:
            return Attachment(
                kind, None, upload.name, upload.mime_type, len(upload.data), "larger than 20 MB"
            )
        try:
            path = await asyncio.to_thread(self._inbox.save, upload.name, upload.data, now)
        except OSError as exc:
            return Attachment(
                kind, None, upload.name, upload.mime_type, len(upload.data), exc.strerror
            )
        return Attachment(kind, path, upload.name, upload.mime_type, len(upload.data))

    @contextlib.contextmanager
    def listen(self, last_event_id: str = "") -> Iterator[Listener]:
        """A listener to every event from now on, after those after `last_event_id` this
        process still holds (all it holds when the id is from another run)."""
        listener = Listener()
        for event in self._after(last_event_id):
            listener.queue.put_nowait(event)
        self._listeners.add(listener.queue)
        try:
            yield listener
        finally:
            self._listeners.discard(listener.queue)

    def _after(self, last_event_id: str) -> list[WebEvent]:
        boot, _, seq = last_event_id.partition("-")
        if not last_event_id:
            return []
        if boot != self._boot or not seq.isdecimal():  # "²" is a digit int() refuses
            return list(self._recent)
        return [e for e in self._recent if int(e.id.partition("-")[2]) > int(seq)]

    def cursor(self) -> str:
        """The id of the newest event: a page that starts listening is given it, so when it
        reconnects (to this process or, after a restart, to the next) it misses nothing."""
        return f"{self._boot}-{self._last_seq}"

    def _publish(self, kind: str, message_id: str = "", text: str = "") -> None:
        self._last_seq = next(self._seq)
        event = WebEvent(f"{self._boot}-{self._last_seq}", kind, message_id, text)
        if kind == "message":
            self._recent.append(event)
        for queue in list(self._listeners):
            queue.put_nowait(event)
