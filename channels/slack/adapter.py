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
  `state_dir/slack-threads.json`). `!new`, `!reset`, `!status`, `!context`, `!help` become
  `/new`… because Slack delivers no slash commands in threads.
- Writes are never retried after a timeout or a dropped connection (an ambiguous post must not
  appear twice); only a definite HTTP 429 is retried, after its `Retry-After`.
- `typing` is a no-op: Slack has no typing indicator for bots outside its Assistant threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
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

log = logging.getLogger("pinch.channels.slack")

_POST_SUBTYPES = {None, "file_share", "thread_broadcast"}  # subtypes that are someone's post
_COMMAND = re.compile(r"^!(new|reset|status|context|help)\b", re.IGNORECASE)
_MAX_RETRY_AFTER_S = 120
_LOOKUP_TIMEOUT_S = 5.0
# The bot scopes of the README's manifest; without the essential ones nothing arrives or leaves.
SCOPES = (
    "app_mentions:read",
    "chat:write",
    "im:history",
    "im:read",
    "channels:history",
    "channels:read",
    "groups:history",
    "groups:read",
    "mpim:history",
    "mpim:read",
    "files:read",
    "users:read",
)
_ESSENTIAL_SCOPES = {"app_mentions:read", "chat:write", "im:history"}
_HARD_LIMIT_CHARS = 39000  # Slack truncates a message's text at 40,000 characters
_THREADS_FILE = "slack-threads.json"
_ADVICE = {
    "invalid_auth": "Slack refused the token: check PINCH_SLACK__BOT_TOKEN (xoxb-…) and "
    "PINCH_SLACK__APP_TOKEN (xapp-…)",
    "not_authed": "no Slack token was sent: set PINCH_SLACK__BOT_TOKEN",
    "account_inactive": "the Slack app was uninstalled or its token revoked: reinstall the app "
    "and update PINCH_SLACK__BOT_TOKEN",
    "token_revoked": "the Slack token was revoked: reinstall the app and update the tokens",
    "not_allowed_token_type": "a Slack token of the wrong kind was given: the bot token starts "
    "with xoxb-, the app-level token with xapp-",
    "missing_scope": "the Slack app lacks a permission: add the scopes from the README's "
    "manifest and reinstall the app",
    "channel_not_found": "Slack can't find that conversation: invite the bot to the channel "
    "(/invite @pinch)",
    "not_in_channel": "the bot is not in that channel: invite it with /invite @pinch",
    "is_archived": "that Slack channel is archived",
    "ratelimited": "Slack is rate-limiting the bot; try again in a minute",
    "msg_too_long": "Slack refused a message as too long",
    "message_not_found": "the Slack message to edit no longer exists",
    "cant_update_message": "Slack won't let the bot edit that message",
}


class _DefiniteRateLimitRetry(AsyncRetryHandler):
    """Retry only an HTTP 429 (Slack did not act on the call), after exactly `Retry-After`."""

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        return response is not None and response.status_code == 429

    async def prepare_for_next_attempt_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        wait = 1.0
        headers = {k.lower(): v for k, v in (response.headers if response else {}).items()}
        with contextlib.suppress(IndexError, TypeError, ValueError):
            wait = float(headers["retry-after"][0])
        wait = min(max(wait, 0.0), _MAX_RETRY_AFTER_S)
        log.info(
            "Slack rate limit on %s: waiting %.0f s as asked", request.url.rsplit("/", 1)[-1], wait
        )
        await asyncio.sleep(wait)
        state.next_attempt_requested = True
        state.increment_current_attempt()


class _OneLine(logging.Filter):
    """SDK internals log tracebacks for expected network trouble; keep them to one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage()} ({type(exc).__name__})"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        return True


def _sdk_logger(name: str) -> logging.Logger:
    logger = logging.getLogger(f"pinch.channels.slack.{name}")
    if not any(isinstance(f, _OneLine) for f in logger.filters):
        logger.addFilter(_OneLine())
    return logger


class _AckFirstSocketModeHandler(AsyncSocketModeHandler):
    """Acknowledges every envelope before Bolt sees it, whatever Bolt then makes of it (an
    unhandled or failing event is still acked, so Slack doesn't redeliver it forever), and
    reconnects one at a time."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The SDK lets a forced reconnect (a `disconnect` envelope) skip its lock after waiting
        # 5 s; on a slow network two connects then overlap and the first new socket is left
        # open and unread — a leak that grows toward Slack's 10-connection cap.
        client = self.client
        reconnect = client.connect_to_new_endpoint
        one_at_a_time = asyncio.Lock()

        async def serialized(force: bool = False) -> None:
            asked_on = client.current_session
            async with one_at_a_time:
                if force and client.current_session is not asked_on and await client.is_connected():
                    return  # the session this was about has been replaced meanwhile
                await reconnect(force)

        self.client.connect_to_new_endpoint = serialized  # type: ignore[method-assign]

    async def handle(self, client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        try:
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
        except Exception as e:  # Slack redelivers an unacked envelope; de-dup absorbs it
            log.warning("Could not acknowledge a Slack envelope (%s); Slack will resend it", e)
        payload = req.payload
        event = payload.get("event") if isinstance(payload, dict) else None
        if req.type != "events_api" or not isinstance(event, dict) or "type" not in event:
            log.info("Ignored a Slack %r envelope without an event", req.type)
            return
        await run_async_bolt_app(self.app, req)


class JoinedThreads:
    """Threads the bot has posted in (so follow-ups there need no @mention), kept in a small
    JSON file so they survive a restart. Old entries expire; the file stays small."""

    def __init__(self, path: Path, *, keep: int = 5000, max_age_s: float = 90 * 86400) -> None:
        self.path = path
        self._keep = keep
        self._max_age_s = max_age_s
        self._joined: dict[str, float] = {}
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            self._joined = {str(k): float(v) for k, v in dict(raw).items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError) as e:
            log.warning(
                "Ignoring unreadable %s (%s); thread follow-ups will need a mention", path, e
            )

    def __contains__(self, key: object) -> bool:
        return key in self._joined

    def add(self, channel: str, thread_ts: str) -> None:
        key = f"{channel}:{thread_ts}"
        if key in self._joined:
            return
        now = time.time()
        self._joined[key] = now
        fresh = {k: t for k, t in self._joined.items() if now - t < self._max_age_s}
        self._joined = dict(sorted(fresh.items(), key=lambda kv: kv[1])[-self._keep :])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._joined), encoding="utf-8")
            tmp.replace(self.path)
        except OSError as e:
            log.warning("Could not save %s (%s)", self.path, e)


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
        self.threads = JoinedThreads(state_dir / _THREADS_FILE)
        self._seen: dict[str, float] = {}  # dedup key -> monotonic expiry
        self._lanes: dict[str, asyncio.Task[None]] = {}
        self._chat_types: dict[str, ChatType] = {}
        self._user_names: dict[str, str | None] = {}
        self._on_message: MessageHandler | None = None
        self._session: aiohttp.ClientSession | None = None
        self._web: AsyncWebClient | None = None
        self._lookup_web: AsyncWebClient | None = None
        self._handler: _AckFirstSocketModeHandler | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._events_runner: web.AppRunner | None = None
        self.bot_user_id = ""
        self.bot_id = ""
        self.team_id = ""

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
            auth = await self._call("auth_test")
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
        if self._session is not None:
            await self._session.close()
            self._session = None
            self._web = self._lookup_web = None

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
            session=self._http(),
            retry_handlers=[_DefiniteRateLimitRetry(max_retry_count=3)],
            logger=_sdk_logger("web"),
        )
        app = AsyncApp(
            client=bolt_client,
            authorize=authorize,
            logger=_sdk_logger("bolt"),
            process_before_response=True,  # our listener only queues; it is quick
            request_verification_enabled=self.config.mode == "events",
            signing_secret=secret.get_secret_value() if secret else "",
        )
        app.event("message")(self._on_event)
        app.event("app_mention")(self._on_event)
        app.event(re.compile(".*"))(self._on_other_event)
        return app

    async def _connect_socket(self, app: AsyncApp) -> None:
        assert self.config.app_token is not None
        # apps.connections.open is safe to retry (it only issues a URL).
        socket_web = AsyncWebClient(
            base_url=self.config.api_base_url,
            timeout=int(self.config.timeout_s) or 1,
            retry_handlers=[AsyncConnectionErrorRetryHandler(), _DefiniteRateLimitRetry(2)],
            logger=_sdk_logger("web"),
        )
        handler = _AckFirstSocketModeHandler(
            app,
            self.config.app_token.get_secret_value(),
            logger=_sdk_logger("socket"),
            web_client=socket_web,
            ping_interval=self.config.ping_interval_s,
        )
        self._handler = handler
        try:
            # Ask for the URL ourselves once: a bad app token is an error here, where the SDK
            # would retry it forever.
            handler.client.wss_uri = await handler.client.issue_new_wss_url()
        except SlackApiError as e:
            await handler.close_async()
            self._handler = None
            raise ChannelError(_advice(e, "opening the Socket Mode connection")) from e
        self._connecting = asyncio.create_task(handler.connect_async())
        done, _ = await asyncio.wait({self._connecting}, timeout=self.config.timeout_s)
        if not done:
            log.warning("Slack Socket Mode is slow to connect; still trying in the background")

    async def _serve_events(self, app: AsyncApp) -> None:
        signing = self.config.signing_secret
        secret = signing.get_secret_value() if signing else ""

        async def receive(request: web.Request) -> web.Response:
            # The signature is checked on the raw bytes before anything reads them as text
            # (Bolt checks it again on the decoded body it dispatches).
            raw = await request.read()
            if not _signed_by_slack(secret, raw, request.headers):
                return web.Response(status=401, text="invalid signature")
            try:
                body = raw.decode("utf-8")
            except UnicodeDecodeError:
                log.warning("Slack: refused a signed event whose body is not UTF-8 (HTTP 400)")
                return web.Response(status=400, text="body is not UTF-8")
            bolt_request = AsyncBoltRequest(
                body=body,
                query=request.query_string,
                headers=request.headers,  # type: ignore[arg-type]
            )
            return await to_aiohttp_response(await app.async_dispatch(bolt_request))

        web_app = web.Application()
        web_app.router.add_post("/slack/events", receive)
        runner = web.AppRunner(web_app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.config.events_listen, self.config.events_port)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            raise ChannelError(
                f"Can't listen for Slack events on {self.config.events_listen}:"
                f"{self.config.events_port} ({e.strerror}): choose another [slack] events_port"
            ) from e
        self._events_runner = runner

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
                info = (await self._lookup("conversations_info", channel=channel)).get(
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
                found = (await self._lookup("users_info", user=user)).get("user", {})
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
        session = self._http()
        return tuple(
            [
                await download_shared_file(
                    session, item, token=token, limits=limits, inbox=self.inbox, ts=ts
                )
                for item in files[:10]
                if isinstance(item, dict)
            ]
        )

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
            result = await self._call("chat_postMessage", **params)
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
        await self._call("chat_update", channel=sent.chat_id, ts=sent.message_id, text=mrkdwn)
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
            response = await self._client().auth_test()
        except SlackApiError as e:
            return ChannelHealth(False, _advice(e, "auth.test"))
        except (TimeoutError, aiohttp.ClientError) as e:
            return ChannelHealth(False, f"Slack did not answer auth.test ({type(e).__name__})")
        finally:
            if not running:
                await self.stop()
        detail = f"connected as @{response.get('user')} in {response.get('team')}"
        granted = _header(response.headers, "x-oauth-scopes")
        if granted is not None:
            have = {scope.strip() for scope in granted.split(",")}
            missing = [scope for scope in SCOPES if scope not in have]
            if missing:
                advice = "add them (see the README's manifest) and reinstall the app"
                needed = [scope for scope in missing if scope in _ESSENTIAL_SCOPES]
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

    # -- Web API -------------------------------------------------------------------------------

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=self.config.timeout_s)
            self._session = aiohttp.ClientSession(timeout=timeout)
            self._web = self._lookup_web = None  # they held the old session
        return self._session

    def _client(self) -> AsyncWebClient:
        session = self._http()
        if self._web is None:
            token = self.config.bot_token.get_secret_value() if self.config.bot_token else None
            self._web = AsyncWebClient(
                token=token,
                base_url=self.config.api_base_url,
                timeout=int(self.config.timeout_s) or 1,
                session=session,
                # Not the SDK default (which retries after a connection error): a post whose
                # answer was lost may have been made, and must not appear twice.
                retry_handlers=[_DefiniteRateLimitRetry(max_retry_count=3)],
                logger=_sdk_logger("web"),
            )
        return self._web

    async def _lookup(self, method: str, **params: Any) -> dict[str, Any]:
        """A read on the delivery path: bounded to a few seconds and never waiting out a rate
        limit, so a message is never held up for a nicety like the sender's name."""
        session = self._http()
        if self._lookup_web is None:
            token = self.config.bot_token.get_secret_value() if self.config.bot_token else None
            self._lookup_web = AsyncWebClient(
                token=token,
                base_url=self.config.api_base_url,
                session=session,
                retry_handlers=[],
                logger=_sdk_logger("web"),
            )
        try:
            call = getattr(self._lookup_web, method)(**params)
            response = await asyncio.wait_for(call, min(self.config.timeout_s, _LOOKUP_TIMEOUT_S))
        except SlackApiError as e:
            raise ChannelError(_advice(e, method.replace("_", "."))) from e
        except (TimeoutError, aiohttp.ClientError) as e:
            raise ChannelError(f"Slack did not answer {method} ({type(e).__name__})") from e
        return dict(response.data) if isinstance(response.data, dict) else {}

    async def _call(self, method: str, **params: Any) -> dict[str, Any]:
        """One Web API call; failures become ChannelError with advice, never a retry."""
        try:
            response = await getattr(self._client(), method)(**params)
        except SlackApiError as e:
            raise ChannelError(_advice(e, method.replace("_", "."))) from e
        except (TimeoutError, aiohttp.ClientError) as e:
            write = method.startswith("chat_")
            note = "; not retried, so nothing appears twice" if write else ""
            raise ChannelError(
                f"Slack did not answer {method.replace('_', '.')} ({type(e).__name__}){note} — "
                "check the network",
                # A connection never made can't have posted anything; any other loss might have.
                maybe_delivered=write and not isinstance(e, aiohttp.ClientConnectorError),
            ) from e
        return dict(response.data) if isinstance(response.data, dict) else {}


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return str(value[0] if isinstance(value, list) and value else value)
    return None


def _advice(error: SlackApiError, doing: str) -> str:
    code = str(error.response.get("error") or "") if error.response is not None else ""
    advice = _ADVICE.get(code)
    if advice:
        return f"{advice} ({doing}: {code})"
    return f"Slack refused {doing}: {code or error}"


def _signed_by_slack(secret: str, raw: bytes, headers: Mapping[str, str]) -> bool:
    """Slack's request signature (v0, HMAC-SHA256 of "v0:<timestamp>:<body>") over the raw
    body, with the timestamp within 5 minutes of now."""
    stamp = headers.get("X-Slack-Request-Timestamp", "")
    signature = headers.get("X-Slack-Signature", "")
    if not secret or not stamp.isdigit() or abs(time.time() - int(stamp)) > 300:
        return False
    base = b"v0:" + stamp.encode() + b":" + raw
    expected = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), signature.encode(errors="replace"))
