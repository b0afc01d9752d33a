"""What a channel knows of Pinch: messages in, messages out, and a small adapter interface.

    channel = TelegramChannel(config, inbox=inbox, state_dir=home / "state")
    await channel.start(on_message)      # the gateway's callback; it queues durably, then returns
    sent = await channel.send(OutboundMessage("telegram", chat_id="42", text="**hi**"))
    await channel.edit(sent[-1], "**hi there**")
    await channel.typing("42")
    await channel.stop()

`channels/` imports nothing from `agent/`, `memory/` or `app/` (only `common/`): an adapter turns
platform events into `InboundMessage` and delivers `OutboundMessage` (Markdown source text,
converted to the platform's format by the adapter, with a plain-text retry when the platform
refuses the formatting). Access control, sessions, queues and the agent live in the gateway
(`app/`). Received files are handed, as bytes, to the `InboxWriter` the composition root passes
in (memory/files/inbox.py), which decides where and how they are stored.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from channels.split import split_text
from common.attachment import Attachment

ChatType = Literal["direct", "group", "channel"]


class InboxWriter(Protocol):
    """Where an adapter puts the files that came with messages (memory.files.inbox.Inbox)."""

    def save(self, name: str, data: bytes, received_at: datetime) -> str:
        """Store `data` under a safe form of `name` (any characters; the writer sanitises) in
        the folder of `received_at`'s day; returns the workspace-relative path that goes into
        `Attachment.path`. Blocking: call it in a worker thread. Raises OSError."""
        ...


@dataclass(frozen=True)
class InboundMessage:
    """One message (or one album/media group) from a platform, as the gateway needs it.

    `dedup_key` identifies the post on its platform so a redelivery (Telegram update re-fetched
    after a restart, Slack retry, the Slack `message` + `app_mention` pair) is recognised:
    Telegram "<chat_id>:<message_id>", Slack "<channel>:<ts>". `mentioned` is True when the bot
    was addressed in a group (an @mention, a reply to one of its messages, `/cmd@bot`, or a
    thread the bot has joined on Slack); in direct chats it is always True.
    """

    channel: str  # "telegram" | "slack" | "cli"
    sender_id: str  # stable platform user id (numeric on Telegram, U… on Slack)
    chat_id: str  # the DM/group/channel id on the platform
    chat_type: ChatType
    text: str  # plain text, bot mention stripped; "" when only attachments came
    message_id: str  # platform id of the message (Slack ts); for an album, its first message
    dedup_key: str
    thread_id: str | None = None  # Telegram forum topic id, Slack thread_ts
    sender_name: str | None = None  # display name, for the model's benefit only
    mentioned: bool = False
    reply_to_id: str | None = None
    attachments: tuple[Attachment, ...] = ()
    is_bot: bool = False  # sent by a bot (adapters drop their own messages before this)
    received_at: float = field(default_factory=time.time)


@dataclass(frozen=True)
class OutboundMessage:
    """A reply or notice to deliver. `text` is Markdown source; the adapter converts and splits."""

    channel: str
    chat_id: str
    text: str
    thread_id: str | None = None
    reply_to_id: str | None = None


@dataclass(frozen=True)
class SentMessage:
    """A message the platform accepted, as needed to edit it later."""

    channel: str
    chat_id: str
    message_id: str
    thread_id: str | None = None


@dataclass(frozen=True)
class ChannelHealth:
    """What `pinch doctor` and the health endpoint report for a channel."""

    ok: bool
    detail: str  # one line, e.g. "connected as @pinch_bot; last poll 2 s ago"


MessageHandler = Callable[[InboundMessage], Awaitable[None]]


class Channel(abc.ABC):
    """A platform adapter. One instance per configured platform account.

    `start` connects and begins delivering messages to `on_message`, returning once running;
    the handler is awaited before the platform delivery is acknowledged where the platform
    allows it (the gateway stores the message durably and returns quickly). `send` returns the
    messages the platform accepted (a long reply is split into several); `edit` replaces the
    text of one of them. Errors that a retry cannot fix raise `ChannelError` with advice.
    """

    name: str = ""
    max_message_chars: int = 4000  # the platform's limit for one message, in characters
    min_edit_interval_s: float = 1.0  # streamed edits are at least this far apart

    @abc.abstractmethod
    async def start(self, on_message: MessageHandler) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    @abc.abstractmethod
    async def send(self, message: OutboundMessage) -> list[SentMessage]: ...

    @abc.abstractmethod
    async def edit(self, sent: SentMessage, text: str) -> list[SentMessage]:
        """Show `text` in `sent`; returns the messages the text now occupies: `[sent]`, plus new
        messages after it when the text no longer fits one (nothing is dropped)."""

    def split(self, text: str) -> list[str]:
        """`text` (Markdown) as pieces that `send` delivers as exactly one message each, in
        order, together holding all of it: what a streamed reply is cut into. By default cut
        at `max_message_chars` between paragraphs, lines or words; an adapter whose rendering
        is longer than the source, or that must keep code blocks whole, overrides it."""
        return split_text(text, self.max_message_chars)

    @abc.abstractmethod
    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        """Show "typing…" once (platforms expire it after a few seconds; the gateway repeats)."""

    @abc.abstractmethod
    async def check(self) -> ChannelHealth:
        """Reachability and liveness for `pinch doctor` (getMe / auth.test, polling health)."""


class ChannelError(Exception):
    """A platform failure worded as advice (bad token, chat not found, …).

    `maybe_delivered`: the platform may have acted on the call (a send timed out or its
    connection dropped after the request went out) — sending the same text again could show it
    twice."""

    def __init__(self, message: str, *, maybe_delivered: bool = False) -> None:
        super().__init__(message)
        self.maybe_delivered = maybe_delivered
