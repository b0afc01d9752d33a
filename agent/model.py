"""Model clients behind one small interface, `ModelClient`.

- `AnthropicClient`: Claude through the official `anthropic` SDK, with prompt-cache markers.
- `LiteLLMClient`: every other provider (Ollama, OpenAI, OpenAI-compatible servers, …) via litellm.
- `FallbackClient`: tries models in order when one is down, rate-limited or unreachable.
- `create_model_client`: picks among them from the configured model names.

All of them stream: `on_text` receives each text delta as it arrives, and `complete` returns the
whole response at the end. Failures surface as `ModelError`s worded as advice (model_errors.py).
Both SDKs are imported on first use, in a worker thread: they take seconds to import.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib
import json
import logging
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from agent.model_errors import (
    AuthenticationFailedError,
    ContextTooLongError,
    MissingKeyError,
    ModelError,
    ModelTimeoutError,
    RateLimitedError,
    RequestRefusedError,
    ServerError,
    ServerUnreachableError,
    UnknownModelError,
    redact,
)
from agent.types import (
    Message,
    ModelRequest,
    ModelResponse,
    StopReason,
    TextBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)

if TYPE_CHECKING:
    import anthropic

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

TextCallback = Callable[[str], None]


class ModelClient(Protocol):
    async def complete(
        self, request: ModelRequest, on_text: TextCallback | None = None
    ) -> ModelResponse:
        """Run one model call, passing each text delta to `on_text` as it streams in.

        Raises `ModelError` (see model_errors.py); cancelling the task cancels the call and
        closes its connection.
        """
        ...


class _IncompleteStreamError(Exception):
    """The stream ended without the provider's end-of-message marker."""


class _RetryingClient:
    """Shared by both provider clients: key check, retries with backoff, error translation."""

    def __init__(self, model: str, *, url: str, timeout_s: float, max_retries: int) -> None:
        self.model = model
        self.url = url
        self.timeout_s = timeout_s
        self.max_retries = max_retries

    async def complete(
        self, request: ModelRequest, on_text: TextCallback | None = None
    ) -> ModelResponse:
        self._check_key()
        attempts = 0
        while True:
            attempts += 1
            streamed = False

            def relay(text: str) -> None:
                nonlocal streamed
                streamed = True
                if on_text is not None:
                    on_text(text)

            try:
                return await self._attempt(request, relay)
            except Exception as exc:
                error = self._translate(exc, attempts)
                if error is None:
                    raise
                # After text has reached the caller, a second attempt would repeat it.
                delay = None if streamed else self._retry_delay(error, exc, attempts)
                if delay is None:
                    raise error from exc
                log.warning("%s; retrying in %.1f s", error, delay)
                await asyncio.sleep(delay)

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

    def _translate(self, exc: Exception, attempts: int) -> ModelError | None:
        """The `ModelError` for a library exception; None when `exc` is a bug, not a failure."""
        model, url = self.model, self.url
        chain = list(_exception_chain(exc))
        if any(_is_timeout(e) for e in chain):
            return ModelTimeoutError(model=model, url=url, timeout_s=self.timeout_s)
        if isinstance(exc, _IncompleteStreamError) or any(_is_broken_stream(e) for e in chain):
            return ServerError(model=model, url=url, attempts=attempts, what="the stream broke off")
        if any(_is_connection_error(e) for e in chain):
            refused = any(isinstance(e, ConnectionRefusedError) for e in chain)
            reason = "connection refused" if refused else "connection failed"
            return ServerUnreachableError(model=model, url=url, reason=reason)
        failure = self._http_failure(exc)
        if failure is None:
            return None
        status, detail, headers = failure
        detail = redact(detail, self._secrets())
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
        if _is_context_overflow(exc, detail):
            return ContextTooLongError(model=model, url=url, status=status, detail=detail)
        return RequestRefusedError(model=model, url=url, status=status, detail=detail)

    def _retry_delay(self, error: ModelError, exc: Exception, attempts: int) -> float | None:
        """Seconds to wait before the next attempt, or None to give up now."""
        # Timeouts are not retried here: each already cost timeout_s of silence.
        retryable = (RateLimitedError, ServerError, ServerUnreachableError)
        if attempts > self.max_retries or not isinstance(error, retryable):
            return None
        failure = self._http_failure(exc)
        asked = _retry_after(failure[2]) if failure else None
        if asked is not None:
            return asked if asked <= MAX_RETRY_WAIT_S else None
        backoff = min(INITIAL_BACKOFF_S * 2 ** (attempts - 1), MAX_BACKOFF_S)
        return backoff * (1 - 0.25 * random.random())


# -- Anthropic ---------------------------------------------------------------------------------

_ANTHROPIC_ERROR_STATUS = {  # an error event inside a stream carries a type, not a status
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
_ANTHROPIC_STOP_REASONS: dict[str | None, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    "model_context_window_exceeded": "max_tokens",
}
_EPHEMERAL = {"type": "ephemeral"}


class AnthropicClient(_RetryingClient):
    """Claude through the official SDK. The key comes from `api_key`, else `ANTHROPIC_API_KEY`
    (or `ANTHROPIC_AUTH_TOKEN`); `model` may be written `claude-…` or `anthropic/claude-…`."""

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_URL
        super().__init__(model, url=url.rstrip("/"), timeout_s=timeout_s, max_retries=max_retries)
        self._api_model = model.removeprefix("anthropic/")
        self._api_key = api_key
        self._auth_token: str | None = None
        if api_key is None:
            self._api_key = os.environ.get("ANTHROPIC_API_KEY") or None
            if self._api_key is None:
                self._auth_token = os.environ.get("ANTHROPIC_AUTH_TOKEN") or None
        self._key_from = "api_key" if api_key else "ANTHROPIC_API_KEY"
        self._sdk: anthropic.AsyncAnthropic | None = None
        self._sdk_loop: asyncio.AbstractEventLoop | None = None

    async def aclose(self) -> None:
        if self._sdk is not None:
            await self._sdk.close()
            self._sdk = None

    def _check_key(self) -> None:
        if self._api_key is None and self._auth_token is None:
            raise MissingKeyError(["ANTHROPIC_API_KEY"], model=self.model)

    async def _client(self) -> anthropic.AsyncAnthropic:
        loop = asyncio.get_running_loop()
        if self._sdk is None or self._sdk_loop is not loop:
            # Pooled connections belong to the loop that opened them: a second asyncio.run()
            # (a CLI command, a test) needs a client of its own.
            self._sdk_loop = loop
            sdk = await asyncio.to_thread(importlib.import_module, "anthropic")
            timeout = sdk.Timeout(self.timeout_s, connect=min(self.timeout_s, 10.0))
            self._sdk = sdk.AsyncAnthropic(
                api_key=self._api_key,
                auth_token=None if self._api_key else self._auth_token,
                base_url=self.url,
                timeout=timeout,
                max_retries=0,  # retried in _RetryingClient, the same way for every provider
            )
        return self._sdk

    async def _attempt(self, request: ModelRequest, on_text: TextCallback) -> ModelResponse:
        client = await self._client()
        params = anthropic_params(request, self._api_model)
        async with client.messages.stream(**params) as stream:
            async for event in stream:
                if event.type == "text":
                    on_text(event.text)
            final = await stream.get_final_message()
        if final.stop_reason is None:
            raise _IncompleteStreamError
        usage = final.usage
        return ModelResponse(
            text="".join(b.text for b in final.content if b.type == "text"),
            tool_calls=tuple(
                ToolCall(b.id, b.name, dict(b.input)) for b in final.content if b.type == "tool_use"
            ),
            stop_reason=_ANTHROPIC_STOP_REASONS.get(final.stop_reason, "other"),
            usage=Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_input_tokens or 0,
                cache_write_tokens=usage.cache_creation_input_tokens or 0,
            ),
            model=self.model,
        )

    def _http_failure(self, exc: Exception) -> tuple[int, str, Mapping[str, str]] | None:
        import anthropic

        if not isinstance(exc, anthropic.APIStatusError):
            return None
        status = exc.status_code
        if status < 400:  # an error event mid-stream, after a 200
            status = _ANTHROPIC_ERROR_STATUS.get(str(exc.type), 500)
        return status, exc.api_message or exc.message, exc.response.headers

    def _key_source(self) -> str:
        return self._key_from if self._api_key else "ANTHROPIC_AUTH_TOKEN"

    def _secrets(self) -> list[str | None]:
        return [self._api_key, self._auth_token]


def anthropic_params(request: ModelRequest, model: str) -> dict[str, Any]:
    """The Messages API arguments for `request`, with cache markers when `cache_prefix` is set.

    Markers go on the last tool, the last system block, and the last block before the newest
    user message: the next turn repeats all of that unchanged, so it is read from the cache.
    """
    system = [request.system] if isinstance(request.system, str) else list(request.system)
    system_blocks: list[dict[str, Any]] = [{"type": "text", "text": s} for s in system if s]
    tools = [_anthropic_tool(t) for t in request.tools]
    messages: list[dict[str, Any]] = [
        {"role": m.role, "content": blocks}
        for m in request.messages
        if (blocks := [_anthropic_block(b) for b in m.content if _has_content(b)])
    ]
    if request.cache_prefix:
        for blocks in (system_blocks, tools):
            if blocks:
                blocks[-1]["cache_control"] = dict(_EPHEMERAL)
        newest_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=0)
        if newest_user > 0:
            messages[newest_user - 1]["content"][-1]["cache_control"] = dict(_EPHEMERAL)
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens,
        "messages": messages,
    }
    if system_blocks:
        params["system"] = system_blocks
    if tools:
        params["tools"] = tools
    return params


def _has_content(block: TextBlock | ToolCall | ToolResult) -> bool:
    return not isinstance(block, TextBlock) or bool(block.text)  # the API refuses empty text


def _anthropic_tool(tool: ToolSpec) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}


def _anthropic_block(block: TextBlock | ToolCall | ToolResult) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ToolCall):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)}
    return {
        "type": "tool_result",
        "tool_use_id": block.tool_use_id,
        "content": block.content,
        "is_error": block.is_error,
    }


# -- litellm -----------------------------------------------------------------------------------

_OPENAI_STOP_REASONS: dict[str | None, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def _import_litellm() -> Any:
    # Without these, importing litellm fetches its model price list from GitHub.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
    litellm: Any = importlib.import_module("litellm")
    litellm.suppress_debug_info = True  # else every error prints a "Give Feedback" banner
    return litellm


async def _litellm() -> Any:
    """The litellm module, imported off the event loop the first time (it takes seconds)."""
    import sys

    module = sys.modules.get("litellm")
    if module is not None and getattr(module, "suppress_debug_info", False):
        return module
    return await asyncio.to_thread(_import_litellm)


class LiteLLMClient(_RetryingClient):
    """Any provider litellm knows, named the litellm way: `ollama/llama3.2`, `openai/gpt-4o`,
    `openai/<name>` with `api_base` for an OpenAI-compatible server, `gemini/…`, … Keys come from
    the provider's usual environment variable (`OPENAI_API_KEY`, …) unless `api_key` is given."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        provider = model.split("/", 1)[0] if "/" in model else "openai"
        url = api_base or (
            os.environ.get("OLLAMA_API_BASE", OLLAMA_URL)
            if provider in ("ollama", "ollama_chat")
            else f"the {provider} API"
        )
        super().__init__(model, url=url, timeout_s=timeout_s, max_retries=max_retries)
        self.api_base = api_base
        self._provider = provider
        # litellm's "ollama/" speaks /api/generate, which has no tools (and drop_params would
        # drop them without a word); "ollama_chat/" speaks /api/chat, which has.
        self._litellm_model = (
            "ollama_chat/" + model.removeprefix("ollama/") if provider == "ollama" else model
        )
        self._api_key = api_key

    def _missing_keys(self, litellm: Any) -> list[str]:
        if self._api_key or self.api_base:
            return []  # a self-hosted server may need no key; it will say so if it does
        try:
            found = litellm.validate_environment(model=self._litellm_model)
        except Exception:  # an unknown provider: let the call itself explain
            return []
        missing = found.get("missing_keys") or []
        return [k for k in missing if "API_BASE" not in k and "BASE_URL" not in k]

    async def complete(
        self, request: ModelRequest, on_text: TextCallback | None = None
    ) -> ModelResponse:
        missing = self._missing_keys(await _litellm())
        if missing:
            raise MissingKeyError(missing, model=self.model)
        return await super().complete(request, on_text)

    async def _attempt(self, request: ModelRequest, on_text: TextCallback) -> ModelResponse:
        litellm = await _litellm()
        api_key = self._api_key
        if api_key is None and self.api_base and self._provider == "openai":
            # The OpenAI SDK refuses to send without a key; local servers ignore it.
            api_key = os.environ.get("OPENAI_API_KEY") or "no-key"
        tools = [_openai_tool(t) for t in request.tools]
        stream = await litellm.acompletion(
            model=self._litellm_model,
            messages=openai_messages(request),
            tools=tools or None,
            max_tokens=request.max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            timeout=self.timeout_s,
            api_base=self.api_base,
            api_key=api_key,
            num_retries=0,  # retried in _RetryingClient, the same way for every provider
            max_retries=0,
            drop_params=True,  # a provider without e.g. stream_options gets the call without it
        )
        collected = _OpenAIStream()
        try:
            async for chunk in stream:
                collected.add(chunk, on_text)
        finally:
            await stream.aclose()
        return collected.response(self.model)

    def _http_failure(self, exc: Exception) -> tuple[int, str, Mapping[str, str]] | None:
        status = getattr(exc, "status_code", None)
        if not isinstance(status, int) or status < 400:
            return None
        headers = getattr(exc, "litellm_response_headers", None)
        if headers is None:
            response = getattr(exc, "response", None)
            headers = getattr(response, "headers", None)
        detail = str(getattr(exc, "message", "") or exc)
        return status, detail, headers or {}

    def _key_source(self) -> str:
        return "api_key" if self._api_key else f"{self._provider.upper()}_API_KEY"

    def _secrets(self) -> list[str | None]:
        return [self._api_key]


def openai_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """`request`'s system prompt and history in the OpenAI chat format litellm takes."""
    system = request.system if isinstance(request.system, str) else "\n\n".join(request.system)
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in request.messages:
        out.extend(_openai_message(message))
    return out


def _openai_message(message: Message) -> Iterator[dict[str, Any]]:
    if message.role == "assistant":
        calls = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(dict(c.input))},
            }
            for c in message.tool_calls
        ]
        out: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if calls:
            out["tool_calls"] = calls
        yield out
        return
    # Tool results become "tool" messages, which must directly follow the assistant's call.
    for block in message.content:
        if isinstance(block, ToolResult):
            content = f"Error: {block.content}" if block.is_error else block.content
            yield {"role": "tool", "tool_call_id": block.tool_use_id, "content": content}
    if message.text:
        yield {"role": "user", "content": message.text}


def _openai_tool(tool: ToolSpec) -> dict[str, Any]:
    function = {"name": tool.name, "description": tool.description}
    return {"type": "function", "function": {**function, "parameters": dict(tool.input_schema)}}


class _OpenAIStream:
    """Accumulates OpenAI-format stream chunks into one `ModelResponse`."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.finish_reason: str | None = None
        self.usage = Usage()

    def add(self, chunk: Any, on_text: TextCallback) -> None:
        if (usage := getattr(chunk, "usage", None)) is not None:
            self.usage = _openai_usage(usage)
        for choice in getattr(chunk, "choices", None) or []:
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                self.text.append(delta.content)
                on_text(delta.content)
            for call in getattr(delta, "tool_calls", None) or []:
                slot = self.calls.setdefault(call.index or 0, {"id": "", "name": "", "args": ""})
                slot["id"] = call.id or slot["id"]
                if call.function is not None:
                    slot["name"] = call.function.name or slot["name"]
                    slot["args"] += call.function.arguments or ""

    def response(self, model: str) -> ModelResponse:
        if self.finish_reason is None:
            raise _IncompleteStreamError
        calls = tuple(
            ToolCall(
                id=slot["id"] or f"call_{uuid.uuid4().hex[:12]}",  # some servers send no id
                name=slot["name"],
                input=_parse_arguments(slot["args"]),
            )
            for _, slot in sorted(self.calls.items())
        )
        stop = _OPENAI_STOP_REASONS.get(self.finish_reason, "other")
        if calls and stop == "end_turn":
            stop = "tool_use"  # some servers say "stop" even when they called tools
        return ModelResponse("".join(self.text), calls, stop, self.usage, model)


def _parse_arguments(raw: str) -> dict[str, Any]:
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        # Kept, so the tool's input validation can show the model what it sent.
        return {"_unparsed_arguments": raw}
    return parsed


def _openai_usage(usage: Any) -> Usage:
    prompt = getattr(usage, "prompt_tokens", 0) or 0
    details = getattr(usage, "prompt_tokens_details", None)
    cache_read = (getattr(details, "cached_tokens", 0) or 0) if details else 0
    cache_write = getattr(usage, "cache_creation_input_tokens", 0) or 0
    return Usage(
        input_tokens=max(0, prompt - cache_read - cache_write),
        output_tokens=getattr(usage, "completion_tokens", 0) or 0,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


# -- fallback and construction -----------------------------------------------------------------


class FallbackClient:
    """Tries each client in order, moving on when one fails transiently (rate-limited after its
    retries, server errors, timeouts, unreachable). A failure the owner must fix (missing or
    rejected key, unknown model) is raised at once, as is any failure after text has streamed.
    The response's `model` names the model that answered."""

    def __init__(self, clients: Sequence[ModelClient]) -> None:
        if not clients:
            raise ValueError("FallbackClient needs at least one client")
        self.clients = list(clients)

    @property
    def model(self) -> str:
        """The primary model's name."""
        return str(getattr(self.clients[0], "model", ""))

    async def complete(
        self, request: ModelRequest, on_text: TextCallback | None = None
    ) -> ModelResponse:
        for position, client in enumerate(self.clients, start=1):
            streamed = False

            def relay(text: str) -> None:
                nonlocal streamed
                streamed = True
                if on_text is not None:
                    on_text(text)

            try:
                return await client.complete(request, relay)
            except ModelError as error:
                if not error.transient or streamed or position == len(self.clients):
                    raise
                log.warning("%s; falling back to the next model", error)
        raise AssertionError("unreachable")


def create_model_client(
    model: str = DEFAULT_MODEL,
    *,
    fallbacks: Sequence[str] = (),
    api_base: str | None = None,
    timeout_s: float = 60.0,
    max_retries: int = 2,
) -> ModelClient:
    """The client for `model`, falling back to `fallbacks` in order.

    `claude-…` and `anthropic/…` use the Anthropic SDK; anything else goes through litellm.
    `api_base` applies to `model` only: fallbacks use their providers' defaults (or environment
    variables such as `OLLAMA_API_BASE`). Nothing touches the network until the first call.
    """
    clients = [
        _single_client(name, api_base if i == 0 else None, timeout_s, max_retries)
        for i, name in enumerate([model, *fallbacks])
    ]
    return clients[0] if len(clients) == 1 else FallbackClient(clients)


async def preload(model: ModelClient) -> None:
    """Import the SDKs `model` will use, in a worker thread, so that the first reply does not
    wait seconds for them (an interactive chat calls this while the owner types)."""
    for client in getattr(model, "clients", [model]):
        if isinstance(client, AnthropicClient):
            await asyncio.to_thread(importlib.import_module, "anthropic")
        elif isinstance(client, LiteLLMClient):
            await _litellm()


def _single_client(
    model: str, api_base: str | None, timeout_s: float, max_retries: int
) -> ModelClient:
    if model.startswith(("claude-", "anthropic/")):
        return AnthropicClient(
            model, base_url=api_base, timeout_s=timeout_s, max_retries=max_retries
        )
    return LiteLLMClient(model, api_base=api_base, timeout_s=timeout_s, max_retries=max_retries)


# -- helpers -----------------------------------------------------------------------------------

_TIMEOUT_NAMES = {
    "TimeoutException",
    "ConnectTimeout",
    "ReadTimeout",
    "WriteTimeout",
    "PoolTimeout",
    "APITimeoutError",
    "Timeout",
}
_CONNECTION_NAMES = {"ConnectError", "APIConnectionError", "ClientConnectorError"}
_BROKEN_STREAM_NAMES = {"RemoteProtocolError", "ReadError", "ClientPayloadError"}


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
    return "prompt is too long" in lowered or "context length" in lowered


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
