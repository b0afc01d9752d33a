"""Model clients behind one small interface, `ModelClient`.

- `AnthropicClient` (anthropic_client.py): Claude through the official SDK, prompt-cache markers.
- `LiteLLMClient` (litellm_client.py): every other provider (Ollama, OpenAI, …) via litellm.
- `FallbackClient`: tries models in order when one is down, rate-limited or unreachable.
- `create_model_client`: picks among them from the configured model names.

All of them stream: `on_text` receives each text delta as it arrives, and `complete` returns the
whole response at the end. Failures surface as `ModelError`s worded as advice (model_errors.py),
including answers that are not the API's at all (`BadResponseError`); `timeout_s` bounds each
client's whole call, retries included; an answer that breaks off after text has streamed comes
back with `cut_off` set instead of an error. Retries and error recognition live in model_base.py.
Both SDKs are imported on first use, in a worker thread: they take seconds to import.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Sequence

from agent.model.anthropic_client import AnthropicClient, anthropic_params
from agent.model.base import DEFAULT_MODEL, ModelClient, StreamRelay, TextCallback
from agent.model.errors import ModelError
from agent.model.litellm_client import LiteLLMClient, load_litellm, openai_messages
from agent.types import ModelRequest, ModelResponse

__all__ = [
    "DEFAULT_MODEL",
    "AnthropicClient",
    "FallbackClient",
    "LiteLLMClient",
    "ModelClient",
    "TextCallback",
    "anthropic_params",
    "check_key",
    "create_model_client",
    "openai_messages",
    "preload",
    "supports_images",
]

log = logging.getLogger(__name__)


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
            relay = StreamRelay(on_text)
            try:
                return await client.complete(request, relay)
            except ModelError as error:
                if not error.transient or relay.streamed or position == len(self.clients):
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
            await load_litellm()


async def check_key(model: ModelClient) -> None:
    """Raise `MissingKeyError` if `model` cannot be called for want of an API key, without a
    network call. For a fallback chain the first model decides: a missing key is not a failure
    that moves on to the next model."""
    primary = getattr(model, "clients", [model])[0]
    if isinstance(primary, AnthropicClient | LiteLLMClient):
        await primary.check_key()


async def supports_images(model: ModelClient) -> bool:
    """Whether `model` (for a fallback chain: its first model) can read image blocks: Claude
    always, other providers as litellm's model list says; anything else, no."""
    primary = getattr(model, "clients", [model])[0]
    if isinstance(primary, AnthropicClient | LiteLLMClient):
        return await primary.supports_images()
    return False


def _single_client(
    model: str, api_base: str | None, timeout_s: float, max_retries: int
) -> ModelClient:
    if model.startswith(("claude-", "anthropic/")):
        return AnthropicClient(
            model, base_url=api_base, timeout_s=timeout_s, max_retries=max_retries
        )
    return LiteLLMClient(model, api_base=api_base, timeout_s=timeout_s, max_retries=max_retries)
