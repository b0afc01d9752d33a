"""A fact said once in a long conversation is found by a question that shares no word with it.

Conversation chunks hold many turns; each turn (or a few short ones) is its own passage with its
own vector, as a memory file's paragraphs are, so one fact line is not averaged away by the
filler around it. Real SQLite, the real local e5 model (the default provider).
"""

from __future__ import annotations

import pytest

from memory.embeddings.providers import create_provider
from memory.index.index import MemoryIndex
from memory.index.transcript_indexer import index_transcript
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.store.passage_pack import spans_of
from memory.store.search_queries import search_queries
from memory.store.sessions import SessionKey, SqliteSessionStore
from memory.store.transcripts import transcript_path
from tests.conftest import IndexFactory, WorkspaceFactory

ANNA = SessionKey("main", "telegram", "direct", "111")
FACT = "My locker code at the gym is 4471"
PARAPHRASE = "Which digits open the cabinet where I stash things while working out?"
TOPICS = (
    "learning Italian",
    "the broken dishwasher",
    "my reading list",
    "the neighbourhood summer party",
    "switching electricity providers",
    "a colleague's farewell gift",
    "the kids' screen time",
    "cleaning out the basement",
    "a new desk chair",
    "meal prep for the week",
    "the balcony tomatoes",
    "my sleep schedule",
)


@pytest.fixture(scope="module")
def local_model() -> None:
    create_provider(EmbeddingConfig(provider="local"))  # loaded once per process


@pytest.fixture
def index(
    local_model: None, make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> MemoryIndex:
    config = MemoryConfig(embedding=EmbeddingConfig(provider="local"))
    idx = make_index(make_workspace({"MEMORY.md": "# Memory\n"}), config)
    idx.sync()
    return idx


def _conversation(index: MemoryIndex) -> str:
    """Filler turns about other topics with the fact said once in the middle; one chunk."""
    store = SqliteSessionStore(index.db)
    session = store.current(ANNA)
    for topic in TOPICS:
        store.append(session.id, "user", {"text": f"Can you help me think through {topic}?"})
        store.append(
            session.id,
            "assistant",
            {
                "text": "Start with the smallest step you can finish today, so the rest feels "
                "lighter, and block a fixed time slot in your calendar for it."
            },
        )
    # Said last: past the first 1,000 characters of its chunk, where a snippet of the chunk's
    # head would end.
    store.append(session.id, "user", {"text": f"By the way: {FACT}."})
    store.append(session.id, "assistant", {"text": "Noted."})
    index_transcript(index, session, store.events(session.id))
    return transcript_path(session.id)


def test_a_conversation_chunk_has_one_passage_vector_per_turn(index: MemoryIndex) -> None:
    path = _conversation(index)
    chunks = index.db.execute(
        "SELECT id FROM memory_chunks WHERE path = ? AND text LIKE ?", (path, f"%{FACT}%")
    )
    (packed,) = index.db.execute(
        "SELECT spans FROM memory_passages WHERE chunk_id = ?", (chunks[0][0],)
    )[0]
    units = spans_of(packed).tolist()
    # Short turns are grouped (a question with its answer), never the whole chunk in one.
    assert len(units) >= 4
    # Each has its vector (stored once, in the embedding cache).
    found = search_queries(index.db).passage_vectors([chunks[0][0]])
    assert found is not None and len(found.spans) == len(units)


def test_a_paraphrase_finds_the_one_fact_line_in_a_long_conversation_chunk(
    index: MemoryIndex,
) -> None:
    path = _conversation(index)
    hits = index.search(PARAPHRASE, scopes=["", ANNA.memory_scope])
    found = [h for h in hits if h.path == path]
    assert found, "the conversation was not found by the paraphrase"
    assert FACT in found[0].snippet  # the line the paraphrase means, not the chunk's head
