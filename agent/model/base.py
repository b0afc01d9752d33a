"""The common ground of the model clients: the `ModelClient` protocol, retries with
back-off, and how transport errors are recognised."""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from agent.model.errors import (
    AuthenticationFailedError,
    BadResponseError,
    ContextTooLongError,
    ModelConnectTimeoutError,
    ModelError,
    ModelTimeoutError,
    RateLimitedError,
    RequestRefusedError,
    ServerError,
    ServerUnreachableError,
    UnknownModelError,
    quote,
    server_host,
)
from agent.types import ModelRequest, ModelResponse, Usage

log = logging.getLogger(__name__)


DEFAULT_MODEL = "claude-sonnet-5-5"
ANTHROPIC_URL = "https://api.anthropic.com"
OLLAMA_URL = "http://localhost:11434"

# Retries back off 0.5 s, 1 s, 2 s … (at most 8 s), or wait as long as the server's retry-after
# asks, unless that is longer than MAX_RETRY_WAIT_S: then the error goes to the caller (or the
# next model) at once rather than leaving the owner staring at a silent chat.
INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
MAX_RETRY_WAIT_S = 30.0
# A connection that failed before the request left (a connect or pool timeout) or before any
# answer came (reset, closed) — an overloaded server, a burst — is tried at least this many
# times more (whatever max_retries says, backing off 0.5 … 8 s: ≈ 15 s of waits), within the
# call's timeout_s. A refused connection (nothing listens) or a host name not found is not: it
# gets max_retries, so a stopped server or a mistyped api_base is reported at once.
CONNECT_RETRIES = 5

TextCallback = Callable[[str], None]


class StreamRelay:
    """Passes text deltas on to `on_text`, keeps them (the partial answer, should the stream break
    off) and remembers whether any reached someone who shows them: once the owner has seen
    text, a retry or a fallback model would repeat it."""

    def __init__(self, on_text: TextCallback | None) -> None:
        self.on_text = on_text
        self.parts: list[str] = []
        self.callback_error: BaseException | None = None  # raised by `on_text` itself
        # A relay handing text to a relay that shows nothing shows nothing either.
        self.shows = on_text is not None and getattr(on_text, "shows", True)

    @property
    def streamed(self) -> bool:
        return self.shows and bool(self.parts)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def __call__(self, text: str) -> None:
        self.parts.append(text)
        if self.on_text is not None:
            try:
                self.on_text(text)
            except BaseException as exc:
                self.callback_error = exc
                raise


class ModelClient(Protocol):
    async def complete(
        self, request: ModelRequest, on_text: TextCallback | None = None
    ) -> ModelResponse:
        """Run one model call, passing each text delta to `on_text` as it streams in.

        Raises `ModelError` (see model_errors.py); cancelling the task cancels the call and
        closes its connection. When the answer breaks off after text reached `on_text`, returns
        what arrived with `cut_off` set (the owner has seen it; asking again would repeat it).
        """
        ...


class IncompleteStreamError(Exception):
    """The stream ended without the provider's end-of-message marker."""


class UnreadableResponseError(Exception):
    """A 200 answer without a single event of the API (a web page, an empty body, …)."""


class RetryingClient:
    """Shared by both provider clients: key check, retries with backoff, error translation."""

    def __init__(self, model: str, *, url: str, timeout_s: float, max_retries: int) -> None:
        self.model = model
        self.url = url
        # Where `url` was set, for advice; None: api_base in config.toml (or its variable).
        self.url_from: str | None = None
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.connect_timeout_s = timeout_s  # a client with a shorter one says so

    async def complete(
        self, request: ModelRequest, on_text: TextCallback | None = None
    ) -> ModelResponse:
        """The whole call — every attempt, the waits between them, connecting and streaming —
        ends within `timeout_s` (ModelTimeoutError). An answer that breaks off after its first
        words reached `on_text` is returned marked `cut_off`, never retried."""
        self._check_key()
        await self._prepare()  # importing an SDK takes seconds: not counted against timeout_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        attempts = 0
        while True:
            attempts += 1
            relay = StreamRelay(on_text)
            try:
                async with asyncio.timeout_at(deadline):
                    return await self._attempt(request, relay)
            except Exception as exc:
                if relay.callback_error is not None:
                    raise  # the caller's own callback failed: not the model's doing
                error = self._translate(exc, attempts)
                if relay.streamed:
                    # After text has reached the owner, a second attempt would repeat it.
                    return self._cut_off(relay, error)
                delay = self._retry_delay(error, exc, attempts)
                if delay is None or loop.time() + delay >= deadline:
                    raise error from exc
                log.info("%s; retrying in %.1f s", error, delay)
                await asyncio.sleep(delay)

    def _cut_off(self, relay: StreamRelay, error: ModelError) -> ModelResponse:
        if isinstance(error, ModelTimeoutError):
            reason = f"it took longer than timeout_s = {self.timeout_s:g} s"
        elif isinstance(error, BadResponseError):
            reason = "the model's server sent something unreadable"
        elif isinstance(error, ServerError) and not error.broken_stream:
            reason = "the model's server reported an error"
        else:
            reason = "the connection to the model ended early"
        log.info("An answer of %s was cut off: %s", self.model, error)
        return ModelResponse(relay.text, (), "other", Usage(), self.model, cut_off=reason)

    async def _prepare(self) -> None:
        """Import what `_attempt` needs (before the deadline starts)."""

    async def check_key(self) -> None:
        """Raise `MissingKeyError` if the provider needs a key that is not set (no network
        call): for a caller that must know before it starts work that needs the model."""
        self._check_key()

    def _check_key(self) -> None:
        """Raise `MissingKeyError` if the provider needs a key that is not set."""

    async def _attempt(self, request: ModelRequest, on_text: TextCallback) -> ModelResponse:
        raise NotImplementedError

    def _http_failure(self, exc: Exception) -> tuple[int, str, Mapping[str, str]] | None:
        """(status, the server's message, response headers) when `exc` is an HTTP error reply."""
        raise NotImplementedError

    def _key_source(self) -> str:
        raise NotImplementedError

    def _secrets(self) -> list[str | None]:
        return []

    def _translate(self, exc: Exception, attempts: int) -> ModelError:
        """The `ModelError` for what the call raised. Anything not recognised as a transport or
        HTTP failure happened while reading the answer, so it is reported as an unreadable one
        (with the details in the debug log)."""
        model, url = self.model, self.url
        chain = list(_exception_chain(exc))
        if any(_is_timeout(e) for e in chain):
            if not isinstance(exc, TimeoutError) and any(_is_connect_timeout(e) for e in chain):
                return ModelConnectTimeoutError(
                    model=model,
                    host=server_host(url),
                    connect_s=self.connect_timeout_s,
                    attempts=attempts,
                )
            return ModelTimeoutError(model=model, url=url, timeout_s=self.timeout_s)
        if self._no_response(exc):  # the connection failed before any answer: not the stream
            return self._unreachable(chain)
        if isinstance(exc, IncompleteStreamError) or any(_is_broken_stream(e) for e in chain):
            return ServerError(
                model=model, url=url, attempts=attempts, what="the stream broke off", broken=True
            )
        if any(_is_connection_error(e) for e in chain):
            return self._unreachable(chain)
        failure = self._http_failure(exc)
        if failure is None:
            log.debug("Unreadable answer from %s", url, exc_info=True)
            if any(isinstance(e, json.JSONDecodeError) for e in chain):
                what = "its content is not valid JSON"
            else:
                what = self._unreadable(exc)
            return BadResponseError(model=model, url=url, what=what, url_from=self.url_from)
        status, detail, headers = failure
        detail = quote(detail, self._secrets())
        if status in (401, 403):
            return AuthenticationFailedError(
                model=model, url=url, status=status, key_source=self._key_source()
            )
        if status == 404:
            return UnknownModelError(model=model, url=url)
        if status == 429:
            retry_after = _retry_after(headers)
            return RateLimitedError(
                model=model, url=url, attempts=attempts, retry_after=retry_after
            )
        if status in (408, 409) or status >= 500:
            return ServerError(model=model, url=url, attempts=attempts, what=f"{status} {detail}")
        if status == 413 or _is_context_overflow(exc, detail):  # 413: the request is too large
            return ContextTooLongError(model=model, url=url, status=status, detail=detail)
        return RequestRefusedError(model=model, url=url, status=status, detail=detail)

    def _unreachable(self, chain: list[BaseException]) -> ServerUnreachableError:
        if any(isinstance(e, ConnectionRefusedError) for e in chain):
            reason = "connection refused"
        elif any(isinstance(e, socket.gaierror) for e in chain):
            reason = "host name not found"
        elif any(isinstance(e, ConnectionResetError) or _is_broken_stream(e) for e in chain):
            reason = "connection reset before any answer"
        else:
            reason = "connection failed"
        return ServerUnreachableError(
            model=self.model, url=self.url, reason=reason, url_from=self.url_from
        )

    def _no_response(self, exc: Exception) -> bool:
        """Whether `exc` says the connection failed before any answer came (a client library
        that tells this apart from a stream broken mid-answer overrides it)."""
        return False

    def _unreadable(self, exc: Exception) -> str:
        if isinstance(exc, UnreadableResponseError):
            return str(exc)
        root = list(_exception_chain(exc))[-1]  # litellm wraps the parser's error twice over
        return f"the client library could not read it: {type(root).__name__}"

    def _retry_delay(self, error: ModelError, exc: Exception, attempts: int) -> float | None:
        """Seconds to wait before the next attempt, or None to give up now."""
        # Timeouts are not retried here: each already cost timeout_s of silence — except a
        # connect timeout: the request never left.
        retryable = (
            RateLimitedError,
            ServerError,
            ServerUnreachableError,
            ModelConnectTimeoutError,
        )
        if not isinstance(error, retryable):
            return None
        allowed = self.max_retries
        if _connection_failure(error):
            allowed = max(allowed, CONNECT_RETRIES)
        if attempts > allowed:
            return None
        failure = self._http_failure(exc)
        asked = _retry_after(failure[2]) if failure else None
        if asked is not None:
            return asked if asked <= MAX_RETRY_WAIT_S else None
        backoff = min(INITIAL_BACKOFF_S * 2 ** (attempts - 1), MAX_BACKOFF_S)
        return backoff * (1 - 0.25 * random.random())


_TIMEOUT_NAMES = {
    "TimeoutException",
    "ConnectTimeout",
    "ReadTimeout",
    "WriteTimeout",
    "PoolTimeout",
    "APITimeoutError",
    "Timeout",
}
_CONNECT_TIMEOUT_NAMES = ("ConnectTimeout", "PoolTimeout")
_CONNECTION_NAMES = {"ConnectError", "APIConnectionError", "ClientConnectorError"}
_BROKEN_STREAM_NAMES = {"RemoteProtocolError", "ReadError", "ClientPayloadError"}


def _connection_failure(error: ModelError) -> bool:
    """A transient failure of the connection itself (see CONNECT_RETRIES)."""
    if isinstance(error, ServerUnreachableError):
        return not error.refused
    return isinstance(error, ModelConnectTimeoutError)


def _is_connect_timeout(exc: BaseException) -> bool:
    """Waiting for a connection (to open, or a free one from the pool) timed out: httpx's
    ConnectTimeout / PoolTimeout, named in the text by libraries that wrap them (litellm)."""
    if type(exc).__name__ in _CONNECT_TIMEOUT_NAMES:
        return True
    text = str(exc)
    return any(name in text for name in _CONNECT_TIMEOUT_NAMES)


def _exception_chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError) or type(exc).__name__ in _TIMEOUT_NAMES


def _is_connection_error(exc: BaseException) -> bool:
    return isinstance(exc, ConnectionError) or type(exc).__name__ in _CONNECTION_NAMES


def _is_broken_stream(exc: BaseException) -> bool:
    return type(exc).__name__ in _BROKEN_STREAM_NAMES


def _is_context_overflow(exc: Exception, detail: str) -> bool:
    if type(exc).__name__ == "ContextWindowExceededError":
        return True
    lowered = detail.lower()
    return any(
        phrase in lowered
        for phrase in ("prompt is too long", "context length", "context size", "context window")
    )


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asked to wait (`retry-after-ms`, or `retry-after` in seconds or as an
    HTTP date), or None."""
    if not headers:
        return None
    try:
        return max(0.0, float(headers["retry-after-ms"]) / 1000)
    except (KeyError, TypeError, ValueError):
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
