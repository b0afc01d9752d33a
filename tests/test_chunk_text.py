"""Issue 22 (helper size2): a chunk's text stored compressed with a preset dictionary made from
the index's own chunks — exact round trip, keyword deletes still exact, an index in the previous
layout upgrades by itself with the same answers, `pinch migrate` reads the plain text.

Real SQLite files and the real keyword index (FTS5); the thresholds are lowered so a handful of
notes is enough text for a dictionary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memory.index.index import MemoryIndex
from memory.store import chunk_text, index_rows
from memory.store.chunk_text import make_dictionary, pack_text, read_text
from memory.store.compact import compact
from memory.store.db import open_database
from memory.store.search_queries import search_queries
from memory.store.transfer_sqlite import open_sqlite_source
from tests.conftest import IndexFactory, WorkspaceFactory

NOTES = [
    "Anna rides a green Gazelle bike to the market every Saturday morning.",
    "Ben lost his brass compass near the glacier while hiking in the Alps.",
    "The cat Tom sleeps on the blue sofa in the living room after lunch.",
    "Granny's apple cake: six apples, two eggs, flour, butter and cinnamon.",
]
FILES = {
    "MEMORY.md": "# Memory\n\n" + "\n\n".join(f"- {n}" for n in NOTES) + "\n",
    **{
        f"memory/2026-01-{10 + d:02d}.md": f"# 2026-01-{10 + d:02d}\n\n"
        + "\n\n".join(f"- Day {d}, note {i}: {n}" for i, n in enumerate(NOTES))
        + "\n"
        for d in range(8)
    },
    "memory/2026-01-30.md": "# 2026-01-30\n\nThe plumber Zebulon fixed the kitchen tap.\n",
}


@pytest.fixture
def small_dictionary(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dictionary from little text, looked for at every chunk (the defaults wait for 64 kB)."""
    monkeypatch.setattr(chunk_text, "DICT_MIN_BYTES", 200)
    monkeypatch.setattr(index_rows, "_DICT_LOOK_EVERY", 1)


def stored_forms(idx: MemoryIndex) -> dict[str, int]:
    return dict(idx.db.execute("SELECT typeof(text), count(*) FROM memory_chunks GROUP BY 1"))


def hits(idx: MemoryIndex, *questions: str) -> list[list[tuple[str, int, str]]]:
    return [[(h.path, h.start_line, h.snippet) for h in idx.search(q)] for q in questions]


def keyword_ids(idx: MemoryIndex, word: str) -> list[int]:
    return [i for i, _ in search_queries(idx.db).keyword_ranked(f'"{word}"', 50)]


def test_a_text_comes_back_exactly_and_smaller() -> None:
    sample = [n * 3 for n in NOTES]
    data = make_dictionary(sample)
    dictionary = (b"12345678", data)
    chunk_text._dicts[b"12345678"] = data  # (as if read from meta)
    for text in (
        "Anna rides a green Gazelle bike to the market every Saturday morning. " * 4,
        "混合 text: 安娜骑绿色自行车去市场 — émigré 🚲 " * 5,
        "lone \udc80 surrogate kept " * 6,
    ):
        packed = pack_text(text, dictionary)
        assert isinstance(packed, bytes)
        assert len(packed) < len(text.encode("utf-8", "surrogatepass"))
        assert read_text(None, packed) == text
    assert pack_text("short", dictionary) == "short"  # not smaller: kept as it is
    assert pack_text("no dictionary yet " * 9, None) == "no dictionary yet " * 9


def test_a_blob_naming_a_missing_dictionary_is_an_error_not_garbage(tmp_path: Path) -> None:
    db = open_database(tmp_path / "a.sqlite")
    try:
        with db.lock, pytest.raises(ValueError, match="missing"):
            read_text(db.conn, b"\x01" + b"\xff" * 8 + b"\x00\x00")
    finally:
        db.close()


def test_chunks_are_stored_compressed_and_searched_as_before(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, small_dictionary: None
) -> None:
    workspace = make_workspace(FILES)
    idx = make_index(workspace)
    idx.sync()

    forms = stored_forms(idx)
    assert forms.get("blob", 0) > forms.get("text", 0) > 0  # the first ones: before the dict
    found = hits(idx, "green Gazelle bike", "Zebulon")
    assert found[0] and found[1][0][0] == "memory/2026-01-30.md"
    assert "Zebulon fixed the kitchen tap" in found[1][0][2]
    # every chunk reads back as the file's lines
    for path, start, end, text in idx.db.execute(
        "SELECT path, start_line, end_line, text FROM memory_chunks"
    ):
        with idx.db.lock:
            plain = read_text(idx.db.conn, text)
        lines = (workspace / path).read_text(encoding="utf-8").splitlines()
        assert plain.strip() == "\n".join(lines[start - 1 : end]).strip()


def test_an_edited_compressed_chunk_leaves_no_keyword_behind(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, small_dictionary: None
) -> None:
    workspace = make_workspace(FILES)
    idx = make_index(workspace)
    idx.sync()
    assert len(keyword_ids(idx, "zebulon")) == 1
    assert stored_forms(idx).get("blob")

    (workspace / "memory/2026-01-30.md").write_text(
        "# 2026-01-30\n\nThe plumber came back on Monday.\n", encoding="utf-8"
    )
    idx.sync()

    assert keyword_ids(idx, "zebulon") == []  # FTS5's delete was handed the exact body
    assert keyword_ids(idx, "monday")
    (workspace / "memory/2026-01-30.md").unlink()
    idx.sync()
    assert keyword_ids(idx, "monday") == [] and keyword_ids(idx, "plumber") == []
    idx.sync(force=True)  # a rebuild drops the old generation's keywords by its texts
    assert len(keyword_ids(idx, "gazelle")) == len(set(keyword_ids(idx, "gazelle")))
    assert hits(idx, "green Gazelle bike")[0]


def test_an_index_with_plain_texts_upgrades_by_itself_with_the_same_answers(
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    workspace = make_workspace(FILES)
    monkeypatch.setattr(chunk_text, "DICT_MIN_BYTES", 10**9)  # as the previous version wrote
    idx = make_index(workspace)
    idx.sync()
    assert set(stored_forms(idx)) == {"text"}
    questions = ("green Gazelle bike", "compass glacier", "apple cake", "Zebulon")
    before = hits(idx, *questions)
    with idx.db.transaction() as conn:
        conn.execute("DELETE FROM schema_migrations WHERE name = 'm012_size2_chunk_text'")
        conn.execute("DELETE FROM _migrations WHERE name = 'm012_size2_chunk_text'")
    idx.close()

    monkeypatch.setattr(chunk_text, "DICT_MIN_BYTES", 200)
    again = make_index(workspace)  # the migration runs on open
    forms = stored_forms(again)
    assert set(forms) == {"blob"}
    assert hits(again, *questions) == before
    report = again.sync()  # nothing to index again: the files did not change
    assert not report.files_indexed and not report.rebuilt
    assert hits(again, *questions) == before


def test_a_compaction_compresses_what_was_written_plain(
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workspace = make_workspace(FILES)
    monkeypatch.setattr(chunk_text, "DICT_MIN_BYTES", 10**9)  # too little text for one yet
    idx = make_index(workspace)
    idx.sync()
    before = hits(idx, "green Gazelle bike", "Zebulon")
    assert set(stored_forms(idx)) == {"text"}

    monkeypatch.setattr(chunk_text, "DICT_MIN_BYTES", 200)
    compact(idx.db)

    assert set(stored_forms(idx)) == {"blob"}
    assert hits(idx, "green Gazelle bike", "Zebulon") == before


def test_migrate_reads_compressed_texts_as_plain(
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
    small_dictionary: None,
    tmp_path: Path,
) -> None:
    workspace = make_workspace(FILES)
    idx = make_index(workspace)
    idx.sync()
    path = idx.db.path
    idx.close()

    with open_sqlite_source(Path(path)) as source:
        inventory = source.inventory()
        columns = inventory.tables["memory_chunks"]
        texts = [
            row[list(columns).index("text")]
            for batch in source.rows("memory_chunks", columns, 100)
            for row in batch
        ]
        bodies: list[Any] = [
            r[1] for batch in source.rows("keywords", ("chunk_id", "body"), 100) for r in batch
        ]
    assert texts and all(isinstance(t, str) for t in texts)
    assert any("Zebulon fixed the kitchen tap" in t for t in texts)
    assert any("zebulon" in b.lower() for b in bodies)
