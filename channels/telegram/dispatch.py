"""Raw Telegram updates → `InboundMessage`, shared by polling and the webhook.

`UpdateDispatcher` skips repeated update_ids, skips malformed and unknown updates with one log
line, and collects an album's parts (several updates sharing a media_group_id) into one message;
later messages of the same chat wait behind an album, so the gateway sees chat order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from telegram import Bot, Message, Update

from channels.base import InboundMessage, MessageHandler
from channels.telegram.inbound import MessageConverter, is_user_content

log = logging.getLogger("channels.telegram.adapter")

_SEEN_CAPACITY = 4096


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
