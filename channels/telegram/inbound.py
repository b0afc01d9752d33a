"""Telegram messages → `InboundMessage`: who, where, whether the bot was addressed, and files.

Mentions: in a group the bot is addressed by an `@bot` mention entity, a `text_mention` of the
bot, a reply to one of its messages (not the service message every forum-topic post "replies"
to), or `/cmd@bot`; the mention is removed from the text and `/new@bot` reads `/new`. Forum
topics are threads: `thread_id` is the topic id, and "1" for the General topic, whose messages
carry no id. Photos (the largest size), documents, voice notes, audio and video are downloaded
and handed to the inbox (`InboxWriter`: it names, dates and stores them); a file over the
download limit, a failed download and a message type the assistant can't read (sticker,
location, poll, …) become an `Attachment` with `error` saying so — never a bare placeholder —
and the gateway answers politely.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from telegram import Bot, Message, MessageEntity
from telegram.error import BadRequest, TelegramError
from telegram.warnings import PTBDeprecationWarning

from channels.base import ChatType, InboundMessage, InboxWriter
from common.attachment import Attachment, AttachmentKind

log = logging.getLogger(__name__)

GENERAL_TOPIC = "1"
MB = 1024 * 1024
DOWNLOAD_MIN_RATE = 200 * 1024  # bytes/s: a slow link still gets a big file
# Checked in this order: an animation also carries `document`, a venue also `location`.
_DOWNLOADABLE: tuple[tuple[str, AttachmentKind], ...] = (
    ("photo", "photo"),
    ("animation", "video"),
    ("video", "video"),
    ("video_note", "video"),
    ("voice", "voice"),
    ("audio", "audio"),
    ("document", "document"),
)
_UNSUPPORTED = (
    "sticker",
    "venue",
    "location",
    "contact",
    "poll",
    "dice",
    "game",
    "story",
    "invoice",
    "giveaway",
    "paid_media",
    "checklist",
)
_CHAT_TYPES: dict[str, ChatType] = {
    "private": "direct",
    "group": "group",
    "supergroup": "group",
    "channel": "channel",
}


@dataclass(frozen=True)
class BotIdentity:
    """The bot itself (from getMe): how it is mentioned and which messages are its own."""

    id: int
    username: str


def is_user_content(message: Message, identity: BotIdentity) -> bool:
    """False for the bot's own messages and for service messages (joins, pins, topic edits)."""
    if message.from_user and message.from_user.id == identity.id:
        return False
    if message.text or message.caption:
        return True
    return any(getattr(message, name, None) for name, _ in _DOWNLOADABLE) or any(
        getattr(message, name, None) for name in _UNSUPPORTED
    )


class MessageConverter:
    """Builds one `InboundMessage` from one message or from the messages of one album."""

    def __init__(
        self,
        bot: Bot,
        identity: BotIdentity,
        *,
        inbox: InboxWriter,
        max_download_mb: int,
        download_timeout_s: float = 20.0,
    ) -> None:
        self._bot = bot
        self.identity = identity
        self._inbox = inbox
        self._max_download_mb = max_download_mb
        self._download_timeout_s = download_timeout_s

    async def convert(self, messages: Sequence[Message]) -> InboundMessage:
        """`messages`: one message, or an album's parts (merged: captions, files in order)."""
        ordered = sorted(messages, key=lambda m: m.message_id)
        first = ordered[0]
        texts: list[str] = []
        mentioned = first.chat.type == "private"
        for message in ordered:
            text, addressed = self._addressing(message)
            mentioned = mentioned or addressed
            if text:
                texts.append(text)
        attachments = [await self._attachment(message) for message in ordered]
        sender = first.from_user
        sender_chat = first.sender_chat or first.chat
        reply = _real_reply(first)
        return InboundMessage(
            channel="telegram",
            sender_id=str(sender.id if sender else sender_chat.id),
            chat_id=str(first.chat.id),
            chat_type=_CHAT_TYPES.get(first.chat.type, "group"),
            text="\n\n".join(texts),
            message_id=str(first.message_id),
            dedup_key=f"{first.chat.id}:{first.message_id}",
            thread_id=_thread_id(first),
            sender_name=(sender.full_name if sender else sender_chat.title) or None,
            mentioned=mentioned,
            reply_to_id=str(reply.message_id) if reply else None,
            attachments=tuple(a for a in attachments if a is not None),
            is_bot=bool(sender and sender.is_bot),
        )

    # -- who is addressed
    def _addressing(self, message: Message) -> tuple[str, bool]:
        """The text with the bot's mention removed, and whether the bot was addressed."""
        text = message.text or message.caption or ""
        entities = message.entities if message.text else message.caption_entities
        username = f"@{self.identity.username}".lower()
        mentioned = False
        cuts: list[tuple[int, int, str]] = []  # python index range, replacement
        for entity in entities or ():
            start, end = _span(text, entity)
            piece = text[start:end]
            if entity.type == MessageEntity.BOT_COMMAND and "@" in piece:
                command, _, target = piece.partition("@")
                if f"@{target}".lower() == username:
                    mentioned = True
                    cuts.append((start, end, command))
            elif entity.type == MessageEntity.MENTION and piece.lower() == username:
                mentioned = True
                cuts.append((start, end, ""))
            elif entity.type == MessageEntity.TEXT_MENTION and entity.user:
                mentioned = mentioned or entity.user.id == self.identity.id
        for start, end, replacement in sorted(cuts, reverse=True):
            text = text[:start] + replacement + text[end:]
        if any(start == 0 and not replacement for start, _, replacement in cuts):
            text = text.lstrip(" ,:;")  # "@bot, what's up" → "what's up"
        reply = _real_reply(message)
        if reply and reply.from_user and reply.from_user.id == self.identity.id:
            mentioned = True
        return re.sub(r"[ \t]{2,}", " ", text).strip(), mentioned

    # -- files
    async def _attachment(self, message: Message) -> Attachment | None:
        for name, kind in _DOWNLOADABLE:
            media = getattr(message, name, None)
            if media:
                if name == "photo":
                    media = max(media, key=lambda p: (p.file_size or 0, p.width * p.height))
                return await self._download(message, kind, media)
        for name in _UNSUPPORTED:
            if getattr(message, name, None):
                label = name.replace("_", " ")
                return Attachment(
                    kind="sticker" if name == "sticker" else "other",
                    error=(
                        f"unsupported message type ({label}): the assistant can read text, "
                        "photos, documents and voice notes"
                    ),
                )
        return None

    async def _download(self, message: Message, kind: AttachmentKind, media: Any) -> Attachment:
        file_name: str | None = getattr(media, "file_name", None)
        mime_type: str | None = getattr(media, "mime_type", None)
        size: int | None = media.file_size
        limit = self._max_download_mb * MB

        def failed(error: str) -> Attachment:
            return Attachment(kind, None, file_name, mime_type, size, error)

        if size and size > limit:
            return failed(self._too_large(size))
        try:
            tg_file = await self._bot.get_file(media.file_id)
        except BadRequest as error:
            if "too big" in error.message.lower():
                return failed(self._too_large(size))
            return failed(f"download failed ({_reason(error)}); ask for the file to be sent again")
        except TelegramError as error:
            return failed(f"download failed ({_reason(error)}); ask for the file to be sent again")
        name = _file_name(message, kind, file_name, tg_file.file_path, mime_type)
        # Updates are handed over in order, so every message behind a stalled download waits
        # for it: the whole transfer is bounded, allowing a slow link for the file's size.
        expected = tg_file.file_size or size or limit
        deadline = self._download_timeout_s + expected / DOWNLOAD_MIN_RATE
        try:
            async with asyncio.timeout(deadline):
                data = bytes(await tg_file.download_as_bytearray(read_timeout=deadline))
            if len(data) > limit:  # more than the size Telegram gave: not kept
                return failed(self._too_large(len(data)))
            rel = await asyncio.to_thread(self._inbox.save, name, data, message.date)
        except TimeoutError:
            return failed(
                f"download failed (no file after {deadline:.0f} s); ask for the file to be sent "
                "again"
            )
        except (TelegramError, OSError) as error:
            return failed(f"download failed ({_reason(error)}); ask for the file to be sent again")
        with warnings.catch_warnings():  # python-telegram-bot 22 warns of its timedelta switch
            warnings.simplefilter("ignore", PTBDeprecationWarning)
            seconds = _seconds(getattr(media, "duration", None))
        return Attachment(kind, rel, file_name, mime_type, len(data), duration_s=seconds)

    def _too_large(self, size: int | None) -> str:
        limit = self._max_download_mb
        shown = f"{_megabytes(size)} MB" if size else f"over {limit} MB"
        return (
            f"This file is too large ({shown}); Telegram bots can download up to {limit} MB. "
            "Ask for a smaller file, or a link to it."
        )


def _reason(error: Exception) -> str:
    """Why a download failed, in a few words: python-telegram-bot puts a whole error page that
    is not JSON (a proxy's HTML) into its message, which would go into the turn."""
    text = error.message if isinstance(error, TelegramError) else str(error)
    text = text.split(". Parsing the server response", 1)[0].strip()
    text = text.splitlines()[0] if text else type(error).__name__
    return text if len(text) <= 120 else text[:119] + "…"


def _seconds(duration: Any) -> float | None:
    """A voice note's or video's `duration` (seconds, or a timedelta in newer versions)."""
    if duration is None:
        return None
    if hasattr(duration, "total_seconds"):
        return float(duration.total_seconds())
    return float(duration)


def _real_reply(message: Message) -> Message | None:
    """The message replied to, unless it is the topic-creation message every topic post
    "replies" to."""
    reply = message.reply_to_message
    if reply is None or reply.forum_topic_created is not None:
        return None
    if message.is_topic_message and reply.message_id == message.message_thread_id:
        return None
    return reply


def _thread_id(message: Message) -> str | None:
    if message.is_topic_message and message.message_thread_id:
        return str(message.message_thread_id)
    if message.chat.is_forum:
        return GENERAL_TOPIC  # the General topic: its messages carry no message_thread_id
    return None


def _span(text: str, entity: MessageEntity) -> tuple[int, int]:
    """An entity's range as Python indices (Telegram counts UTF-16 code units)."""
    utf16 = text.encode("utf-16-le")
    start = len(utf16[: entity.offset * 2].decode("utf-16-le", errors="ignore"))
    end_bytes = utf16[: (entity.offset + entity.length) * 2]
    return start, len(end_bytes.decode("utf-16-le", errors="ignore"))


def _file_name(
    message: Message,
    kind: str,
    original: str | None,
    file_path: str | None,
    mime_type: str | None,
) -> str:
    """`<kind>-<chat>-<message>.<ext>`, or `<chat>-<message>-<original name>` for documents;
    the chat is part of the name because message ids are only unique within a chat. The inbox
    sanitises it."""
    prefix = f"{abs(message.chat.id)}-{message.message_id}"
    base = Path(original).name if original else ""
    if base.strip(". "):
        return f"{prefix}-{base}"
    suffix = Path(file_path or "").suffix
    if not suffix and mime_type:
        suffix = mimetypes.guess_extension(mime_type) or ""
    return f"{kind}-{prefix}{suffix}"


def _megabytes(size: int) -> str:
    value = round(size / MB, 1)
    return str(int(value)) if value == int(value) else str(value)
