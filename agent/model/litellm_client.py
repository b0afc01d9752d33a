"""Every other provider (Ollama, OpenAI, OpenAI-compatible servers, Gemini, OpenRouter …)
through litellm, imported lazily and offline-safe; messages and tools in the OpenAI format."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from agent.model.base import (
    OLLAMA_URL,
    IncompleteStreamError,
    RetryingClient,
    TextCallback,
    UnreadableResponseError,
)
from agent.model.errors import MissingKeyError, UnknownProviderError
from agent.types import (
    ImageBlock,
    Message,
    ModelRequest,
    ModelResponse,
    StopReason,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)
from memory.embeddings.litellm_env import import_litellm

log = logging.getLogger(__name__)

# "litellm.BadRequestError: OpenAIException - " in front of what the server said
_LITELLM_PREFIXES = re.compile(r"^(?:litellm\.\w+: )+(?:\w+Exception - )?")
_OPENAI_STOP_REASONS: dict[str | None, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


async def load_litellm() -> Any:
    """The litellm module, imported off the event loop the first time (it takes seconds)."""
    import sys

    module = sys.modules.get("litellm")
    if module is not None and getattr(module, "suppress_debug_info", False):
        return module
    return await asyncio.to_thread(import_litellm)


class LiteLLMClient(RetryingClient):
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
        await self.check_key()
        return await super().complete(request, on_text)

    async def check_key(self) -> None:
        litellm = await load_litellm()
        try:  # before any request: litellm's own error would blame the server
            litellm.get_llm_provider(model=self._litellm_model, api_base=self.api_base)
        except Exception:
            raise UnknownProviderError(model=self.model) from None
        missing = self._missing_keys(litellm)
        if missing:
            raise MissingKeyError(missing, model=self.model)

    async def _prepare(self) -> None:
        await load_litellm()

    async def supports_images(self) -> bool:
        """Whether litellm's model list says this model reads images (unknown models: no)."""
        litellm = await load_litellm()
        try:
            return bool(litellm.supports_vision(model=self._litellm_model))
        except Exception:
            return False

    async def _attempt(self, request: ModelRequest, on_text: TextCallback) -> ModelResponse:
        litellm = await load_litellm()
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
            num_retries=0,  # retried in RetryingClient, the same way for every provider
            max_retries=0,
            drop_params=True,  # a provider without e.g. stream_options gets the call without it
        )
        collected = _OpenAIStream()
        try:
            async for chunk in stream:
                collected.add(chunk, on_text)
        finally:
            await stream.aclose()
        # litellm makes up a final "stop" chunk when the server sent none: ask what it received.
        if getattr(stream, "chunks", None) == []:
            raise UnreadableResponseError("no chat completion events in the answer")
        if hasattr(stream, "received_finish_reason"):
            received = stream.received_finish_reason or getattr(
                stream, "intermittent_finish_reason", None
            )
            if received is None:
                raise IncompleteStreamError
        return collected.response(self.model)

    def _http_failure(self, exc: Exception) -> tuple[int, str, Mapping[str, str]] | None:
        status = getattr(exc, "status_code", None)
        if type(exc).__name__ == "MidStreamFallbackError":
            return None  # litellm says 500 for a stream it could not read: not an HTTP error
        if not isinstance(status, int) or status < 400:
            return None
        headers = getattr(exc, "litellm_response_headers", None)
        if headers is None:
            response = getattr(exc, "response", None)
            headers = getattr(response, "headers", None)
        detail = str(getattr(exc, "message", "") or exc)
        return status, _LITELLM_PREFIXES.sub("", detail), headers or {}

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
    images = message.images
    if images:  # the text first, then each picture as a data URL
        parts: list[dict[str, Any]] = (
            [{"type": "text", "text": message.text}] if message.text else []
        )
        parts.extend(_openai_image(image) for image in images)
        yield {"role": "user", "content": parts}
    elif message.text:
        yield {"role": "user", "content": message.text}


def _openai_image(image: ImageBlock) -> dict[str, Any]:
    data = base64.b64encode(image.data).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:{image.media_type};base64,{data}"}}


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
            raise IncompleteStreamError
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
