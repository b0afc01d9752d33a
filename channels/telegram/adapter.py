"""The Telegram adapter (python-telegram-bot 22, Bot API over HTTPS).

    channel = TelegramChannel(settings.telegram, inbox=Inbox(workspace, tz=clock.tz),
                              state_dir=pinch_home / "state")
    await channel.start(on_message)    # long polling (default) or webhook; returns once running
    sent = await channel.send(OutboundMessage("telegram", chat_id="42", text="**hi**"))
    await channel.edit(sent[-1], "**hi there**")    # longer than a message: continues after it
    await channel.typing("42")
    health = await channel.check()     # getMe, age of the last completed poll, last error
    await channel.stop()

Polling and sending use separate HTTP connection pools (and separate `Bot` objects), so a
stuck long poll can't starve replies and a burst of replies can't delay the poll. Replies are
Markdown, sent as Telegram HTML, split at 4,096 characters; a send or edit Telegram refuses for
its formatting is retried once as plain text made from the Markdown source. 429 is honoured
(retry_after), "message is not modified" is ignored, and the General topic of a forum (thread
"1") is sent to without message_thread_id (Telegram refuses it) while typing keeps it.
Unsupported message types reach the gateway as an `InboundMessage` whose attachment says
"unsupported…"; the gateway decides what to answer.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
from telegram import BotCommand, LinkPreviewOptions, Message, ReplyParameters
from telegram.constants import ChatAction, ParseMode
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.request import HTTPXRequest

from channels.base import (
    Channel,
    ChannelError,
    ChannelHealth,
    InboxWriter,
    MessageHandler,
    OutboundMessage,
    SentMessage,
)
from channels.channel_config import TelegramConfig
from channels.telegram.dispatch import UpdateDispatcher
from channels.telegram.format import TelegramPiece, split_for_telegram
from channels.telegram.inbound import GENERAL_TOPIC, BotIdentity, MessageConverter
from channels.telegram.polling import Poller, RawUpdatesBot, retry_after_s
from channels.telegram.token_lock import TokenLock
from channels.telegram.webhook import WebhookReceiver
from common.redact import RedactingFilter, redact

log = logging.getLogger("channels.telegram.adapter")

COMMANDS = (
    ("new", "Start a fresh conversation (the old one is saved to memory)"),
    ("reset", "Same as /new"),
    ("status", "Model, context size and memory state"),
    ("context", "What the assistant sees on the next turn"),
    ("project", "Show or set the project this conversation is in"),
    ("help", "What you can do here"),
)
_SEND_ATTEMPTS = 3
# A call whose connection was never made (refused, a connect or pool timeout: the request did
# not leave, so it cannot arrive twice) is tried this many times in all, backing off 1, 2, 4,
# 8 s: a burst of replies must not turn a busy moment into error notices.
_NEVER_SENT_ATTEMPTS = 5
_NO_PREVIEW = LinkPreviewOptions(is_disabled=True)
T = TypeVar("T")


class TelegramChannel(Channel):
    name = "telegram"
    max_message_chars = 4096
    min_edit_interval_s = 1.0

    def __init__(
        self,
        config: TelegramConfig,
        *,
        inbox: InboxWriter,
        state_dir: Path,
        retry_base_s: float = 1.0,
    ) -> None:
        """`inbox`: where received files go (it names and dates them); `state_dir`: this data
        directory's copy of the per-token poller lock (the other is machine-wide, see
        `TokenLock`); `retry_base_s`: the first backoff delay after a failed poll (doubling,
        ≤ 30 s)."""
        if config.bot_token is None or not config.bot_token.get_secret_value():
            raise ChannelError(
                "No Telegram bot token: set PINCH_TELEGRAM__BOT_TOKEN (from @BotFather)"
            )
        self._config = config
        self._token = config.bot_token.get_secret_value()
        _redact_token_in_logs(self._token)
        self._inbox = inbox
        self._lock = TokenLock(state_dir, self._token)
        self._retry_base_s = retry_base_s
        # Replies: up to [gateway] max_concurrent_turns (4) turns an agent, each with its
        # streamed edits and its "typing…" beside it, plus notices: connections are opened
        # only when needed, and one that waits for a free one past pool_timeout is retried.
        self._bot = self._make_bot(pool_size=16, read_timeout=20.0)
        self._identity: BotIdentity | None = None
        self._poller: Poller | None = None
        self._webhook: WebhookReceiver | None = None
        self._dispatcher: UpdateDispatcher | None = None

    # -- lifecycle
    async def start(self, on_message: MessageHandler) -> None:
        """Take the token's lock, then poll (clearing any webhook, dropping the backlog only if
        `drop_pending_updates`) or register the webhook. Raises `ChannelError` for what a retry
        can't fix: another process holds the token, the token is refused, webhook settings."""
        self._lock.acquire()
        try:
            if self._config.mode == "webhook":
                await self._start_webhook(on_message)
            else:
                await self._start_polling(on_message)
        except BaseException:
            self._lock.release()
            raise

    async def stop(self) -> None:
        if self._poller:
            await self._poller.stop()
            self._poller = None
        if self._webhook:
            await self._webhook.stop()
            self._webhook = None
        try:
            await asyncio.wait_for(self._bot.shutdown(), timeout=5)
        except Exception as error:
            log.info("Telegram: closing the connection pool failed (%s)", self._describe(error))
        self._lock.release()

    async def _start_polling(self, on_message: MessageHandler) -> None:
        try:
            await self._prepare(on_message)
        except (InvalidToken, Forbidden) as error:
            raise self._advice(error) from None
        except TelegramError as error:
            log.warning(
                "Telegram unreachable at start (%s); will keep trying in the background",
                self._describe(error),
            )

        async def prepare_later() -> None:
            if self._dispatcher is None:
                await self._prepare(on_message)

        self._poller = Poller(
            lambda: self._make_bot(pool_size=1, read_timeout=10.0),
            accept=self._accept,
            drop_unfinished=self._drop_unfinished,
            poll_timeout_s=self._config.poll_timeout_s,
            poll_stall_s=self._config.poll_stall_s,
            album_poll_s=self._config.media_group_wait_s / 4,
            drop_pending_updates=self._config.drop_pending_updates,
            retry_base_s=self._retry_base_s,
            before_polling=prepare_later,
            describe=self._describe,
        )
        self._poller.start()

    async def _accept(self, raw: Any) -> asyncio.Future[None]:
        assert self._dispatcher is not None  # the poller runs `_prepare` before any update
        return await self._dispatcher.accept(raw)

    async def _drop_unfinished(self) -> None:
        if self._dispatcher is not None:
            await self._dispatcher.close()

    async def _start_webhook(self, on_message: MessageHandler) -> None:
        config = self._config
        if not config.webhook_url or config.webhook_secret is None:
            raise ChannelError(
                "Telegram webhook mode needs [telegram] webhook_url (a public https URL) and "
                'PINCH_TELEGRAM__WEBHOOK_SECRET; or use mode = "polling"'
            )
        secret = config.webhook_secret.get_secret_value()
        try:
            await self._prepare(on_message)
        except TelegramError as error:
            raise self._advice(error) from None
        assert self._dispatcher is not None
        self._webhook = WebhookReceiver(
            self._dispatcher,
            listen=config.webhook_listen,
            port=config.webhook_port,
            path=urlsplit(config.webhook_url).path,
            secret=secret,
        )
        await self._webhook.start()
        try:
            await self._bot.set_webhook(
                config.webhook_url,
                secret_token=secret,
                allowed_updates=["message", "channel_post"],
                drop_pending_updates=config.drop_pending_updates,
            )
        except TelegramError as error:
            await self._webhook.stop()
            raise self._advice(error) from None

    async def _prepare(self, on_message: MessageHandler) -> None:
        """getMe (who the bot is, for mentions) and the command menu."""
        me = await self._bot.get_me()
        self._identity = BotIdentity(id=me.id, username=me.username or "")
        converter = MessageConverter(
            self._bot,
            self._identity,
            inbox=self._inbox,
            max_download_mb=self._config.max_download_mb,
            download_timeout_s=self._config.download_timeout_s,
        )
        self._dispatcher = UpdateDispatcher(
            self._bot, converter, on_message, album_wait_s=self._config.media_group_wait_s
        )
        try:
            await self._bot.set_my_commands([BotCommand(c, d) for c, d in COMMANDS])
        except TelegramError as error:
            log.warning("Telegram: could not set the command menu (%s)", self._describe(error))
        log.info("Telegram: connected as @%s", self._identity.username)

    # -- sending
    def split(self, text: str) -> list[str]:
        """Markdown pieces whose rendered HTML fits one message each; a code block longer than
        a message is cut between lines, each part fenced again (so each part is code)."""
        return [chunk.source for chunk in split_for_telegram(text, self.max_message_chars)]

    async def send(self, message: OutboundMessage) -> list[SentMessage]:
        """Deliver a Markdown reply, split into as many messages as it needs (in order). The
        first part replies to `reply_to_id` if given (sent anyway if that message is gone)."""
        chunks = split_for_telegram(message.text, self.max_message_chars)
        return await self._send_chunks(message, chunks)

    async def _send_chunks(
        self, message: OutboundMessage, chunks: list[TelegramPiece]
    ) -> list[SentMessage]:
        thread = _send_thread(message.thread_id)
        chat_id = message.chat_id
        sent: list[SentMessage] = []
        for i, chunk in enumerate(chunks):
            reply = None
            if i == 0 and message.reply_to_id:
                reply = ReplyParameters(int(message.reply_to_id), allow_sending_without_reply=True)
            try:
                result = await self._send_chunk(chat_id, chunk, thread, reply)
            except ChatMigrated as moved:  # a group became a supergroup: its id changed
                log.info("Telegram: chat %s moved to %s", chat_id, moved.new_chat_id)
                chat_id = str(moved.new_chat_id)
                result = await self._send_chunk(chat_id, chunk, thread, reply)
            sent.append(
                SentMessage(
                    "telegram", str(result.chat_id), str(result.message_id), message.thread_id
                )
            )
        return sent

    async def _send_chunk(
        self, chat_id: str, chunk: TelegramPiece, thread: int | None, reply: ReplyParameters | None
    ) -> Message:
        def call(text: str, parse_mode: str | None) -> Awaitable[Message]:
            return self._bot.send_message(
                chat_id,
                text,
                parse_mode=parse_mode,
                message_thread_id=thread,
                reply_parameters=reply,
                link_preview_options=_NO_PREVIEW,
            )

        return await self._formatted(chunk, call)

    async def edit(self, sent: SentMessage, text: str) -> list[SentMessage]:
        """Replace a sent message's text (Markdown). Text longer than one message fills this
        one and continues in new messages after it (all returned, `sent` first). Unchanged
        text is a no-op."""
        chunks = split_for_telegram(text, self.max_message_chars)
        if not chunks:
            return [sent]

        def call(body: str, parse_mode: str | None) -> Awaitable[Message | bool]:
            return self._bot.edit_message_text(
                body,
                chat_id=sent.chat_id,
                message_id=int(sent.message_id),
                parse_mode=parse_mode,
                link_preview_options=_NO_PREVIEW,
            )

        try:
            await self._formatted(chunks[0], call)
        except ChannelError as error:
            if "not modified" not in str(error):
                raise
        if len(chunks) == 1:
            return [sent]
        rest = OutboundMessage("telegram", sent.chat_id, "", sent.thread_id)
        return [sent, *await self._send_chunks(rest, chunks[1:])]

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        """One "typing…" action (Telegram shows it ~5 s). Failures are logged, never raised."""
        try:
            await self._bot.send_chat_action(
                chat_id,
                ChatAction.TYPING,
                message_thread_id=int(thread_id) if thread_id else None,
            )
        except TelegramError as error:
            log.info("Telegram: typing indicator failed (%s)", self._describe(error))

    async def _formatted(
        self, chunk: TelegramPiece, call: Callable[[str, str | None], Awaitable[T]]
    ) -> T:
        """Send as HTML; if Telegram can't parse it, once more as plain text from the source."""
        try:
            return await self._retrying(lambda: call(chunk.html, ParseMode.HTML))
        except BadRequest as error:
            if "parse entities" not in error.message.lower():
                raise self._advice(error) from None
            log.info("Telegram refused the formatting (%s); sending plain text", error.message)
        try:
            return await self._retrying(lambda: call(chunk.plain, None))
        except BadRequest as error:
            raise self._advice(error) from None

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """429: wait as long as Telegram asks. A connection that was never made (refused, a
        connect or pool timeout): retry with backoff (the message can't have been sent).
        Anything else surfaces (BadRequest) or becomes advice."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await call()
            except RetryAfter as error:
                if attempt >= _SEND_ATTEMPTS:
                    raise self._advice(error) from None
                wait = retry_after_s(error)
                log.info("Telegram asked to slow down (429); waiting %.0f s", wait)
                await asyncio.sleep(wait)
            except (BadRequest, ChatMigrated):
                raise
            except NetworkError as error:
                if not _never_sent(error) or attempt >= _NEVER_SENT_ATTEMPTS:
                    raise self._advice(error) from None
                delay = self._retry_base_s * 2 ** (attempt - 1)
                log.info("Telegram: %s; trying again in %.0f s", self._describe(error), delay)
                await asyncio.sleep(delay)
            except TelegramError as error:
                raise self._advice(error) from None

    # -- health
    async def check(self) -> ChannelHealth:
        """getMe, and when running: the age of the last completed poll and the last error."""
        try:
            me = await asyncio.wait_for(self._bot.get_me(), timeout=15)
        except Exception as error:
            advice = str(self._advice(error)) if isinstance(error, TelegramError) else None
            return ChannelHealth(False, advice or f"Telegram unreachable ({self._describe(error)})")
        parts = [f"connected as @{me.username}"]
        ok = True
        now = time.monotonic()
        if self._poller and self._poller.running:
            health = self._poller.health
            if health.last_completed_at is None:
                parts.append("no poll completed yet")
                ok = now - health.started_at <= self._config.poll_stall_s
            else:
                age = now - health.last_completed_at
                parts.append(f"last poll {age:.0f} s ago")
                ok = age <= self._config.poll_stall_s
            if health.rebuilds:
                parts.append(f"polling rebuilt {health.rebuilds} times")
            if health.last_error and health.last_error_at is not None:
                ago = now - health.last_error_at
                parts.append(f"last error {ago:.0f} s ago: {health.last_error}")
        elif self._webhook:
            last = self._dispatcher.last_update_at if self._dispatcher else None
            parts.append("webhook mode")
            if last:
                parts.append(f"last update {time.time() - last:.0f} s ago")
        return ChannelHealth(ok, "; ".join(parts))

    # -- helpers
    def _make_bot(self, *, pool_size: int, read_timeout: float) -> RawUpdatesBot:
        base = self._config.api_base_url.rstrip("/")

        def request() -> HTTPXRequest:
            return HTTPXRequest(
                connection_pool_size=pool_size,
                read_timeout=read_timeout,
                write_timeout=20.0,
                connect_timeout=10.0,
                pool_timeout=10.0,
                httpx_kwargs={"verify": _tls_context()},
            )

        return RawUpdatesBot(
            self._token,
            base_url=f"{base}/bot",
            base_file_url=f"{base}/file/bot",
            request=request(),
            get_updates_request=request(),
        )

    def _describe(self, error: BaseException) -> str:
        text = getattr(error, "message", None) or str(error) or type(error).__name__
        return redact(str(text), [self._token])

    def _advice(self, error: TelegramError) -> ChannelError:
        detail = self._describe(error)
        if isinstance(error, InvalidToken):
            return ChannelError(
                f"Telegram refused the bot token ({detail}): check PINCH_TELEGRAM__BOT_TOKEN "
                "(the token @BotFather gave you)"
            )
        if isinstance(error, Forbidden):
            return ChannelError(
                f"Telegram refused to deliver ({detail}): the user blocked the bot, or the bot "
                "is no longer in that chat"
            )
        if isinstance(error, RetryAfter):
            return ChannelError(f"Telegram rate limit ({detail}); try again later")
        if isinstance(error, NetworkError):
            return ChannelError(
                f"Telegram unreachable ({detail}); check the network",
                maybe_delivered=_maybe_delivered(error),
            )
        return ChannelError(f"Telegram refused the request ({detail})")


@functools.lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every connection pool (building one takes ~50 ms)."""
    return httpx.create_ssl_context()


def _send_thread(thread_id: str | None) -> int | None:
    """Sends into a forum topic carry its id, except the General topic: Telegram refuses
    message_thread_id=1 ("message thread not found")."""
    if not thread_id or thread_id == GENERAL_TOPIC:
        return None
    return int(thread_id)


def _redact_token_in_logs(token: str) -> None:
    """httpx logs every request URL at INFO and PTB its API URL at DEBUG; both contain the
    token. A filter on those loggers replaces it before any handler sees the line."""
    for name in (
        "httpx",
        "telegram",
        "telegram.Bot",
        "telegram.request.HTTPXRequest",
        "telegram.request.BaseRequest",
        "telegram.ext.Updater",
    ):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) and token in f.extra for f in logger.filters):
            logger.addFilter(RedactingFilter([token]))


def _never_sent(error: NetworkError) -> bool:
    """Whether the request never left: no connection could be made (ConnectError), or none in
    time (python-telegram-bot's "Timed out" caused by httpx's ConnectTimeout), or no free one
    in the pool ("Pool timeout")."""
    if isinstance(error, TimedOut):
        cause = type(error.__cause__).__name__
        return cause in ("ConnectTimeout", "PoolTimeout") or "Pool timeout" in error.message
    return "ConnectError" in error.message


def _maybe_delivered(error: NetworkError) -> bool:
    """Whether Telegram may have acted on a call that failed: the request went out and no
    answer came back (a timeout, a dropped connection), as opposed to a connection never made,
    a wait for a free connection, or an HTTP error status (the platform answered)."""
    if _never_sent(error):
        return False
    return isinstance(error, TimedOut) or error.message.startswith("httpx.")
