"""Claude through the official `anthropic` SDK, with prompt-cache markers on the stable
prefix (system prompt, tool schemas) and before the newest user turn."""

from __future__ import annotations

import asyncio
import base64
import functools
import importlib
import logging
import os
import ssl
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agent.model.errors import MissingKeyError
from agent.types import (
    ContentBlock,
    ImageBlock,
    ModelRequest,
    ModelResponse,
    StopReason,
    TextBlock,
    ToolCall,
    ToolSpec,
    Usage,
)

if TYPE_CHECKING:
    import anthropic
from agent.model.base import (
    ANTHROPIC_URL,
    DEFAULT_MODEL,
    IncompleteStreamError,
    RetryingClient,
    TextCallback,
    UnreadableResponseError,
)

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
CONNECT_TIMEOUT_S = 10.0  # a TCP (and TLS) connection, or a free one from the pool

log = logging.getLogger(__name__)


class AnthropicClient(RetryingClient):
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
        if not base_url and os.environ.get("ANTHROPIC_BASE_URL"):
            self.url_from = "the environment variable ANTHROPIC_BASE_URL"
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
        self.connect_timeout_s = min(timeout_s, CONNECT_TIMEOUT_S)

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
            # Waiting for a free pooled connection counts as connecting (a connect timeout:
            # retried, the request never left), not as the answer's timeout_s.
            connect = self.connect_timeout_s
            timeout = sdk.Timeout(self.timeout_s, connect=connect, pool=connect)
            tls = await asyncio.to_thread(_tls_context)
            self._sdk = sdk.AsyncAnthropic(
                api_key=self._api_key,
                auth_token=None if self._api_key else self._auth_token,
                base_url=self.url,
                timeout=timeout,
                max_retries=0,  # retried in RetryingClient, the same way for every provider
                http_client=sdk.DefaultAsyncHttpxClient(timeout=timeout, verify=tls),
            )
        return self._sdk

    async def _prepare(self) -> None:
        await self._client()

    async def supports_images(self) -> bool:
        return True  # every Claude model of the Messages API reads images

    async def _attempt(self, request: ModelRequest, on_text: TextCallback) -> ModelResponse:
        client = await self._client()
        params = anthropic_params(request, self._api_model)
        events = 0
        async with client.messages.stream(**params) as stream:
            async for event in stream:
                events += 1
                if event.type == "text":
                    on_text(event.text)
            if events == 0:  # the SDK would fail an assertion: say what came instead
                kind = stream.response.headers.get("content-type") or "no content type"
                raise UnreadableResponseError(f"no Messages API events in the answer ({kind})")
            final = await stream.get_final_message()
        if final.stop_reason is None:
            raise IncompleteStreamError
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

    def _no_response(self, exc: Exception) -> bool:
        import anthropic

        # The SDK raises APIConnectionError only when no answer came (a broken stream comes
        # from the HTTP library itself); its APITimeoutError is translated before this.
        return isinstance(exc, anthropic.APIConnectionError)

    def _key_source(self) -> str:
        return self._key_from if self._api_key else "ANTHROPIC_AUTH_TOKEN"

    def _secrets(self) -> list[str | None]:
        return [self._api_key, self._auth_token]


@functools.lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every agent's client: the SDK builds one per client otherwise, and
    loading the certificates takes ≈ 80 ms — 27 s of start-up for a gateway of 334 agents."""
    httpx2 = importlib.import_module("httpx2")  # the SDK's HTTP client, already loaded with it
    context: ssl.SSLContext = httpx2.create_ssl_context()
    return context


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


def _has_content(block: ContentBlock) -> bool:
    return not isinstance(block, TextBlock) or bool(block.text)  # the API refuses empty text


def _anthropic_tool(tool: ToolSpec) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}


def _anthropic_block(block: ContentBlock) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageBlock):
        data = base64.b64encode(block.data).decode("ascii")
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": block.media_type, "data": data},
        }
    if isinstance(block, ToolCall):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)}
    return {
        "type": "tool_result",
        "tool_use_id": block.tool_use_id,
        "content": block.content,
        "is_error": block.is_error,
    }
