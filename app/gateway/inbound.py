"""What the gateway does with an inbound message before and after the queue: make it storable
(`encodable`), tell a storage failure from a malformed message (`is_storage_error`), log ignored
senders without flooding the log (`IgnoredSenders`), and turn a queued batch into the agent's
request (`turn_request`).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import replace
from typing import Any, TypeVar

from agent.requests import AgentRequest
from app.gateway.queue import Batch
from channels.base import InboundMessage
from common.attachment import Attachment
from memory.errors import MemoryError_
from memory.store.sessions import SessionKey

log = logging.getLogger("pinch.gateway")

IGNORED_LOG_EVERY_S = 3600.0  # an ignored sender is logged (INFO) at most this often


class IgnoredSenders:
    """Logs messages the gateway does not answer: one INFO line per channel, chat and sender an
    hour (so an owner asking "why doesn't it answer my friend?" finds the reason at the default
    level), DEBUG otherwise; never the text."""

    def __init__(self) -> None:
        self._logged: dict[tuple[str, str, str], float] = {}

    def log(self, msg: InboundMessage, reason: str, *, routine: bool) -> None:
        now = time.monotonic()
        where = (msg.channel, msg.chat_id, msg.sender_id)
        last = self._logged.get(where)
        if routine or (last is not None and now - last < IGNORED_LOG_EVERY_S):
            log.debug("Ignored a message on %s: %s", msg.channel, reason)
            return
        if len(self._logged) > 1000:  # forget the senders quiet for an hour
            cutoff = now - IGNORED_LOG_EVERY_S
            self._logged = {k: t for k, t in self._logged.items() if t > cutoff}
        self._logged[where] = now
        chat = "" if msg.chat_type == "direct" else f" in {msg.chat_type} {msg.chat_id}"
        log.info(
            "Not answering %s sender %s%s: %s (logged once an hour per sender)",
            msg.channel,
            msg.sender_id,
            chat,
            reason,
        )


_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(msg: InboundMessage) -> InboundMessage:
    """`msg` with every character UTF-8 cannot store replaced by U+FFFD: a lone surrogate (a
    platform's JSON may carry "\\udcff") would otherwise fail the queue and lose the message."""
    if not isinstance(msg, InboundMessage):
        return msg
    attachments = tuple(_replace_surrogates(a) for a in msg.attachments)
    return replace(_replace_surrogates(msg), attachments=attachments)


_Fields = TypeVar("_Fields", InboundMessage, Attachment)


def _replace_surrogates(item: _Fields) -> _Fields:
    changes: dict[str, Any] = {
        name: _SURROGATE.sub("\ufffd", value)
        for name, value in vars(item).items()
        if isinstance(value, str) and _SURROGATE.search(value)
    }
    return replace(item, **changes) if changes else item


def is_storage_error(exc: BaseException) -> bool:
    """SQLite's errors (stdlib or pysqlite3 driver) and the database's own advice errors."""
    module = type(exc).__module__
    return isinstance(exc, MemoryError_) or module.startswith(("sqlite3", "pysqlite3"))


def turn_request(key: SessionKey, batch: Batch) -> AgentRequest:
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
                attachments.append(item)
            else:
                text += f"\n[{item.kind} not saved: {item.error or 'unavailable'}]"
        if len(senders) > 1:
            text = f"{msg.sender_name or msg.sender_id}: {text}"
        if text.strip():
            parts.append(text.strip())
    owner = all(q.sender_role == "owner" for q in batch.messages)
    last = messages[-1]
    return AgentRequest(
        key,
        "\n\n".join(parts),
        sender="owner" if owner else "person",
        sender_id=None if owner or len(senders) > 1 else last.sender_id,
        sender_name=None if owner or len(senders) > 1 else last.sender_name,
        attachments=tuple(attachments),
        message_ids=tuple(m.dedup_key for m in messages),
        channel=last.channel,
        resumed=batch.resumed,
    )


UNREADABLE = (
    "Sorry, I can't read that kind of message: send text, a photo, a document or a voice note."
)


def unreadable(item: Attachment) -> bool:
    """An attachment of a type the assistant cannot read (not one that failed to download)."""
    return item.path is None and item.kind in ("sticker", "other")
