"""Lossless compaction: conversations indexed beside the memory files, scoped to their chat.

Real SQLite files, the real USE model (loaded once) with both vector backends, and keyword-only.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from memory.errors import SessionError
from memory.index.index import MemoryIndex
from memory.index.transcript_indexer import index_transcript
from memory.memory_config import ChunkingConfig
from memory.store.passage_pack import passage_count
from memory.store.sessions import Session, SessionKey, SessionStore, SqliteSessionStore
from memory.store.transcripts import (
    read_transcript,
    session_id_from_path,
    transcript_path,
)
from memory.text import estimate_tokens
from tests.conftest import IndexFactory, WorkspaceFactory, keyword_config, use_config

ANNA = SessionKey("main", "telegram", "direct", "111")
BEN = SessionKey("main", "telegram", "direct", "222")
FAMILY = SessionKey("main", "telegram", "group", "-100900")
FILES = {"MEMORY.md": "# Memory\n\n- The owner's cat is called Tom.\n"}
FACT = "My locker combination at the climbing gym is 4471, please keep it in mind."
QUERY = "locker combination climbing gym"


@pytest.fixture(params=["sqlite-vec", "numpy"])
def index(
    request: pytest.FixtureRequest,
    use_model: None,
    make_workspace: WorkspaceFactory,
    make_index: IndexFactory,
) -> MemoryIndex:
    idx = make_index(make_workspace(FILES), use_config(vector_backend=request.param))
    if idx.vector_backend != request.param:
        pytest.skip(f"{request.param} is not available with this Python's SQLite")
    idx.sync()
    return idx


def say(store: SessionStore, session: Session, *turns: tuple[str, str]) -> None:
    for user, assistant in turns:
        store.append(session.id, "user", {"text": user, "recalled": "RECALLED-CONTEXT"})
        store.append(session.id, "assistant", {"text": assistant})


def transcript_hits(idx: MemoryIndex, query: str, scopes: list[str]) -> list[str]:
    return [h.path for h in idx.search(query, scopes=scopes) if h.path.startswith("sessions/")]


def chunks_of(idx: MemoryIndex, path: str) -> list[tuple[int, int, str, str]]:
    rows = idx.db.execute(
        "SELECT c.start_line, c.end_line, c.text, c.origin FROM memory_chunks c "
        "JOIN memory_generations g ON g.id = c.generation AND g.state = 'active' "
        "WHERE c.path = ? ORDER BY c.start_line, c.id",
        (path,),
    )
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def test_a_fact_said_only_in_conversation_is_found_in_its_scope(index: MemoryIndex) -> None:
    store = SqliteSessionStore(index.db)
    session = store.current(ANNA)
    say(store, session, (FACT, "Got it."), ("Also, what's the weather?", "Sunny."))
    index_transcript(index, session, store.events(session.id))

    hits = index.search(QUERY, scopes=["", ANNA.memory_scope])
    top = hits[0]
    assert top.path == transcript_path(session.id) and top.source == "sessions"
    assert top.origin == "system" and (top.start_line, top.end_line) == (1, 4)
    assert "[1] User: My locker combination" in top.snippet


def test_another_conversation_never_sees_it(index: MemoryIndex) -> None:
    store = SqliteSessionStore(index.db)
    session = store.current(ANNA)
    say(store, session, (FACT, "Got it."))
    index_transcript(index, session, store.events(session.id))

    assert transcript_hits(index, QUERY, ["", BEN.memory_scope]) == []
    assert transcript_hits(index, QUERY, ["", FAMILY.memory_scope]) == []
    assert transcript_hits(index, QUERY, [""]) == []
    assert transcript_hits(index, "4471", ["", FAMILY.memory_scope]) == []


def test_group_chat_transcripts_stay_in_the_group(index: MemoryIndex) -> None:
    store = SqliteSessionStore(index.db)
    session = store.current(FAMILY)
    say(store, session, ("Grandma's birthday dinner is at Luigi's trattoria.", "Noted!"))
    index_transcript(index, session, store.events(session.id))
    assert transcript_hits(index, "birthday dinner trattoria", ["", FAMILY.memory_scope])
    assert transcript_hits(index, "birthday dinner trattoria", ["", ANNA.memory_scope]) == []


def test_recalled_context_is_not_indexed(index: MemoryIndex) -> None:
    store = SqliteSessionStore(index.db)
    session = store.current(ANNA)
    say(store, session, (FACT, "Got it."))
    index_transcript(index, session, store.events(session.id))
    assert all(
        "RECALLED" not in text for *_, text, _ in chunks_of(index, transcript_path(session.id))
    )


def test_transcripts_survive_a_full_rebuild(index: MemoryIndex) -> None:
    store = SqliteSessionStore(index.db)
    session = store.current(ANNA)
    say(store, session, (FACT, "Got it."))
    index_transcript(index, session, store.events(session.id))
    before = chunks_of(index, transcript_path(session.id))

    report = index.sync(force=True)
    assert report.rebuilt
    assert chunks_of(index, transcript_path(session.id)) == before
    assert transcript_hits(index, QUERY, ["", ANNA.memory_scope]) == [transcript_path(session.id)]
    assert transcript_hits(index, QUERY, ["", BEN.memory_scope]) == []


def test_a_new_chunk_size_rechunks_transcripts_from_the_source(
    use_model: None, make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws, use_config())
    store = SqliteSessionStore(idx.db)
    session = store.current(ANNA)
    say(store, session, *[(f"Turn {i}: {FACT}", f"Reply {i}, noted.") for i in range(6)])
    index_transcript(idx, session, store.events(session.id))
    assert len(chunks_of(idx, transcript_path(session.id))) == 1
    idx.close()

    smaller = make_index(ws, use_config(chunking=ChunkingConfig(tokens=100, overlap=20)))
    assert smaller.sync().rebuilt  # identity changed: a rebuild, which replays the transcript
    chunks = chunks_of(smaller, transcript_path(session.id))
    assert len(chunks) >= 2
    assert all(estimate_tokens(text) <= 100 for _, _, text, _ in chunks)
    assert transcript_hits(smaller, QUERY, ["", ANNA.memory_scope])


@pytest.fixture
def small_chunks(
    use_model: None, make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> MemoryIndex:
    """An index with 64-token chunks, so a short conversation fills several."""
    config = use_config(chunking=ChunkingConfig(tokens=64, overlap=16))
    return make_index(make_workspace(FILES), config)


def test_incremental_indexing_does_not_duplicate(small_chunks: MemoryIndex) -> None:
    idx = small_chunks
    store = SqliteSessionStore(idx.db)
    session = store.current(ANNA)
    for i in range(8):  # indexed after every turn, as a live conversation would be
        say(store, session, (f"Question {i} about the shed roof?", f"Answer {i}: use felt."))
        index_transcript(idx, session, store.events(session.id))
    index_transcript(idx, session, store.events(session.id))  # nothing new: no change

    chunks = chunks_of(idx, transcript_path(session.id))
    lines = [line for _, _, text, _ in chunks for line in text.split("\n")]
    assert [line.split("]")[0] for line in lines] == [f"[{n}" for n in range(1, 17)]
    assert 3 <= len(chunks) <= 6  # ≈64-token chunks, not one per turn and not one for all
    assert all(estimate_tokens(text) <= 64 for _, _, text, _ in chunks)
    spans = [(s, e) for s, e, _, _ in chunks]
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))
    (generation,) = idx.db.execute("SELECT id FROM memory_generations WHERE state = 'active'")[0]
    vectors = idx.db.execute(f"SELECT count(*) FROM memory_vec_g{generation}")[0][0]
    with idx.db.lock:
        assert vectors == passage_count(idx.db.conn)


def test_a_caller_passing_only_new_events_leaves_no_gap(index: MemoryIndex) -> None:
    store = SqliteSessionStore(index.db)
    session = store.current(ANNA)
    say(store, session, (FACT, "Got it."), ("And the shed?", "Felt roof."), ("Later", "Yes"))
    index_transcript(index, session, store.events(session.id, after_seq=3)[:1])
    texts = "\n".join(t for _, _, t, _ in chunks_of(index, transcript_path(session.id)))
    assert "[1] User: My locker" in texts and "[4] Assistant: Felt roof." in texts
    assert "[5]" not in texts  # nothing after the caller's last event (compaction's cut)


def test_sync_leaves_transcript_chunks_alone(index: MemoryIndex) -> None:
    store = SqliteSessionStore(index.db)
    session = store.current(ANNA)
    say(store, session, (FACT, "Got it."))
    index_transcript(index, session, store.events(session.id))
    path = transcript_path(session.id)
    ids = index.db.execute("SELECT id FROM memory_chunks WHERE path = ?", (path,))

    (index.workspace / "memory/2026-01-10.md").write_text("# 2026-01-10\n\nWent hiking.\n")
    (index.workspace / "MEMORY.md").unlink()
    report = index.sync()
    assert report.files_removed == ["MEMORY.md"] and not report.rebuilt
    assert index.db.execute("SELECT id FROM memory_chunks WHERE path = ?", (path,)) == ids
    assert transcript_hits(index, QUERY, ["", ANNA.memory_scope]) == [path]


def test_long_messages_are_split_into_several_chunks(small_chunks: MemoryIndex) -> None:
    store = SqliteSessionStore(small_chunks.db)
    session = store.current(ANNA)
    essay = " ".join(f"Paragraph {i} of my travel diary about Kyoto temples." for i in range(15))
    say(store, session, (essay, "What a trip."), ("Short follow-up.", "Sure."))
    index_transcript(small_chunks, session, store.events(session.id))
    index_transcript(small_chunks, session, store.events(session.id))
    chunks = chunks_of(small_chunks, transcript_path(session.id))
    assert len(chunks) >= 4
    assert all(estimate_tokens(text) <= 64 for _, _, text, _ in chunks)
    assert chunks[0][:2] == (1, 1) and chunks[-1][1] == 4
    assert chunks[1][2].startswith("[1] User (cont.): ")
    assert len({text for _, _, text, _ in chunks}) == len(chunks)


def test_tool_results_are_untrusted_and_memory_tool_results_skipped(index: MemoryIndex) -> None:
    store = SqliteSessionStore(index.db)
    session = store.current(ANNA)
    store.append(session.id, "user", {"text": "Look up the ferry times, and what I said before."})
    store.append(session.id, "tool_call", {"id": "a", "name": "web_fetch", "input": {"u": "x"}})
    store.append(session.id, "tool_result", {"tool_use_id": "a", "content": "Ferry 9:15 " * 200})
    store.append(session.id, "tool_call", {"id": "b", "name": "memory_search", "input": {}})
    store.append(session.id, "tool_result", {"tool_use_id": "b", "content": "MEMORY-ECHO"})
    store.append(
        session.id, "tool_result", {"tool_use_id": "c", "content": "boom", "is_error": True}
    )
    store.append(session.id, "assistant", {"text": "The first ferry leaves at 9:15."})
    index_transcript(index, session, store.events(session.id))

    chunks = chunks_of(index, transcript_path(session.id))
    assert [(s, e, origin) for s, e, _, origin in chunks] == [
        (1, 1, "system"),
        (3, 7, "untrusted"),  # the reply after a fetched page may repeat it: packed with it
    ]
    tool_text, reply = chunks[1][2].split("\n")
    assert tool_text.startswith("[3] Tool result (web_fetch): Ferry 9:15")
    assert len(tool_text) < 560 and reply.startswith("[7] Assistant:")
    assert "MEMORY-ECHO" not in "".join(t for _, _, t, _ in chunks)


def test_keyword_only_index_finds_transcripts_too(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES), keyword_config())
    store = SqliteSessionStore(idx.db)
    session = store.current(ANNA)
    say(store, session, (FACT, "Got it."))
    index_transcript(idx, session, store.events(session.id))  # first use builds the index
    assert transcript_hits(idx, QUERY, ["", ANNA.memory_scope]) == [transcript_path(session.id)]
    assert transcript_hits(idx, QUERY, ["", BEN.memory_scope]) == []


def test_archived_sessions_stay_searchable(index: MemoryIndex) -> None:
    store = SqliteSessionStore(index.db)
    old = store.current(ANNA)
    say(store, old, (FACT, "Got it."))
    index_transcript(index, old, store.events(old.id))
    store.reset(ANNA)
    index.sync(force=True)
    assert transcript_hits(index, QUERY, ["", ANNA.memory_scope]) == [transcript_path(old.id)]


def test_delete_virtual_forgets_a_conversation(index: MemoryIndex) -> None:
    store = SqliteSessionStore(index.db)
    session = store.current(ANNA)
    say(store, session, (FACT, "Got it."))
    index_transcript(index, session, store.events(session.id))
    assert index.delete_virtual(transcript_path(session.id)) == 1
    assert transcript_hits(index, QUERY, ["", ANNA.memory_scope]) == []


# ---- reading ----------------------------------------------------------------------------------


def test_read_transcript_returns_numbered_lines(tmp_path: Path) -> None:
    from memory.store.db import open_database

    db = open_database(tmp_path / "agent.sqlite")
    store = SqliteSessionStore(db)
    session = store.current(ANNA)
    say(store, session, ("Hello there", "Hi!"), ("Second", "Two"))
    store.append(session.id, "tool_call", {"id": "x", "name": "current_time", "input": {}})
    store.append(session.id, "tool_result", {"tool_use_id": "x", "content": "12:00"})

    assert read_transcript(store, session.id, 2, 3) == (
        "[2] Assistant: Hi!\n[3] User: Second\n[4] Assistant: Two"
    )
    tail = read_transcript(store, transcript_path(session.id), 5, 10)
    assert tail == "[5] Tool call: current_time {}\n[6] Tool result: 12:00"
    assert "has 6 events" in read_transcript(store, session.id, 50, 5)
    assert read_transcript(store, session.id, 1, 1, scope=ANNA.memory_scope).startswith("[1]")
    with pytest.raises(SessionError):
        read_transcript(store, session.id, 1, 5, scope=FAMILY.memory_scope)
    with pytest.raises(SessionError):
        read_transcript(store, "f" * 32, 1, 5)
    assert session_id_from_path(transcript_path(session.id)) == session.id
    assert session_id_from_path("memory/2026-01-10.md") is None
    db.close()
