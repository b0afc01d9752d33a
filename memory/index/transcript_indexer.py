"""Lossless compaction: conversations stay searchable after compaction summarises them away.

A session's user and assistant messages (and shortened results of tools that fetch outside
content) become chunks of the memory index under the virtual path `sessions/<session id>`, with
the event seq range as their line range and the conversation's scope, so a search from one chat
never returns another chat's words. Chunks are ≈ the index's chunk size, lines such as
"[12] User: …"; indexing is incremental and re-packs the last chunk so a turn-by-turn caller
still gets full-size chunks. The transcript table (memory/store/sessions.py) is the source of
truth: a full rebuild of the index replays every transcript into the new generation
(`replay_transcripts`, a rebuild hook of MemoryIndex).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from memory.errors import SessionError
from memory.index.chunking import chunk_markdown
from memory.index.virtual import VirtualChunk
from memory.memory_config import MemoryConfig
from memory.store.backends import store_for
from memory.store.db import Database
from memory.store.lineage import is_outside_content_tool
from memory.store.sessions import Session, SessionStore, TranscriptEvent
from memory.store.transcripts import (
    EVENT_LABELS,
    TOOL_RESULT_CHARS,
    TRANSCRIPT_SOURCE,
    message_text,
    one_line,
    transcript_path,
)
from memory.text import estimate_tokens

# Results of these tools are memory already (or nothing worth finding): indexing them would
# echo memory back into search as transcript copies.
UNINDEXED_TOOLS = frozenset(
    {
        "memory_search",
        "memory_get",
        "transcript_read",
        "read_file",
        "memory_append",
        "remember",
        "current_time",
    }
)
_index_lock = threading.Lock()  # one incremental indexer at a time (tail re-packing)


class TranscriptIndex(Protocol):
    """What the transcript indexer needs of the memory index (MemoryIndex has it)."""

    @property
    def db(self) -> Database: ...

    @property
    def config(self) -> MemoryConfig: ...

    def active_generation(self) -> tuple[int, dict[str, Any]] | None: ...

    def sync(self) -> Any: ...

    def virtual_tail(self, path: str, *, generation: int | None = None) -> list[VirtualChunk]: ...

    def add_virtual_chunks(
        self,
        path: str,
        source: str,
        scope: str,
        chunks: Sequence[VirtualChunk],
        *,
        replace_from_line: int | None = None,
        generation: int | None = None,
    ) -> int: ...


@dataclass(frozen=True)
class _Entry:
    start: int
    end: int
    text: str
    origin: str
    day: str | None

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text) + 1  # +1 for the newline joining entries


def index_transcript(
    index: TranscriptIndex, session: Session, events: Sequence[TranscriptEvent]
) -> None:
    """Put the session's not-yet-indexed events into the index's active generation.

    `events` may be all of the session's events or just the latest; anything missing between
    what is indexed and them is read from the transcript table, and nothing after the last of
    them is indexed (compaction indexes only what it summarised). Blocks (embedding, SQLite).
    """
    scope = session.key.memory_scope
    if not scope:  # cannot happen with a valid SessionKey; never index into shared memory
        raise SessionError(f"Session {session.id} has no memory scope; not indexing it.")
    if store_for("LineageRepository", index.db).is_forgotten(session.id):
        return  # `pinch memory forget` removed it; a late /new or compaction must not restore it
    with _index_lock:
        if index.active_generation() is None:
            index.sync()  # the first build replays every stored transcript, this one included
        active = index.active_generation()
        if active is None:
            return
        generation = active[0]
        path = transcript_path(session.id)
        tail = index.virtual_tail(path, generation=generation)
        watermark = max((c.end_line for c in tail), default=0)
        new = sorted((e for e in events if e.seq > watermark), key=lambda e: e.seq)
        if not new:
            return
        store = store_for("SessionStore", index.db)
        seqs = [watermark, *(e.seq for e in new)]
        if any(b != a + 1 for a, b in itertools.pairwise(seqs)):
            last = new[-1].seq  # the caller may index only up to a point (compaction)
            new = [e for e in store.events(session.id, after_seq=watermark) if e.seq <= last]
        names = _tool_names(store, session.id, new)
        entries = _entries(new, names, _budget(index), _tainted_before(store, session.id, new))
        if not entries:
            return
        kept = [_Entry(c.start_line, c.end_line, c.text, c.origin, c.day) for c in tail]
        index.add_virtual_chunks(
            path,
            TRANSCRIPT_SOURCE,
            scope,
            _pack([*kept, *entries], _budget(index)),
            replace_from_line=tail[0].start_line if tail else None,
            generation=generation,
        )


def replay_transcripts(index: TranscriptIndex, generation: int) -> None:
    """Index every stored transcript into `generation` (a rebuild hook of MemoryIndex)."""
    store = store_for("SessionStore", index.db)
    budget = _budget(index)
    for session in store.all_sessions():
        events = store.events(session.id)
        entries = _entries(events, _tool_names(store, session.id, events), budget)
        if entries:
            index.add_virtual_chunks(
                transcript_path(session.id),
                TRANSCRIPT_SOURCE,
                session.key.memory_scope,
                _pack(entries, budget),
                generation=generation,
            )


def _budget(index: TranscriptIndex) -> int:
    return index.config.chunking.tokens


def _tool_names(
    store: SessionStore, session_id: str, events: Sequence[TranscriptEvent]
) -> dict[str, str]:
    """tool_use_id → tool name for the results among `events` (calls may be older)."""
    names = {
        str(e.content.get("id")): str(e.content.get("name"))
        for e in events
        if e.kind == "tool_call"
    }
    wanted = {
        str(e.content.get("tool_use_id"))
        for e in events
        if e.kind == "tool_result" and not e.content.get("name")
    }
    if wanted - names.keys():
        for e in store.events(session_id, kinds=("tool_call",)):
            names.setdefault(str(e.content.get("id")), str(e.content.get("name")))
    return names


def _tainted_before(
    store: SessionStore, session_id: str, events: Sequence[TranscriptEvent]
) -> bool:
    """Whether the turn `events` start in had already read outside content."""
    if not events:
        return False
    earlier = [
        e for e in store.events(session_id, kinds=("user", "tool_call")) if e.seq < events[0].seq
    ]
    tainted = False
    for e in earlier:
        tainted = e.kind != "user" and (
            tainted or is_outside_content_tool(str(e.content.get("name")))
        )
    return tainted


def _entries(
    events: Iterable[TranscriptEvent],
    tool_names: dict[str, str],
    budget: int,
    tainted: bool = False,
) -> list[_Entry]:
    """Searchable lines of the events; one over-long message becomes several entries.

    `tainted`: the first event is in a turn that already read outside content."""
    out: list[_Entry] = []
    for event in events:
        day = datetime.fromtimestamp(event.created_at).date().isoformat()
        c = event.content
        documents = _documents(c) if event.kind == "user" else []
        if event.kind == "user":
            tainted = bool(documents)  # a document's text came in with the message
        elif event.kind == "tool_call" and is_outside_content_tool(str(c.get("name"))):
            tainted = True
        if event.kind in ("user", "assistant"):
            text, origin = message_text(c.get("text")).strip(), "system"
            label = EVENT_LABELS[event.kind]
            sender = c.get("sender") if event.kind == "user" else None
            if isinstance(sender, dict) and sender.get("kind") == "person":
                origin = "untrusted"  # another person's words: findable, never trusted
            if event.kind == "assistant" and tainted:
                origin = "untrusted"  # may repeat the page it just read
        elif event.kind == "tool_result" and not c.get("is_error"):
            name = str(c.get("name") or tool_names.get(str(c.get("tool_use_id")), ""))
            if name in UNINDEXED_TOOLS:
                continue
            # Outside content (web pages, other systems): findable, never trusted.
            text, origin = one_line(message_text(c.get("content")), TOOL_RESULT_CHARS), "untrusted"
            label = f"Tool result ({name})" if name else "Tool result"
        else:
            continue
        out += _split(event.seq, label, text, origin, day, budget)
        for name, body in documents:  # findable, never trusted
            out += _split(event.seq, f"Document ({name})", body, "untrusted", day, budget)
    return out


def _documents(content: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, text) of the documents read with a user message (agent/media stores them)."""
    found = []
    for a in content.get("attachments") or ():
        doc = a.get("document") if isinstance(a, dict) else None
        if isinstance(doc, dict) and doc.get("text"):
            found.append((one_line(str(a.get("name") or a.get("path")), 80), str(doc["text"])))
    return found


def _split(seq: int, label: str, text: str, origin: str, day: str, budget: int) -> list[_Entry]:
    """`text` as one entry, or as several when it is longer than `budget` tokens."""
    if not text:
        return []
    line = f"[{seq}] {label}: {text}"
    if estimate_tokens(line) < budget:
        return [_Entry(seq, seq, line, origin, day)]
    pieces = chunk_markdown(text, tokens=budget - 16, overlap=budget // 8)
    return [
        _Entry(seq, seq, f"[{seq}] {label}{'' if i == 0 else ' (cont.)'}: {p.text}", origin, day)
        for i, p in enumerate(pieces)
    ]


def _pack(entries: Sequence[_Entry], budget: int) -> list[VirtualChunk]:
    """Consecutive entries of one origin grouped into chunks of at most ≈`budget` tokens."""
    chunks: list[VirtualChunk] = []
    group: list[_Entry] = []
    size = 0

    def flush() -> None:
        if group:
            text = "\n".join(e.text for e in group)
            chunks.append(
                VirtualChunk(group[0].start, group[-1].end, text, group[0].origin, group[0].day)
            )

    for entry in entries:
        if group and (entry.origin != group[0].origin or size + entry.tokens > budget):
            flush()
            group, size = [], 0
        group.append(entry)
        size += entry.tokens
    flush()
    return chunks
