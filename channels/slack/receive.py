"""How Slack events reach the adapter: Socket Mode (acknowledged before anything else) or the
Events API over HTTP (the signature checked on the raw body first). Both hand events to a Bolt
`AsyncApp`, whose listeners are the adapter's."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from channels.base import ChannelError
from channels.channel_config import SlackConfig
from channels.slack.web import DefiniteRateLimitRetry, advice_for, sdk_logger

log = logging.getLogger("pinch.channels.slack")


class AckFirstSocketModeHandler(AsyncSocketModeHandler):
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


def signed_by_slack(secret: str, raw: bytes, headers: Mapping[str, str]) -> bool:
    """Slack's request signature (v0, HMAC-SHA256 of "v0:<timestamp>:<body>") over the raw
    body, with the timestamp within 5 minutes of now."""
    stamp = headers.get("X-Slack-Request-Timestamp", "")
    signature = headers.get("X-Slack-Signature", "")
    # (isascii: "²" and "١" are digits to str.isdigit, and int() refuses the first)
    if (
        not secret
        or not (stamp.isascii() and stamp.isdigit())
        or abs(time.time() - int(stamp)) > 300
    ):
        return False
    base = b"v0:" + stamp.encode() + b":" + raw
    expected = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), signature.encode(errors="replace"))


async def open_socket_mode(app: AsyncApp, config: SlackConfig) -> AckFirstSocketModeHandler:
    """A Socket Mode handler for `app` with its first connection URL issued (a bad app token
    fails here as `ChannelError` with advice, where the SDK would retry it forever); the caller
    starts `connect_async()` and closes it."""
    assert config.app_token is not None
    # apps.connections.open is safe to retry (it only issues a URL).
    socket_web = AsyncWebClient(
        base_url=config.api_base_url,
        timeout=int(config.timeout_s) or 1,
        retry_handlers=[AsyncConnectionErrorRetryHandler(), DefiniteRateLimitRetry(2)],
        logger=sdk_logger("web"),
    )
    handler = AckFirstSocketModeHandler(
        app,
        config.app_token.get_secret_value(),
        logger=sdk_logger("socket"),
        web_client=socket_web,
        ping_interval=config.ping_interval_s,
    )
    try:
        handler.client.wss_uri = await handler.client.issue_new_wss_url()
    except BaseException as e:
        await handler.close_async()
        if isinstance(e, SlackApiError):
            raise ChannelError(advice_for(e, "opening the Socket Mode connection")) from e
        raise
    return handler


async def serve_events(app: AsyncApp, config: SlackConfig) -> web.AppRunner:
    """Listen for Events API POSTs on `config.events_listen:events_port` at /slack/events;
    returns the running server (the caller cleans it up). A port in use is a `ChannelError`."""
    signing = config.signing_secret
    secret = signing.get_secret_value() if signing else ""

    async def receive(request: web.Request) -> web.Response:
        # The signature is checked on the raw bytes before anything reads them as text
        # (Bolt checks it again on the decoded body it dispatches).
        raw = await request.read()
        if not signed_by_slack(secret, raw, request.headers):
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
    site = web.TCPSite(runner, config.events_listen, config.events_port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise ChannelError(
            f"Can't listen for Slack events on {config.events_listen}:"
            f"{config.events_port} ({e.strerror}): choose another [slack] events_port"
        ) from e
    return runner
