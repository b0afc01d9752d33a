"""Remote embedding APIs through litellm (`LiteLLMProvider`): OpenAI, Gemini, Voyage, Ollama …
Errors become advice that names the key to check and never a secret (common/redact.py)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from common.home import config_file_hint
from common.redact import REDACTED, redact
from memory.embeddings.base import EmbeddingError, FloatArray, fallback_advice, unit_rows
from memory.embeddings.litellm_env import import_litellm

log = logging.getLogger(__name__)

DEFAULT_LITELLM_MODEL = "openai/text-embedding-3-small"


class LiteLLMProvider:
    """A remote embedding API through litellm, e.g. ``openai/text-embedding-3-small``.

    Credentials come from the environment, as litellm reads them (``OPENAI_API_KEY``,
    ``GEMINI_API_KEY`` ...); construction fails with advice when litellm says one is missing.
    `dimensions` is learned from the first response; reading it before any embedding makes one
    small blocking probe call (so an async caller should not read it first on the event loop).
    `timeout_s` bounds each attempt; a timed-out, rate-limited or failed (5xx)
    request is retried `max_retries` times with back-off. (litellm 1.108 reads 0 as "default",
    i.e. 2, so fewer than one retry is not available.) Inputs longer than `max_input_chars` are
    cut, so one oversized chunk cannot fail a batch on an 8k-token API limit.
    """

    provider = "litellm"
    max_input_chars: int | None = 6000  # under 8k tokens even for CJK text

    relevance_floor = 0.30  # OpenAI/Gemini/Voyage embeddings: unrelated well below this

    def __init__(
        self,
        model: str = "",
        *,
        api_base: str | None = None,
        batch_size: int = 16,
        timeout_s: float = 30.0,
        max_retries: int = 2,
    ) -> None:
        if max_retries < 1:
            raise ValueError("max_retries must be at least 1 (litellm reads 0 as its default)")
        self.model = model or DEFAULT_LITELLM_MODEL
        self.api_base = api_base
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self._litellm = load_litellm()
        self._dimensions: int | None = None
        missing = self._missing_environment()
        if missing:
            raise EmbeddingError(_missing_keys_message(self.model, missing))

    @property
    def dimensions(self) -> int:
        if self._dimensions is None:
            self._embed_batch(["dimensions probe"])
        assert self._dimensions is not None
        return self._dimensions

    def embed_documents(self, texts: Sequence[str]) -> FloatArray:
        if not texts:
            return np.empty((0, self.dimensions), dtype=np.float32)
        batches = [
            self._embed_batch(list(texts[start : start + self.batch_size]))
            for start in range(0, len(texts), self.batch_size)
        ]
        return np.concatenate(batches)

    def embed_query(self, text: str) -> FloatArray:
        return self._embed_batch([text])[0]

    def _embed_batch(self, texts: list[str]) -> FloatArray:
        limit = self.max_input_chars
        if limit is not None and any(len(t) > limit for t in texts):
            log.debug("cutting inputs longer than %d characters for %s", limit, self.model)
            texts = [t[:limit] for t in texts]
        try:
            response = self._litellm.embedding(
                model=self.model,
                input=texts,
                api_base=self.api_base,
                timeout=self.timeout_s,
                max_retries=self.max_retries,
            )
        except Exception as exc:
            raise EmbeddingError(self._explain(exc)) from exc
        items = sorted(response.data, key=lambda item: _field(item, "index"))
        vectors = [_field(item, "embedding") for item in items]
        if len(vectors) != len(texts) or not vectors:
            raise EmbeddingError(
                f"{self.model} returned {len(vectors)} vectors for {len(texts)} texts: "
                f"the server at {self.api_base or 'its default address'} is not a working "
                "OpenAI-style embeddings API"
            )
        width = len(vectors[0])
        if any(len(v) != width for v in vectors) or (
            self._dimensions is not None and width != self._dimensions
        ):
            raise EmbeddingError(
                f"{self.model} returned vectors of varying size ({width}, expected "
                f"{self._dimensions}): check [memory.embedding] model in {config_file_hint()}"
            )
        self._dimensions = width
        return unit_rows(vectors, width)

    def _missing_environment(self) -> list[str]:
        try:
            report = self._litellm.validate_environment(model=self.model, api_base=self.api_base)
        except Exception:  # an unknown provider: let the first call say what is wrong
            return []
        return list(report.get("missing_keys") or [])

    def _explain(self, exc: Exception) -> str:
        """Advice for a failed call, naming no secret."""
        errors = self._litellm.exceptions
        where = self.api_base or f"{self.model.split('/')[0]}'s default address"
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        # A removed secret has always read "***" in these messages.
        detail = redact(first_line).replace(REDACTED, "***")[:300]
        key = _key_name(self.model)
        if isinstance(exc, errors.AuthenticationError | errors.PermissionDeniedError):
            return (
                f"The embedding server at {where} rejected the API key for {self.model}: check "
                f"{key} in the environment, {fallback_advice()} ({detail})"
            )
        if "Missing credentials" in detail:
            return f"{key} is not set: export it, {fallback_advice()}"
        if isinstance(exc, errors.Timeout):
            return (
                f"The embedding server at {where} did not answer within {self.timeout_s:g} s "
                f"({self.max_retries} retries): check that it is up, raise [memory.embedding] "
                f"timeout_s, {fallback_advice()}"
            )
        if isinstance(exc, errors.RateLimitError):
            return (
                f"The embedding server at {where} is rate-limiting {self.model} (still after "
                f"{self.max_retries} retries): wait and retry, lower [memory.embedding] "
                f"batch_size, {fallback_advice()} ({detail})"
            )
        # litellm reports a refused connection as a 500 "Connection error."
        if isinstance(exc, errors.APIConnectionError) or "Connection error" in detail:
            return (
                f"Could not reach the embedding server at {where}: check that it is running "
                f"and [memory.embedding] api_base, {fallback_advice()} ({detail})"
            )
        if isinstance(exc, errors.NotFoundError | errors.BadRequestError):
            return (
                f"The embedding server at {where} refused the request for {self.model}: check "
                f"[memory.embedding] model and api_base in {config_file_hint()} ({detail})"
            )
        return f"Embedding with {self.model} at {where} failed: {type(exc).__name__}: {detail}"


def load_litellm() -> Any:
    try:
        return import_litellm()  # offline settings, shared with the model client
    except ImportError as exc:
        raise EmbeddingError(
            f"The litellm embedding provider needs the litellm package ({exc}): reinstall "
            f"Pinch's dependencies (scripts/setup.sh), {fallback_advice()}"
        ) from exc


def _field(item: Any, name: str) -> Any:
    return item[name] if isinstance(item, dict) else getattr(item, name)


def _key_name(model: str) -> str:
    """The usual environment variable holding the key for `model`'s provider."""
    prefix = model.split("/")[0] if "/" in model else "openai"
    return f"{prefix.upper()}_API_KEY"


def _missing_keys_message(model: str, missing: list[str]) -> str:
    if len(missing) == 1:
        return f"{missing[0]} is not set (embedding model {model}): export it, {fallback_advice()}"
    return (
        f"Embedding model {model} needs {', '.join(missing)} in the environment and some are "
        f"not set: export them, {fallback_advice()}"
    )
