"""The Slack adapter: Socket Mode (or the Events API) in, chat.postMessage / chat.update out.

    channel = SlackChannel(settings.slack, inbox=inbox, state_dir=home / "state")
    await channel.start(on_message)

Built on slack-bolt's `AsyncApp`. What it guarantees the gateway:
- Every Socket Mode envelope is acknowledged first, then processed; `on_message` runs in a
  per-chat lane after the ack, so a slow gateway never makes Slack retry.
- One post gives at most one `InboundMessage` per de-duplication window (`dedup_ttl_s`): the
  `message` + `app_mention` pair and Slack's retries share `dedup_key = "<channel>:<ts>"`. A
  retry is never dropped for being a retry (it may be the only copy that arrived); the
  gateway's durable de-dup is the backstop across restarts.
- The bot's own messages, other bots' messages, and message subtypes that aren't posts (edits,
  deletions, joins…) never reach the gateway.
- A thread is a session: a top-level @mention in a channel gets `thread_id = ts`, so the reply
  opens a thread; in a thread the bot has posted in, follow-ups count as mentions (remembered in
  `state_dir/slack-threads.json`). `!new`, `!reset`, `!status`, `!context`, `!project`, `!help`
  become `/new`… because Slack delivers no slash commands in threads.
- Writes are never retried after a timeout or a dropped connection (an ambiguous post must not
  appear twice); only a definite HTTP 429 is retried, after its `Retry-After`.
- `typing` is a no-op: Slack has no typing indicator for bots outside its Assistant threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from channels.base import (
    Attachment,
    Channel,
    ChannelError,
    ChannelHealth,
    ChatType,
    InboundMessage,
    InboxWriter,
    MessageHandler,
    OutboundMessage,
    SentMessage,
)
from channels.channel_config import SlackConfig
from channels.slack.files import DownloadLimits, download_shared_file
from channels.slack.format import (
    markdown_to_mrkdwn,
    slack_to_text,
    split_markdown,
    split_mrkdwn,
)
from channels.slack.receive import AckFirstSocketModeHandler, open_socket_mode, serve_events
from channels.slack.threads import THREADS_FILE, JoinedThreads
from channels.slack.web import (
    ESSENTIAL_SCOPES,
    SCOPES,
    DefiniteRateLimitRetry,
    SlackWebApi,
    advice_for,
    header_value,
    sdk_logger,
)

log = logging.getLogger("pinch.channels.slack")

_POST_SUBTYPES = {None, "file_share", "thread_broadcast"}  # subtypes that are someone's post
_COMMAND = re.compile(r"^!(new|reset|status|context|project|help)\b", re.IGNORECASE)
_MAX_RETRY_AFTER_S = 120
_HARD_LIMIT_CHARS = 39000  # Slack truncates a message's text at 40,000 characters


class SlackChannel(Channel):
    """Slack through one bot (bot token `xoxb-`) in one workspace."""

    name = "slack"
    max_message_chars = 3900  # Slack truncates at 40,000 but advises < 4,000 per message
    min_edit_interval_s = 1.5  # chat.update is Tier 3 (~50/min per workspace)

    def __init__(
        self,
        config: SlackConfig,
        *,
        inbox: InboxWriter,
        state_dir: Path,
    ) -> None:
        """`inbox`: where shared files go (it names and dates them); `state_dir`: where the
        threads the bot joined are remembered."""
        self.config = config
        self.inbox = inbox
        self.threads = JoinedThreads(state_dir / THREADS_FILE)
        self._seen: dict[str, float] = {}  # dedup key -> monotonic expiry
        self._lanes: dict[str, asyncio.Task[None]] = {}
        self._chat_types: dict[str, ChatType] = {}
        self._user_names: dict[str, str | None] = {}
        self._on_message: MessageHandler | None = None
        self.web = SlackWebApi(config)
        self._handler: AckFirstSocketModeHandler | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._events_runner: web.AppRunner | None = None
        self.bot_user_id = ""
        self.bot_id = ""
        self.team_id = ""

    @property
    def _session(self) -> aiohttp.ClientSession | None:
        """The HTTP session of the Web API clients, None while none is open."""
        return self.web.session

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self, on_message: MessageHandler) -> None:
        """Check the tokens, then connect. Returns once connected (or, if the connection is slow
        to come up, after `timeout_s` with reconnection continuing in the background)."""
        if self.config.bot_token is None:
            raise ChannelError("Slack needs a bot token: set PINCH_SLACK__BOT_TOKEN (xoxb-…)")
        if self.config.mode == "socket" and self.config.app_token is None:
            raise ChannelError(
                "Slack Socket Mode needs an app-level token: set PINCH_SLACK__APP_TOKEN (xapp-…, "
                "scope connections:write)"
            )
        if self.config.mode == "events" and self.config.signing_secret is None:
            raise ChannelError(
                "Slack events mode needs the signing secret: set PINCH_SLACK__SIGNING_SECRET"
            )
        self._on_message = on_message
        try:
            auth = await self.web.call("auth_test")
            self.bot_user_id = str(auth.get("user_id") or "")
            self.bot_id = str(auth.get("bot_id") or "")
            self.team_id = str(auth.get("team_id") or "")
            app = self._bolt_app()
            if self.config.mode == "events":
                await self._serve_events(app)
            else:
                await self._connect_socket(app)
        except BaseException:
            await self.stop()  # leave no session or socket behind
            raise
        log.info("Slack connected as %s (%s mode)", auth.get("user"), self.config.mode)

    async def stop(self) -> None:
        if self._connecting is not None:
            self._connecting.cancel()
        if self._handler is not None:
            with contextlib.suppress(Exception):
                await self._handler.close_async()
            self._handler = None
        if self._events_runner is not None:
            await self._events_runner.cleanup()
            self._events_runner = None
        lanes = list(self._lanes.values())
        if lanes:
            _, pending = await asyncio.wait(lanes, timeout=5)
            for task in pending:
                task.cancel()
        await self.web.close()

    def _bolt_app(self) -> AsyncApp:
        bot_token = self.config.bot_token.get_secret_value() if self.config.bot_token else ""

        async def authorize() -> AuthorizeResult:
            # From the auth.test done at start: no Web API call on the event path.
            return AuthorizeResult(
                enterprise_id=None,
                team_id=self.team_id,
                bot_token=bot_token,
                bot_id=self.bot_id,
                bot_user_id=self.bot_user_id,
            )

        secret = self.config.signing_secret
        # Bolt gets a token-less client: it builds per-request clients from `authorize`.
        bolt_client = AsyncWebClient(
            base_url=self.config.api_base_url,
            session=self.web.http(),
            retry_handlers=[DefiniteRateLimitRetry(max_retry_count=3)],
            logger=sdk_logger("web"),
        )
        app = AsyncApp(
            client=bolt_client,
            authorize=authorize,
            logger=sdk_logger("bolt"),
            process_before_response=True,  # our listener only queues; it is quick
            request_verification_enabled=self.config.mode == "events",
            signing_secret=secret.get_secret_value() if secret else "",
        )
        app.event("message")(self._on_event)
        app.event("app_mention")(self._on_event)
        app.event(re.compile(".*"))(self._on_other_event)
        return app

    async def _connect_socket(self, app: AsyncApp) -> None:
        self._handler = await open_socket_mode(app, self.config)
        self._connecting = asyncio.create_task(self._handler.connect_async())
        done, _ = await asyncio.wait({self._connecting}, timeout=self.config.timeout_s)
        if not done:
            log.warning("Slack Socket Mode is slow to connect; still trying in the background")

    async def _serve_events(self, app: AsyncApp) -> None:
        self._events_runner = await serve_events(app, self.config)

    # -- inbound -------------------------------------------------------------------------------

    async def _on_other_event(self, event: dict[str, Any]) -> None:
        log.debug("Ignored a Slack %r event", event.get("type"))

    async def _on_event(self, event: dict[str, Any]) -> None:
        """Bolt's listener: filter and de-duplicate now (no awaits, so arrival order holds),
        then hand the rest to the chat's lane and return at once."""
        try:
            key = self._admit(event)
        except Exception as e:  # a malformed event must not reach Bolt's error handler
            log.warning("Ignored a malformed Slack %r event (%s)", event.get("type"), e)
            return
        if key is None:
            return
        chat = str(event["channel"])
        previous = self._lanes.get(chat)
        task = asyncio.create_task(self._deliver(event, key, previous))
        self._lanes[chat] = task
        task.add_done_callback(
            lambda t: self._lanes.pop(chat, None) if self._lanes.get(chat) is t else None
        )

    def _admit(self, event: Mapping[str, Any]) -> str | None:
        """The de-dup key of an event that should become an InboundMessage, or None."""
        channel, ts = event.get("channel"), event.get("ts")
        if not isinstance(channel, str) or not isinstance(ts, str) or not channel or not ts:
            log.info("Ignored a Slack %r event without a channel or ts", event.get("type"))
            return None
        subtype = event.get("subtype")
        user = event.get("user")
        if event.get("bot_id") or subtype == "bot_message" or user == self.bot_user_id:
            return None  # its own posts, and other bots (two bots must never talk in a loop)
        if subtype not in _POST_SUBTYPES:
            log.debug("Ignored a Slack message of subtype %r", subtype)
            return None
        if not isinstance(user, str) or not user:
            log.info("Ignored a Slack message without a sender")
            return None
        key = f"{channel}:{ts}"
        now = time.monotonic()
        if self._seen.get(key, 0.0) > now:
            log.debug(
                "Slack delivered %s again (retry %s); already handled", key, event.get("type")
            )
            return None
        if len(self._seen) > 10000:
            self._seen = {k: t for k, t in self._seen.items() if t > now}
        self._seen[key] = now + self.config.dedup_ttl_s
        return key

    def _mentions_bot(self, event: Mapping[str, Any]) -> bool:
        return bool(self.bot_user_id) and f"<@{self.bot_user_id}" in str(event.get("text") or "")

    async def _deliver(
        self, event: dict[str, Any], key: str, previous: asyncio.Task[None] | None
    ) -> None:
        if previous is not None:
            await asyncio.wait({previous})  # its outcome is its own; ours may still be cancelled
        try:
            message = await self._inbound(event, key)
            assert self._on_message is not None
            await self._on_message(message)
        except Exception as e:
            # Forget the key so another copy of this post (the app_mention twin, a retry) can
            # still get through.
            self._seen.pop(key, None)
            log.error("Could not pass a Slack message to the gateway: %s", e)

    async def _inbound(self, event: dict[str, Any], key: str) -> InboundMessage:
        channel, ts = str(event["channel"]), str(event["ts"])
        chat_type = await self._chat_type(channel, event.get("channel_type"))
        thread_ts = event.get("thread_ts") if isinstance(event.get("thread_ts"), str) else None
        mentioned = (
            chat_type == "direct"
            or event.get("type") == "app_mention"
            or self._mentions_bot(event)
            or (thread_ts is not None and f"{channel}:{thread_ts}" in self.threads)
        )
        thread_id = thread_ts
        if thread_id is None and chat_type != "direct" and mentioned:
            thread_id = ts  # a top-level mention opens a thread: the reply goes there
        text = slack_to_text(str(event.get("text") or ""), bot_user_id=self.bot_user_id)
        text = _COMMAND.sub(lambda m: "/" + m.group(1).lower(), text)
        files = event.get("files") if event.get("subtype") == "file_share" else None
        attachments = await self._download_all(files, ts) if isinstance(files, list) else ()
        return InboundMessage(
            channel="slack",
            sender_id=str(event["user"]),
            chat_id=channel,
            chat_type=chat_type,
            text=text,
            message_id=ts,
            dedup_key=key,
            thread_id=thread_id,
            sender_name=await self._user_name(event.get("user")),
            mentioned=mentioned,
            attachments=attachments,
        )

    async def _chat_type(self, channel: str, channel_type: object) -> ChatType:
        kinds: dict[object, ChatType] = {
            "im": "direct",
            "mpim": "group",
            "group": "group",
            "channel": "channel",
        }
        if channel_type in kinds:
            self._chat_types[channel] = kinds[channel_type]
        if channel not in self._chat_types:
            # app_mention events carry no channel_type: ask once per channel.
            try:
                info = (await self.web.lookup("conversations_info", channel=channel)).get(
                    "channel", {}
                )
                if info.get("is_im"):
                    self._chat_types[channel] = "direct"
                elif info.get("is_mpim") or info.get("is_private"):
                    self._chat_types[channel] = "group"
                else:
                    self._chat_types[channel] = "channel"
            except ChannelError as e:
                log.info("Could not look up Slack conversation %s (%s)", channel, e)
                return "direct" if channel.startswith("D") else "channel"
        return self._chat_types[channel]

    async def _user_name(self, user: object) -> str | None:
        if not isinstance(user, str) or not user:
            return None
        if user not in self._user_names:
            try:
                found = (await self.web.lookup("users_info", user=user)).get("user", {})
            except ChannelError:
                return None  # a name is a nicety (the id is what matters); ask again next time
            profile = found.get("profile", {})
            name = profile.get("display_name") or found.get("real_name") or found.get("name")
            self._user_names[user] = str(name) if name else None
        return self._user_names[user]

    # -- files ---------------------------------------------------------------------------------

    async def _download_all(self, files: list[Any], ts: str) -> tuple[Attachment, ...]:
        assert self.config.bot_token is not None
        token = self.config.bot_token.get_secret_value()
        limits = DownloadLimits(
            self.config.max_download_mb,
            urlsplit(self.config.api_base_url).hostname or "slack.com",
            self.config.timeout_s,
        )
        session = self.web.http()
        return tuple(
            [
                await download_shared_file(
                    session,
                    await self._file_info(item),
                    token=token,
                    limits=limits,
                    inbox=self.inbox,
                    ts=ts,
                )
                for item in files[:10]
                if isinstance(item, dict)
            ]
        )

    async def _file_info(self, item: dict[str, Any]) -> dict[str, Any]:
        """The whole file object: Slack sends only a stub (`file_access: check_file_info`, no
        links) when an event carries many files or one shared from another workspace."""
        if item.get("url_private") or not item.get("id"):
            return item
        try:
            found = (await self.web.lookup("files_info", file=str(item["id"]))).get("file")
        except ChannelError as e:
            log.info("Could not look up Slack file %s (%s)", item.get("id"), e)
            return item
        return found if isinstance(found, dict) else item

    # -- outbound ------------------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> list[SentMessage]:
        # Split the Markdown, then convert: a piece the gateway already cut to
        # max_message_chars stays one message even if escaping makes it a little longer.
        chunks = [
            chunk
            for piece in split_markdown(message.text, self.max_message_chars)
            for chunk in split_mrkdwn(markdown_to_mrkdwn(piece), _HARD_LIMIT_CHARS)
        ]
        sent: list[SentMessage] = []
        for chunk in chunks:
            params: dict[str, Any] = {"channel": message.chat_id, "text": chunk, "mrkdwn": True}
            if message.thread_id:
                params["thread_ts"] = message.thread_id
            result = await self.web.call("chat_postMessage", **params)
            sent.append(
                SentMessage("slack", message.chat_id, str(result.get("ts")), message.thread_id)
            )
        if sent and message.thread_id:
            self.threads.add(message.chat_id, message.thread_id)
        return sent

    def split(self, text: str) -> list[str]:
        """Markdown pieces of at most `max_message_chars`, code fences closed and reopened."""
        return split_markdown(text, self.max_message_chars)

    async def edit(self, sent: SentMessage, text: str) -> list[SentMessage]:
        """Replace a message's text; text longer than `max_message_chars` (Markdown) fills this
        message and continues in new ones after it (all returned, `sent` first). The converted
        text may come out a little longer (escapes) and is still shown whole."""
        first, *rest = self.split(text) or [""]
        mrkdwn = markdown_to_mrkdwn(first)
        if len(mrkdwn) > _HARD_LIMIT_CHARS:  # can't happen at 3,900 source characters
            mrkdwn = split_mrkdwn(mrkdwn, _HARD_LIMIT_CHARS - 2)[0] + " …"
        if not mrkdwn.strip():
            return [sent]
        await self.web.call("chat_update", channel=sent.chat_id, ts=sent.message_id, text=mrkdwn)
        occupied = [sent]
        for piece in rest:
            more = OutboundMessage("slack", sent.chat_id, piece, sent.thread_id)
            occupied += await self.send(more)
        return occupied

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        """Nothing: Slack's Events API has no typing indicator for bots (only Assistant
        threads have `assistant.threads.setStatus`), and a placeholder post would be noise."""

    async def check(self) -> ChannelHealth:
        """auth.test, plus the connection state when running. Works without `start` (for
        `pinch doctor`), and then leaves nothing open."""
        if self.config.bot_token is None:
            return ChannelHealth(False, "no bot token: set PINCH_SLACK__BOT_TOKEN (xoxb-…)")
        running = self._handler is not None or self._events_runner is not None
        try:
            response = await self.web.client().auth_test()
        except SlackApiError as e:
            return ChannelHealth(False, advice_for(e, "auth.test"))
        except (TimeoutError, aiohttp.ClientError) as e:
            return ChannelHealth(False, f"Slack did not answer auth.test ({type(e).__name__})")
        finally:
            if not running:
                await self.stop()
        detail = f"connected as @{response.get('user')} in {response.get('team')}"
        granted = header_value(response.headers, "x-oauth-scopes")
        if granted is not None:
            have = {scope.strip() for scope in granted.split(",")}
            missing = [scope for scope in SCOPES if scope not in have]
            if missing:
                advice = "add them (see the README's manifest) and reinstall the app"
                needed = [scope for scope in missing if scope in ESSENTIAL_SCOPES]
                note = f"{detail}; missing scopes {', '.join(missing)}: {advice}"
                if needed:
                    return ChannelHealth(False, note)
                detail = note
        if self._events_runner is not None:
            where = f"{self.config.events_listen}:{self.config.events_port}"
            return ChannelHealth(True, f"{detail}; receiving events on {where}/slack/events")
        if self._handler is None:
            return ChannelHealth(True, detail)
        if await self._handler.client.is_connected():
            return ChannelHealth(True, f"{detail}; Socket Mode connected")
        return ChannelHealth(False, f"{detail}; Socket Mode disconnected, reconnecting")
