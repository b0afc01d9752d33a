"""What the embedding model may be spared of a passage (off by default: each option cost recall
somewhere, bench/RESULTS.md h-passage): list markers, heading marks, emphasis, turn stamps; the
keyword index and snippets keep the lines as written, and a
passage an earlier version embedded with its marks keeps its cached vector (no re-embedding)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import memory.index.chunking as chunking
from memory.embeddings.base import FloatArray
from memory.embeddings.providers import LocalE5Provider
from memory.index.chunking import chunk_markdown, passage_text, split_units
from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from tests.conftest import WorkspaceFactory


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


@pytest.fixture
def markers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunking, "STYLE", frozenset({"markers", "emphasis"}))


def test_by_default_the_model_reads_the_passage_as_written() -> None:
    assert passage_text("  - 03 Owner: **hi**\n## Pets  ") == "- 03 Owner: **hi**\n## Pets"
    (unit,) = split_units(chunk_markdown("- [12] User: hi")[0])
    assert unit.text == "- [12] User: hi" and unit.legacy == ""


@pytest.mark.usefixtures("markers")
def test_list_markers_heading_marks_and_emphasis_are_not_embedded() -> None:
    assert passage_text("- Booked the dentist.") == "Booked the dentist."
    assert passage_text("1. Buy milk\n* Call Ben") == "Buy milk\nCall Ben"
    assert passage_text("## Pets\nMy cat is Tom.") == "Pets\nMy cat is Tom."
    text = "The **blue** umbrella, `pinch`, _really_"
    assert passage_text(text) == "The blue umbrella, pinch, really"


@pytest.mark.usefixtures("markers")
def test_words_with_underscores_or_stars_and_turn_stamps_stay() -> None:
    assert passage_text("set max_results to 2*3*4") == "set max_results to 2*3*4"
    assert passage_text("[12] User: my cat is Tom") == "[12] User: my cat is Tom"
    assert passage_text("- 03 Owner: hi") == "03 Owner: hi"


def test_the_stamps_option_leaves_out_turn_numbers_and_times_not_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(chunking, "STYLE", frozenset({"markers", "stamps"}))
    assert passage_text("- 03 Owner: Booked the dentist.") == "Owner: Booked the dentist."
    assert passage_text("[D1:3] Caroline: hi") == "Caroline: hi"
    assert passage_text("09:30 Assistant: Noted.") == "Assistant: Noted."
    assert passage_text("## Session 4 — 2024-03-02 11:00\n- I moved.") == "Session 4\nI moved."
    assert passage_text("## 14:05\n- Talked to Anna") == "Talked to Anna"
    assert passage_text("Note to self: call mum") == "Note to self: call mum"
    assert passage_text("[link] the page") == "[link] the page"
    assert passage_text("12 apples: cheap") == "12 apples: cheap"


@pytest.mark.usefixtures("markers")
def test_each_item_keeps_its_own_passage_and_lines() -> None:
    log = "\n".join(f"- Noted, item {n}." for n in range(10))
    (chunk,) = chunk_markdown(log)
    units = split_units(chunk)
    assert [u.text for u in units] == [f"Noted, item {n}." for n in range(10)]
    assert [u.start_line for u in units] == list(range(1, 11))
    assert all(u.legacy and u.legacy != u.hash for u in units)
    (plain,) = split_units(chunk_markdown("No marker here.")[0])
    assert plain.legacy == ""


def _index(workspace: Path, tmp_path: Path, e5: LocalE5Provider) -> MemoryIndex:
    config = MemoryConfig(embedding=EmbeddingConfig(provider="local"))
    return MemoryIndex.open(workspace, tmp_path / "agent.sqlite", config, provider=e5)


NOTES = (
    "## Session 1 — 2024-03-02 11:00\n"
    "- 03 Owner: The boiler service is booked with **Kessler and Sons** for May.\n"
    "- 04 Assistant: Noted.\n"
    "- 09 Owner: My sister Ines moved to Porto last spring.\n"
    "- 10 Assistant: Noted.\n"
)


@pytest.mark.usefixtures("markers")
def test_keyword_search_and_snippets_keep_the_lines_as_written(
    make_workspace: WorkspaceFactory, tmp_path: Path
) -> None:
    workspace = make_workspace({"memory/2024-03-02.md": NOTES})
    e5 = CountingE5()
    index = _index(workspace, tmp_path, e5)
    try:
        index.sync()
        assert "09 Owner: My sister Ines moved to Porto last spring." in e5.seen
        assert not any("**" in t or t.startswith("- ") for t in e5.seen)
        hits = index.search("Kessler boiler", preset="keyword", max_results=3)
        assert hits and "- 03 Owner: The boiler service is booked with **Kessler" in hits[0].snippet
        hits = index.search("where does my sister live now", preset="vector", max_results=3)
        assert any("Porto" in h.snippet for h in hits)
    finally:
        index.close()


def test_an_index_built_before_keeps_its_vectors_and_reembeds_nothing(
    make_workspace: WorkspaceFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = make_workspace({"memory/2024-03-02.md": NOTES})
    monkeypatch.setattr(chunking, "STYLE", frozenset())  # as earlier versions embedded
    before = CountingE5()
    index = _index(workspace, tmp_path, before)
    try:
        index.sync()
        assert any("- 03 Owner:" in t for t in before.seen)
    finally:
        index.close()
    monkeypatch.setattr(chunking, "STYLE", frozenset({"markers", "emphasis"}))
    after = CountingE5()
    index = _index(workspace, tmp_path, after)
    try:
        report = index.sync(force=True)
        assert after.seen == []  # every passage's earlier vector carried over
        assert report.chunks_embedded == 0
        hits = index.search("where does my sister live now", preset="vector", max_results=3)
        assert any("Porto" in h.snippet for h in hits)
        (workspace / "memory/2024-03-02.md").write_text(NOTES + "- 11 Owner: I sold the car.\n")
        index.sync()
        assert after.seen == ["11 Owner: I sold the car."]  # only the new line
    finally:
        index.close()
