"""Indexing with the local model: batches of similar-length texts on one worker thread per
core give the same vectors as one call per batch did, texts the cache holds never reach the
model, and a search query never waits behind the batches."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from bench.synthetic import conversation_log
from memory.embeddings.base import FloatArray
from memory.embeddings.batching import EngineGate, plan_batches, run_batches, usable_cores
from memory.embeddings.providers import LocalE5Provider
from memory.index.chunking import chunk_markdown, split_units
from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from tests.conftest import WorkspaceFactory


def log_passages(size: int) -> list[str]:
    """The distinct passages the index embeds for a synthetic chat log of `size` bytes."""
    chunks = chunk_markdown(conversation_log(size), tokens=400, overlap=80)
    return list(dict.fromkeys(u.text for c in chunks for u in split_units(c)))


def test_parallel_batches_give_the_vectors_of_one_call_per_batch_in_order() -> None:
    e5 = LocalE5Provider()
    long = "My grandmother grew tomatoes and basil in her garden every summer. " * 40
    texts = [*log_passages(4_000)[:20], "我最喜欢的颜色是蓝色。", long, "x"]
    engine = e5._loaded.engine
    before = np.concatenate([engine.passage(texts[i : i + 16]) for i in range(0, len(texts), 16)])
    now = e5.embed_documents(texts)
    assert now.shape == before.shape
    assert float(np.abs(now - before).max()) < 1e-5


def test_batches_hold_similar_lengths_long_and_short_in_turn_each_text_once() -> None:
    texts = ["a" * n for n in (5, 4000, 30, 300, 2, 301, 299)] + ["b" * 10] * 40
    batches = plan_batches(texts, max_texts=16)
    assert sorted(i for b in batches for i in b) == list(range(len(texts)))
    assert all(len(b) <= 16 for b in batches)
    assert batches[0] == [1]  # 4,000 bytes: over one batch's budget, alone
    assert 4 in batches[1]  # then the batch of the shortest texts
    spans = [(min(len(texts[i]) for i in b), max(len(texts[i]) for i in b)) for b in batches]
    for low, high in spans:  # no batch holds a length strictly inside another's span
        assert all(high <= lo or hi <= low for lo, hi in spans if (lo, hi) != (low, high))


def test_batches_run_on_several_threads_at_once_and_every_result_comes_back() -> None:
    running, most = 0, 0
    lock = threading.Lock()

    def run(batch: list[int]) -> list[int]:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return [i * 10 for i in batch]

    batches = [[i, i + 100] for i in range(8)]
    results = dict((tuple(b), r) for b, r in run_batches(batches, run, workers=2))
    assert results == {(i, i + 100): [i * 10, (i + 100) * 10] for i in range(8)}
    assert most == 2


def test_stopping_early_starts_no_further_batch() -> None:
    started: list[int] = []

    def run(batch: list[int]) -> int:
        started.append(batch[0])
        time.sleep(0.02)
        return batch[0]

    batches = run_batches([[i] for i in range(40)], run, workers=2)
    next(batches)
    batches.close()  # what the cache does when storing a batch failed
    count = len(started)
    time.sleep(0.1)
    assert len(started) == count < 40


def test_a_query_goes_in_while_batches_run_and_no_new_batch_starts_meanwhile() -> None:
    gate = EngineGate(2)
    in_batch, release = threading.Event(), threading.Event()
    second_started = threading.Event()

    def long_batch() -> None:
        with gate.batch():
            in_batch.set()
            release.wait(5)

    def next_batch() -> None:
        with gate.batch():
            second_started.set()

    first = threading.Thread(target=long_batch)
    first.start()
    assert in_batch.wait(5)
    with gate.query():  # entered at once although a batch is running
        later = threading.Thread(target=next_batch)
        later.start()
        assert not second_started.wait(0.1)  # a free slot, but the query goes first
    assert second_started.wait(5)
    release.set()
    first.join()
    later.join()


def test_an_engine_that_takes_one_call_at_a_time_runs_the_query_after_the_batch() -> None:
    gate = EngineGate(1, queries_alone=True)
    order: list[str] = []
    in_batch = threading.Event()

    def batch() -> None:
        with gate.batch():
            in_batch.set()
            time.sleep(0.1)
            order.append("batch")

    t = threading.Thread(target=batch)
    t.start()
    assert in_batch.wait(5)
    with gate.query():
        order.append("query")
    t.join()
    assert order == ["batch", "query"]


def test_a_query_embedding_during_a_long_indexing_run_waits_for_no_batch() -> None:
    e5 = LocalE5Provider(batch_size=4)  # the same loaded model, smaller batches
    texts = log_passages(6_000)  # several batches per worker
    alone = min(_timed(e5.embed_query, "what did we decide about the garden") for _ in range(3))
    indexing = threading.Thread(target=e5.embed_documents, args=(texts,))
    indexing.start()
    time.sleep(0.2)
    during = _timed(e5.embed_query, "which day is the dentist appointment")
    still_indexing = indexing.is_alive()
    indexing.join()
    assert still_indexing
    # Sharing the cores with the batches running, not queued behind them (a batch alone takes
    # several times a query's time); generous for a busy machine.
    assert during < max(20 * alone, 1.0)


def _timed(embed: object, text: str) -> float:
    started = time.perf_counter()
    embed(text)  # type: ignore[operator]
    return time.perf_counter() - started


class CountingE5(LocalE5Provider):
    """The real local model, remembering which texts reached it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def embed_document_batches(
        self, texts: Sequence[str]
    ) -> Iterator[tuple[list[int], FloatArray]]:
        self.seen.extend(texts)
        return super().embed_document_batches(texts)


def test_only_texts_the_cache_lacks_reach_the_model(
    make_workspace: WorkspaceFactory, tmp_path: Path
) -> None:
    log = conversation_log(3_000)
    workspace = make_workspace({"memory/2024-03-01.md": log})
    e5 = CountingE5()
    config = MemoryConfig(embedding=EmbeddingConfig(provider="local"))
    index = MemoryIndex.open(workspace, tmp_path / "agent.sqlite", config, provider=e5)
    try:
        first = index.sync()
        passages = log_passages(3_000)
        assert sorted(e5.seen) == sorted(passages)  # each distinct passage once
        assert first.chunks_embedded == len(passages)

        e5.seen.clear()
        rebuilt = index.sync(force=True)
        assert (rebuilt.chunks_embedded, e5.seen) == (0, [])

        (workspace / "memory/2024-03-01.md").write_text(
            log + "\n\nThe plumber comes on Thursday at eight.\n", encoding="utf-8"
        )
        index.sync()
        assert e5.seen == ["The plumber comes on Thursday at eight."]
        hits = index.search("when is the plumber coming", preset="vector")
        assert "plumber" in hits[0].snippet
    finally:
        index.close()


def test_usable_cores_follows_omp_num_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert usable_cores() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert usable_cores() >= 1


def test_a_passage_in_two_chunks_and_two_files_reaches_the_model_once(
    make_workspace: WorkspaceFactory, tmp_path: Path
) -> None:
    shared = "The boiler service is booked with Kessler and Sons for the first Tuesday of May."
    log = conversation_log(2_000)  # over one chunk: the two copies land in different ones
    notes = f"{shared}\n\n{log}\n\n{shared}\n"  # near the top and the bottom of a file
    workspace = make_workspace(
        {"memory/2024-03-01.md": notes, "memory/2024-03-02.md": f"{shared}\n"}
    )
    e5 = CountingE5()
    config = MemoryConfig(embedding=EmbeddingConfig(provider="local"))
    index = MemoryIndex.open(workspace, tmp_path / "agent.sqlite", config, provider=e5)
    try:
        report = index.sync()
        chunks = chunk_markdown(notes, tokens=400, overlap=80)
        holding = [c for c in chunks if any(u.text == shared for u in split_units(c))]
        assert len(holding) == 2  # two chunks of the first file, and the second file, hold it
        assert e5.seen.count(shared) == 1
        assert len(e5.seen) == len(set(e5.seen)) == report.chunks_embedded
        hits = index.search("when is the boiler serviced", preset="vector", max_results=10)
        found = {h.path for h in hits if "Kessler" in h.snippet}
        assert found == {"memory/2024-03-01.md", "memory/2024-03-02.md"}
    finally:
        index.close()
