"""A search's steps in another order give the same answer: the question embedded first on both
cores, then the keyword and vector sides at once, as when the embedding runs beside the keyword
side on one core (memory/search/schedule.py); and the centroid matrix's remembered scope masks
and edge ties (memory/search/centroid_matrix.py); `line_terms` in two passes."""

from __future__ import annotations

import gc
import random
import threading
from collections.abc import Iterator
from datetime import datetime

import numpy as np
import pytest

from common.text import strip_comments
from memory.embeddings import local_models
from memory.embeddings.base import query_core_limit, query_cores
from memory.embeddings.batching import EngineGate
from memory.embeddings.e5_onnx import OnnxE5
from memory.embeddings.local_models import LocalE5Provider
from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.search import hybrid
from memory.search import schedule as schedule_module
from memory.search.centroid_matrix import CentroidMatrix
from memory.search.presets import PRESETS
from memory.text import _TOKEN, CJK_CHAR, line_terms, stem_term

NOW = datetime(2026, 1, 2, 12, 0)
NOTES = {
    "MEMORY.md": "# Memory\n\n- My cat Tom sleeps on the blue sofa.\n- Anna prefers tea.\n",
    "memory/2026-01-01.md": "# 2026-01-01\n\n我的猫喜欢蓝色的沙发。\n\n天气很好，我们去了公园。\n",
    "memory/2025-12-24.md": "# 2025-12-24\n\nBought a new bicycle helmet for the commute.\n",
    "memory/2025-12-20.md": "# 2025-12-20\n\nThe plumber fixed the sink; it cost 80 euros.\n",
}
QUESTIONS = [
    "where does the cat sleep?",
    "我的猫喜欢什么颜色？",
    "what did the sink repair cost",
    "helmet for cycling to work",
    "something never written down anywhere",
]


@pytest.fixture(scope="module")
def e5_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryIndex]:
    root = tmp_path_factory.mktemp("schedule")
    ws = root / "workspace"
    for rel, text in NOTES.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text, encoding="utf-8")
    config = MemoryConfig(embedding=EmbeddingConfig(provider="local"))
    idx = MemoryIndex.open(ws, root / "agent.sqlite", config)
    idx.sync()
    yield idx
    idx.close()


def _answers(idx: MemoryIndex, schedule: str, preset: str) -> list[list[tuple[str, int, float]]]:
    saved = schedule_module.SCHEDULE
    schedule_module.SCHEDULE = schedule
    provider = idx.provider
    assert isinstance(provider, LocalE5Provider)
    key = provider.load_key
    cores = local_models._QUERY_CORES.get(key)
    local_models._QUERY_CORES[key] = 2  # as if this machine's warm-up found two threads faster
    assert provider.multicore_query
    try:
        out = []
        for q in QUESTIONS:
            idx._query_cache.clear()  # embed again, in this schedule
            hits = idx.search(q, preset=preset, now=NOW, record=False)
            out.append([(h.path, h.start_line, round(h.score, 6)) for h in hits])
        return out
    finally:
        schedule_module.SCHEDULE = saved
        if cores is None:
            local_models._QUERY_CORES.pop(key, None)
        else:
            local_models._QUERY_CORES[key] = cores


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_embedding_first_gives_the_same_hits_as_embedding_beside_keywords(
    e5_index: MemoryIndex, preset: str
) -> None:
    beside = _answers(e5_index, "beside", preset)
    first = _answers(e5_index, "embed-first", preset)
    assert first == beside
    assert any(beside)  # (not vacuous: the questions find something)


def test_the_keyword_hits_are_read_while_the_vector_side_still_runs(
    e5_index: MemoryIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search whose embedding is slow reads its keyword hits' rows before it waits for the
    vector side, reads none of them a second time, and answers as when nothing waited."""
    quick = _answers(e5_index, "beside", "pinch")
    provider = e5_index.provider
    assert isinstance(provider, LocalE5Provider)
    embed = provider.embed_query
    done = threading.Event()

    def slow_embed(text: str) -> np.ndarray:
        done.wait(5)  # released by the first read of rows: the keyword side ended first
        return embed(text)

    loads: list[set[int]] = []
    load = hybrid.load_candidates

    def recording_load(queries: object, ids: list[int]) -> object:
        loads.append(set(ids))
        done.set()
        return load(queries, ids)

    monkeypatch.setattr(provider, "embed_query", slow_embed)
    monkeypatch.setattr(hybrid, "load_candidates", recording_load)
    saved = schedule_module.SCHEDULE
    schedule_module.SCHEDULE = "beside"
    try:
        e5_index._query_cache.clear()
        hits = e5_index.search(QUESTIONS[2], preset="pinch", now=NOW, record=False)
    finally:
        schedule_module.SCHEDULE = saved
    assert [(h.path, h.start_line, round(h.score, 6)) for h in hits] == quick[2]
    assert len(loads) == 2 and loads[0]  # the keyword hits early, then only the rest
    assert not loads[0] & loads[1]


def test_a_query_embedded_on_two_cores_is_the_same_vector() -> None:
    e5 = LocalE5Provider()
    one = e5.embed_query("what colour is the sofa the cat likes?")
    with query_cores(2):
        two = e5.embed_query("what colour is the sofa the cat likes?")
    np.testing.assert_array_equal(one, two)


def test_calibration_decides_whether_searches_embed_on_two_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two engine threads are used for a question only where the warm-up timed them clearly
    faster (machine-dependent); one core, or indexing owning the cores, keeps one thread."""
    e5 = LocalE5Provider()
    key = e5.load_key
    monkeypatch.delitem(local_models._QUERY_CORES, key, raising=False)
    assert not e5.multicore_query  # not measured: beside the keyword side, one thread
    cores = e5.calibrate_query_cores(rounds=2)
    assert cores in (1, 2) and e5.multicore_query == (cores == 2)
    local_models._QUERY_CORES[key] = 2
    assert e5.calibrate_query_cores(rounds=1) == 2  # measured once per process: kept
    del local_models._QUERY_CORES[key]
    with e5._loaded.gate.batch():  # an indexing batch running: one thread, nothing decided
        assert e5.calibrate_query_cores(rounds=1) == 1
    assert key not in local_models._QUERY_CORES
    monkeypatch.setattr(local_models.os, "cpu_count", lambda: 1)
    assert e5.calibrate_query_cores(rounds=1) == 1 and not e5.multicore_query


def test_a_calibration_that_keeps_one_thread_lets_the_two_thread_session_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    e5 = LocalE5Provider()
    engine = e5._loaded.engine
    assert isinstance(engine, OnnxE5)
    monkeypatch.delitem(local_models._QUERY_CORES, e5.load_key, raising=False)
    monkeypatch.setattr(local_models, "MULTICORE_GAIN", 0.0)  # two threads never clearly faster
    assert e5.calibrate_query_cores(rounds=1) == 1
    assert not engine.forget_session(2)  # already let go
    with query_cores(2):
        e5.embed_query("made again when a search asks for two threads")
    assert engine.forget_session(2)


def test_the_warm_up_times_the_query_embedding_after_the_vectors_are_read(
    e5_index: MemoryIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = e5_index.provider
    assert isinstance(provider, LocalE5Provider)
    key = provider.load_key
    monkeypatch.delitem(local_models._QUERY_CORES, key, raising=False)  # not timed yet
    done = threading.Event()
    monkeypatch.setattr(provider, "calibrate_query_cores", lambda: done.set() or 1)
    e5_index.warm()
    assert done.wait(30)
    done.clear()
    local_models._QUERY_CORES[key] = 1  # timed once: a second warm-up (another agent) skips it
    e5_index.warm()
    assert not done.wait(1)


def test_the_warm_up_ends_with_what_is_loaded_set_aside_from_the_collector(
    e5_index: MemoryIndex,
) -> None:
    gc.unfreeze()
    e5_index.warm()
    for thread in threading.enumerate():
        if thread.name == "warm-up":
            thread.join(60)

    # the model's tables, the index's rows and caches: a full collection no longer walks them
    assert gc.get_freeze_count() > 10_000
    e5_index.search("anything at all")  # searching goes on as before


def test_query_cores_is_per_thread_and_restored() -> None:
    seen: list[int] = []
    with query_cores(2):
        assert query_core_limit() == 2
        worker = threading.Thread(target=lambda: seen.append(query_core_limit()))
        worker.start()
        worker.join()
    assert seen == [1]  # another thread keeps the default
    assert query_core_limit() == 1


def test_the_gate_counts_running_batches() -> None:
    gate = EngineGate(slots=2)
    assert gate.batches_running() == 0
    with gate.batch():
        assert gate.batches_running() == 1
    assert gate.batches_running() == 0


def _matrix(scopes: list[str], vectors: np.ndarray) -> CentroidMatrix:
    n = len(scopes)
    ids = np.arange(1, n + 1, dtype=np.int64)
    scope_ids: dict[str, int] = {}
    scope_of = np.array([scope_ids.setdefault(s, len(scope_ids)) for s in scopes], np.int32)
    return CentroidMatrix((1, "v"), None, n, ids, vectors.astype(np.float32), scope_of, scope_ids)


def test_a_remembered_scope_mask_follows_every_write() -> None:
    rng = np.random.default_rng(3)
    m = _matrix(["", "", "chat-1", ""], rng.standard_normal((4, 8)))
    q = rng.standard_normal(8).astype(np.float32)
    assert {i for i, _ in m.search(q, 10, [""])} == {1, 2, 4}
    m.put(3, "", rng.standard_normal(8).astype(np.float32))  # moved to the shared scope
    assert {i for i, _ in m.search(q, 10, [""])} == {1, 2, 3, 4}
    m.remove(2)
    assert {i for i, _ in m.search(q, 10, [""])} == {1, 3, 4}
    assert {i for i, _ in m.search(q, 10, ["chat-1"])} == set()
    m.put(9, "chat-1", rng.standard_normal(8).astype(np.float32))  # a freed row used again
    assert {i for i, _ in m.search(q, 10, ["chat-1"])} == {9}
    assert {i for i, _ in m.search(q, 10, ["", "chat-1"])} == {1, 3, 4, 9}


def test_rows_tied_at_the_edge_of_the_top_k_go_in_lowest_id_first() -> None:
    rng = np.random.default_rng(5)
    same = rng.standard_normal(8)
    best = same * 2.0  # a better match than the tied rows
    rows = np.vstack([same] * 6 + [best])  # ids 1-6 tied, id 7 best
    m = _matrix([""] * 7, rows)
    q = same.astype(np.float32)
    found = m.search(q, 3, [""])
    assert [i for i, _ in found] == [7, 1, 2]


def test_searches_agree_with_an_exhaustive_sort() -> None:
    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((500, 16))
    scopes = ["" if i % 3 else "other" for i in range(500)]
    m = _matrix(scopes, vectors)
    for _ in range(20):
        q = rng.standard_normal(16).astype(np.float32)
        sims = m.vectors[:500] @ q
        want = sorted(
            ((int(m.ids[i]), float(sims[i])) for i in range(500) if scopes[i] == ""),
            key=lambda p: (-p[1], p[0]),
        )[:25]
        assert m.search(q, 25, [""]) == want


def _line_terms_by_token(text: str) -> frozenset[str]:
    """`line_terms` as it was written before (one pass, token by token): the reference."""
    out: set[str] = set()
    for token in _TOKEN.findall(strip_comments(text)):
        if CJK_CHAR.match(token):
            out.update(token)
            out.update(token[i : i + 2] for i in range(len(token) - 1))
        else:
            out.add(stem_term(token.lower()))
    return frozenset(out)


def test_line_terms_in_two_passes_equal_the_token_by_token_reference() -> None:
    rng = random.Random(7)
    alphabet = "abcXYZ猫狗蓝色 _-é1İ\u0307한テ<!-->：\n"
    texts = [
        "İstanbul straße ÉCOLE naïve émigré's café-au-lait",
        "猫ABC猫猫 x猫y 한국어 テスト カタカナ漢字mix",
        "<!-- origin: untrusted -->猫狗 words<!-- trigger: tea time -->s",
        "a_b 1２３ ｆｕｌｌ —— ",
        "",
    ] + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(3000)]
    for text in texts:
        assert line_terms(text) == _line_terms_by_token(text), text
