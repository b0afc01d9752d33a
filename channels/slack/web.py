"""The Slack Web API as the adapter uses it: the scopes it needs, a retry policy that never
repeats a write Slack may have acted on, quiet SDK loggers, and errors worded as advice."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient

from channels.base import ChannelError
from channels.channel_config import SlackConfig

log = logging.getLogger("pinch.channels.slack")

_MAX_RETRY_AFTER_S = 120
_LOOKUP_TIMEOUT_S = 5.0
_CONNECT_ATTEMPTS = 4  # a call whose connection was never made: tried this often in all


class _NeverConnected(Exception):
    """A call failed before a connection was made: safe to try again (`error` if not)."""

    def __init__(self, error: ChannelError) -> None:
        super().__init__(str(error))
        self.error = error


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
ESSENTIAL_SCOPES = {"app_mentions:read", "chat:write", "im:history"}

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


class DefiniteRateLimitRetry(AsyncRetryHandler):
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


def sdk_logger(name: str) -> logging.Logger:
    logger = logging.getLogger(f"pinch.channels.slack.{name}")
    if not any(isinstance(f, _OneLine) for f in logger.filters):
        logger.addFilter(_OneLine())
    return logger


def header_value(headers: Mapping[str, Any], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return str(value[0] if isinstance(value, list) and value else value)
    return None


def advice_for(error: SlackApiError, doing: str) -> str:
    code = str(error.response.get("error") or "") if error.response is not None else ""
    advice = _ADVICE.get(code)
    if advice:
        return f"{advice} ({doing}: {code})"
    return f"Slack refused {doing}: {code or error}"


class SlackWebApi:
    """The bot's Web API clients over one HTTP session (opened on first use, reopened after
    `close`): `call` for the adapter's own calls (a write is never retried after a timeout or a
    lost connection, only after a definite 429), `lookup` for reads on the delivery path
    (bounded to a few seconds, never waiting out a rate limit)."""

    def __init__(self, config: SlackConfig) -> None:
        self._config = config
        self.session: aiohttp.ClientSession | None = None
        self._web: AsyncWebClient | None = None
        self._lookup_web: AsyncWebClient | None = None

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None
            self._web = self._lookup_web = None

    def http(self) -> aiohttp.ClientSession:
        if self.session is None or self.session.closed:
            timeout = aiohttp.ClientTimeout(total=self._config.timeout_s)
            self.session = aiohttp.ClientSession(timeout=timeout)
            self._web = self._lookup_web = None  # they held the old session
        return self.session

    def client(self) -> AsyncWebClient:
        session = self.http()
        if self._web is None:
            token = self._config.bot_token.get_secret_value() if self._config.bot_token else None
            self._web = AsyncWebClient(
                token=token,
                base_url=self._config.api_base_url,
                timeout=int(self._config.timeout_s) or 1,
                session=session,
                # Not the SDK default (which retries after a connection error): a post whose
                # answer was lost may have been made, and must not appear twice.
                retry_handlers=[DefiniteRateLimitRetry(max_retry_count=3)],
                logger=sdk_logger("web"),
            )
        return self._web

    async def lookup(self, method: str, **params: Any) -> dict[str, Any]:
        """A read on the delivery path: bounded to a few seconds and never waiting out a rate
        limit, so a message is never held up for a nicety like the sender's name."""
        session = self.http()
        if self._lookup_web is None:
            token = self._config.bot_token.get_secret_value() if self._config.bot_token else None
            self._lookup_web = AsyncWebClient(
                token=token,
                base_url=self._config.api_base_url,
                session=session,
                retry_handlers=[],
                logger=sdk_logger("web"),
            )
        try:
            call = getattr(self._lookup_web, method)(**params)
            response = await asyncio.wait_for(call, min(self._config.timeout_s, _LOOKUP_TIMEOUT_S))
        except SlackApiError as e:
            raise ChannelError(advice_for(e, method.replace("_", "."))) from e
        except (TimeoutError, aiohttp.ClientError) as e:
            raise ChannelError(f"Slack did not answer {method} ({type(e).__name__})") from e
        return dict(response.data) if isinstance(response.data, dict) else {}

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One Web API call; failures become ChannelError with advice. Only a connection never
        made (nothing can have been posted) is tried again, backing off 1, 2, 4 s."""
        for attempt in range(_CONNECT_ATTEMPTS):
            try:
                return await self._call_once(method, **params)
            except _NeverConnected as never:
                if attempt == _CONNECT_ATTEMPTS - 1:
                    raise never.error from never.__cause__
                await asyncio.sleep(2**attempt)
        raise AssertionError("unreachable")

    async def _call_once(self, method: str, **params: Any) -> dict[str, Any]:
        try:
            response = await getattr(self.client(), method)(**params)
        except SlackApiError as e:
            raise ChannelError(advice_for(e, method.replace("_", "."))) from e
        except (TimeoutError, aiohttp.ClientError) as e:
            write = method.startswith("chat_")
            never = isinstance(e, aiohttp.ClientConnectorError)
            note = "; not retried, so nothing appears twice" if write and not never else ""
            error = ChannelError(
                f"Slack did not answer {method.replace('_', '.')} ({type(e).__name__}){note} — "
                "check the network",
                # A connection never made can't have posted anything; any other loss might have.
                maybe_delivered=write and not never,
            )
            if never:
                raise _NeverConnected(error) from e
            raise error from e
        return dict(response.data) if isinstance(response.data, dict) else {}
