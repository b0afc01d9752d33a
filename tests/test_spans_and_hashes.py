"""Issue 22 (helper h-spans, migrations m017 and m018): a chunk's packed passages in the compact
form, read exactly as the plain uint32 triples before it; the chunks' and files' hashes as the
digest's 32 bytes, read back as the hex text they were; an index in the layout before upgrading
by itself with every passage, hash and answer kept and no file indexed again.

Real SQLite files and the real USE model (512 dimensions).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pytest

from memory.index.chunking import hash_text
from memory.index.index import MemoryIndex
from memory.store.chunk_text import read_text
from memory.store.migrations import memory_set
from memory.store.span_codec import PLAIN_WIDTH, span_count, spans_blob, spans_of, spans_of_many
from tests.conftest import IndexFactory, WorkspaceFactory, use_config
from tests.layout_support import M015_UNDONE, m015_layout
from tests.test_compact_vectors import FILES

QUESTIONS = ("who lost a compass", "which bike does Anna ride", "what did I buy at the market")
U32 = 2**32 - 1

# (start line, end line, cache id) of one chunk's passages: what each form must say back.
CHUNKS = {
    "lines of a usual chunk": [(1, 1, 497_000), (2, 3, 12), (5, 5, 300_001), (6, 9, 70_000)],
    "lines further apart": [(40, 41, 5), (60, 200, 6), (201, 201, 7)],
    "long passages": [(1, 300, 9), (301, 70_000, 8)],
    "lines far into a file": [(70_000, 70_001, 3), (70_003, 70_010, 4)],
    "the last line and id there are": [(U32 - 3, U32 - 2, U32), (U32, U32, 0)],
    "ids close together, far from 0": [(3 + i, 3 + i, 4_000_000_000 + i) for i in range(9)],
    "ids of one byte": [(1, 2, 0), (3, 3, 255)],
    "one passage": [(7, 7, 123_456)],
    "lines that go back": [(5, 9, 1), (2, 3, 2)],
    "lines that overlap": [(5, 9, 1), (8, 10, 2)],
    "no passage": [],
}


def plain(spans: list[tuple[int, int, int]]) -> bytes:
    """The form m014 wrote: uint32 triples."""
    return np.asarray(spans, dtype="<u4").reshape(-1, 3).tobytes()


@pytest.mark.parametrize("name", list(CHUNKS))
def test_both_forms_of_a_chunks_passages_read_as_the_same_spans(name: str) -> None:
    spans = CHUNKS[name]
    old, new = plain(spans), spans_blob(spans)

    assert spans_of(old).tolist() == spans_of(new).tolist() == [list(s) for s in spans]
    assert spans_of(old).dtype == spans_of(new).dtype == np.dtype("<u4")
    assert span_count(old) == span_count(new) == len(spans)
    assert len(new) <= len(old)
    if name.startswith("lines that") or not spans:
        assert new == old  # (the compact form does not say that: kept plain)
    else:
        assert len(new) % PLAIN_WIDTH != 0  # never taken for the plain form


def test_the_compact_form_of_a_usual_chunk_is_a_third_of_the_plain_one() -> None:
    # (ten passages a line or two long, one after another, ids up to 2^24: as at 100k chunks)
    spans = [(1 + 2 * i, 2 + 2 * i, 400_000 + 7919 * i) for i in range(10)]
    assert len(plain(spans)) == 120
    assert len(spans_blob(spans)) <= 42


def test_chunks_of_both_forms_and_every_layout_read_together_as_one_by_one() -> None:
    blobs = [plain(s) for s in CHUNKS.values()] + [spans_blob(s) for s in CHUNKS.values()]
    together = spans_of_many(blobs * 2)
    assert [s.tolist() for s in together] == [spans_of(b).tolist() for b in blobs * 2]


def test_a_form_this_version_does_not_know_is_refused() -> None:
    with pytest.raises(ValueError, match="not a form of packed passages"):
        spans_of(bytes([0b010_00000, 1, 0, 0, 0]))


# ---- an index in the layout before -------------------------------------------------------------


def rows(idx: MemoryIndex, sql: str) -> list[Any]:
    return list(idx.db.execute(sql))


def answers(idx: MemoryIndex) -> list[list[tuple[str, int, int, float]]]:
    return [
        [(h.path, h.start_line, h.end_line, round(h.score, 6)) for h in idx.search(q)]
        for q in QUESTIONS
    ]


def packed(idx: MemoryIndex) -> dict[int, tuple[int, list[list[int]]]]:
    """chunk id -> (its first passage's id, its passages' lines and cache ids)."""
    found = rows(idx, "SELECT chunk_id, first_unit, spans FROM memory_passages")
    return {int(c): (int(f), spans_of(b).tolist()) for c, f, b in found}


def test_a_new_index_writes_compact_spans_and_32_byte_hashes_read_back_as_hex(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES), use_config())
    idx.sync()

    blobs = [bytes(b) for (b,) in rows(idx, "SELECT spans FROM memory_passages")]
    assert blobs and all(len(b) % PLAIN_WIDTH for b in blobs)
    with idx.db.lock:
        chunks = [
            (h, read_text(idx.db.conn, t))
            for h, t in rows(idx, "SELECT hash, text FROM memory_chunks")
        ]
    assert chunks and all(h == bytes.fromhex(hash_text(t)) for h, t in chunks)
    stored = dict(rows(idx, "SELECT path, hash FROM memory_sources"))
    assert set(stored) == set(FILES) and all(len(h) == 32 for h in stored.values())
    generation = idx.active_generation()
    assert generation is not None
    known = idx.rows.repo.sources(generation[0])
    assert {p: s.hash for p, s in known.items()} == {p: h.hex() for p, h in stored.items()}


def test_an_index_in_the_m015_layout_upgrades_keeping_every_passage_and_hash(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    workspace = make_workspace(FILES)
    idx = make_index(workspace, use_config())
    idx.sync()
    before = answers(idx), packed(idx)
    with idx.db.transaction() as conn:
        m015_layout(conn)
    blobs = [bytes(b) for (b,) in rows(idx, "SELECT spans FROM memory_passages")]
    assert all(len(b) % PLAIN_WIDTH == 0 for b in blobs) and packed(idx) == before[1]
    chunk_hashes = dict(rows(idx, "SELECT id, hash FROM memory_chunks"))
    source_hashes = dict(rows(idx, "SELECT path, hash FROM memory_sources"))
    hashes = [*chunk_hashes.values(), *source_hashes.values()]
    assert all(isinstance(h, str) and len(h) == 64 for h in hashes)
    idx.close()

    idx = make_index(workspace, use_config())  # m017 and m018 run on open

    applied = {r[0] for r in rows(idx, "SELECT name FROM schema_migrations")}
    assert set(M015_UNDONE) <= applied and {m.__name__ for m in memory_set().migrations} <= applied
    assert packed(idx) == before[1]  # every passage's lines, cache id and id
    after = [bytes(b) for (b,) in rows(idx, "SELECT spans FROM memory_passages")]
    assert all(len(b) % PLAIN_WIDTH for b in after)
    assert sum(map(len, after)) < sum(map(len, blobs)) / 2
    assert dict(rows(idx, "SELECT id, hash FROM memory_chunks")) == {
        i: bytes.fromhex(h) for i, h in chunk_hashes.items()
    }
    assert dict(rows(idx, "SELECT path, hash FROM memory_sources")) == {
        p: bytes.fromhex(h) for p, h in source_hashes.items()
    }
    assert idx.status(deep=True).dirty_files == []
    assert answers(idx) == before[0]
    # Every file touched (the same text, a new time): each known unchanged by its hash.
    later = time.time() + 60
    for path in FILES:
        os.utime(workspace / path, (later, later))
    report = idx.sync()
    assert report.files_indexed == [] and report.chunks_embedded == 0
    assert report.files_unchanged == len(FILES)
    assert packed(idx) == before[1]
