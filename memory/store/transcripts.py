"""Lossless compaction: conversations stay searchable after compaction summarises them away.

A session's user and assistant messages (and shortened results of tools that fetch outside
content) become chunks of the memory index under the virtual path `sessions/<session id>`, with
the event seq range as their line range and the conversation's scope, so a search from one chat
never returns another chat's words. Chunks are ≈ the index's chunk size, lines such as
"[12] User: …"; indexing is incremental and re-packs the last chunk so a turn-by-turn caller
still gets full-size chunks. The transcript table is the source of truth: a full rebuild of the
index replays every transcript into the new generation (`replay_transcripts`).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from common.text import shorten
from memory.errors import SessionError
from memory.index.chunking import chunk_markdown
from memory.index.index import MemoryIndex, VirtualChunk
from memory.store.lineage import OUTSIDE_CONTENT_TOOLS, LineageStore
from memory.store.sessions import Session, SessionStore, TranscriptEvent
from memory.text import estimate_tokens

TRANSCRIPT_SOURCE = "sessions"
TOOL_RESULT_CHARS = 500
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
READ_MAX_EVENTS = 200
UNTRUSTED_LEFT_OUT = "[untrusted content left out]"
READ_MAX_CHARS = 20_000
_LABELS = {
    "user": "User",
    "assistant": "Assistant",
    "tool_call": "Tool call",
    "tool_result": "Tool result",
    "compaction": "Compaction summary",
    "command": "Command",
    "flush": "Memory flush",
}
_index_lock = threading.Lock()  # one incremental indexer at a time (tail re-packing)


def transcript_path(session_id: str) -> str:
    """The virtual path of a session's transcript chunks in search hits."""
    return f"{TRANSCRIPT_SOURCE}/{session_id}"


def session_id_from_path(path: str) -> str | None:
    """The session id of a transcript hit's path ("sessions/<id>"), None for other paths."""
    prefix = f"{TRANSCRIPT_SOURCE}/"
    if not path.startswith(prefix):
        return None
    return path[len(prefix) :] or None


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


# ---- indexing -------------------------------------------------------------------------------


def index_transcript(
    index: MemoryIndex, session: Session, events: Sequence[TranscriptEvent]
) -> None:
    """Put the session's not-yet-indexed events into the index's active generation.

    `events` may be all of the session's events or just the latest; anything missing between
    what is indexed and them is read from the transcript table, and nothing after the last of
    them is indexed (compaction indexes only what it summarised). Blocks (embedding, SQLite).
    """
    scope = session.key.memory_scope
    if not scope:  # cannot happen with a valid SessionKey; never index into shared memory
        raise SessionError(f"Session {session.id} has no memory scope; not indexing it.")
    if LineageStore(index.db).is_forgotten(session.id):
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
        store = SessionStore(index.db)
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


def replay_transcripts(index: MemoryIndex, generation: int) -> None:
    """Index every stored transcript into `generation` (a rebuild hook of MemoryIndex)."""
    store = SessionStore(index.db)
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


def _budget(index: MemoryIndex) -> int:
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
            tainted or str(e.content.get("name")) in OUTSIDE_CONTENT_TOOLS
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
        if event.kind == "user":
            tainted = False
        elif event.kind == "tool_call" and str(c.get("name")) in OUTSIDE_CONTENT_TOOLS:
            tainted = True
        if event.kind in ("user", "assistant"):
            text, origin = _text_of(c.get("text")).strip(), "system"
            label = _LABELS[event.kind]
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
            text, origin = _shorten(_text_of(c.get("content")), TOOL_RESULT_CHARS), "untrusted"
            label = f"Tool result ({name})" if name else "Tool result"
        else:
            continue
        if not text:
            continue
        line = f"[{event.seq}] {label}: {text}"
        if estimate_tokens(line) < budget:
            out.append(_Entry(event.seq, event.seq, line, origin, day))
            continue
        pieces = chunk_markdown(text, tokens=budget - 16, overlap=budget // 8)
        for i, piece in enumerate(pieces):
            more = "" if i == 0 else " (cont.)"
            out.append(
                _Entry(
                    event.seq, event.seq, f"[{event.seq}] {label}{more}: {piece.text}", origin, day
                )
            )
    return out


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


def _text_of(value: Any) -> str:
    """Text of a message body: a string, or a list of content blocks with "text"."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(
            str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in value
        ).strip()
    return str(value)


def _shorten(text: str, limit: int) -> str:
    return shorten(" ".join(text.split()), limit)


# ---- reading --------------------------------------------------------------------------------


def read_transcript(
    store: SessionStore,
    session_id: str,
    from_seq: int,
    count: int,
    *,
    scope: str | None = None,
    trusted_only: bool = False,
) -> str:
    """`count` events of a session from `from_seq` on, as "[seq] Role: text" lines.

    `session_id` may be a transcript hit's path ("sessions/<id>"). With `scope`, only a
    conversation of that memory scope can be read (a group chat never reads a private one).
    With `trusted_only` (deep recall), what may hold outside text is shown as
    UNTRUSTED_LEFT_OUT instead (`untrusted_seqs`).
    """
    sid = session_id_from_path(session_id) or session_id
    session = store.get(sid)
    if session is None or (scope is not None and session.key.memory_scope != scope):
        raise SessionError(
            f"No conversation {sid!r} here. Use the id from a memory_search hit whose path is "
            "sessions/<id>."
        )
    start = max(1, from_seq)
    count = max(1, min(count, READ_MAX_EVENTS))
    events = store.events(sid, after_seq=start - 1, limit=count)
    if not events:
        last = store.events(sid, after_seq=0)
        return f"(no events from {start} on; this conversation has {len(last)} events)"
    left_out = untrusted_seqs(store.events(sid)) if trusted_only else set()
    lines = [_render(e, e.seq in left_out) for e in events]
    text = "\n".join(lines)
    if len(text) > READ_MAX_CHARS:
        text = text[:READ_MAX_CHARS] + f"\n… [truncated at {READ_MAX_CHARS} characters; read fewer]"
    return text


def untrusted_seqs(events: Sequence[TranscriptEvent]) -> set[int]:
    """The seqs of the events (a session's, from its first) that may hold outside text: other
    people's messages, every tool result (memory reads quote untrusted hits too), what the
    assistant said or called after a fetched page until the next user message, and compaction
    summaries and memory flushes once a page was fetched (they may repeat it)."""
    found: set[int] = set()
    tainted = fetched = False
    for e in events:
        c = e.content
        if e.kind == "user":
            tainted = False
            sender = c.get("sender")
            if isinstance(sender, dict) and sender.get("kind") == "person":
                found.add(e.seq)
        elif (
            e.kind == "tool_result"
            or (e.kind in ("assistant", "tool_call") and tainted)
            or (e.kind in ("compaction", "flush") and fetched)
        ):
            found.add(e.seq)
        if e.kind == "tool_call" and str(c.get("name")) in OUTSIDE_CONTENT_TOOLS:
            tainted = fetched = True
    return found


def _render(event: TranscriptEvent, left_out: bool = False) -> str:
    c = event.content
    label = _LABELS.get(event.kind, event.kind)
    if left_out:
        return f"[{event.seq}] {label}: {UNTRUSTED_LEFT_OUT}"
    if event.kind in ("user", "assistant", "command"):
        body = _text_of(c.get("text"))
    elif event.kind == "tool_call":
        args = json.dumps(c.get("input") or {}, ensure_ascii=False)
        body = f"{c.get('name', '?')} {_shorten(args, 300)}"
    elif event.kind == "tool_result":
        body = _shorten(_text_of(c.get("content")), TOOL_RESULT_CHARS)
        if c.get("is_error"):
            label += " (error)"
    elif event.kind == "compaction":
        body = _shorten(_text_of(c.get("summary")), TOOL_RESULT_CHARS)
    else:
        body = _shorten(_text_of(c.get("text")) or json.dumps(c, ensure_ascii=False), 300)
    return f"[{event.seq}] {label}: {body}"
