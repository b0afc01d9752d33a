"""Reading stored transcripts: a session's events as "[seq] Role: text" lines, the virtual path
of its chunks in search hits (`sessions/<session id>`), and which events may hold outside text.

The transcript table (memory/store/sessions.py) is the source of truth for conversations; how
they become searchable chunks of the memory index is memory/index/transcript_indexer.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from common.text import shorten
from memory.errors import SessionError
from memory.store.lineage import is_outside_content_tool
from memory.store.sessions import SessionStore, TranscriptEvent

TRANSCRIPT_SOURCE = "sessions"  # the source of transcript chunks in the memory index
TOOL_RESULT_CHARS = 500  # a tool result is cut to this, read back and indexed alike
READ_MAX_EVENTS = 200
UNTRUSTED_LEFT_OUT = "[untrusted content left out]"
READ_MAX_CHARS = 20_000
EVENT_LABELS = {
    "user": "User",
    "assistant": "Assistant",
    "tool_call": "Tool call",
    "tool_result": "Tool result",
    "compaction": "Compaction summary",
    "command": "Command",
    "flush": "Memory flush",
}


def transcript_path(session_id: str) -> str:
    """The virtual path of a session's transcript chunks in search hits."""
    return f"{TRANSCRIPT_SOURCE}/{session_id}"


def session_id_from_path(path: str) -> str | None:
    """The session id of a transcript hit's path ("sessions/<id>"), None for other paths."""
    prefix = f"{TRANSCRIPT_SOURCE}/"
    if not path.startswith(prefix):
        return None
    return path[len(prefix) :] or None


def message_text(value: Any) -> str:
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


def one_line(text: str, limit: int) -> str:
    """The text on one line (runs of whitespace become one space), at most `limit` characters."""
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
        if e.kind == "tool_call" and is_outside_content_tool(str(c.get("name"))):
            tainted = fetched = True
    return found


def _render(event: TranscriptEvent, left_out: bool = False) -> str:
    c = event.content
    label = EVENT_LABELS.get(event.kind, event.kind)
    if left_out:
        return f"[{event.seq}] {label}: {UNTRUSTED_LEFT_OUT}"
    if event.kind in ("user", "assistant", "command"):
        body = message_text(c.get("text"))
    elif event.kind == "tool_call":
        args = json.dumps(c.get("input") or {}, ensure_ascii=False)
        body = f"{c.get('name', '?')} {one_line(args, 300)}"
    elif event.kind == "tool_result":
        body = one_line(message_text(c.get("content")), TOOL_RESULT_CHARS)
        if c.get("is_error"):
            label += " (error)"
    elif event.kind == "compaction":
        body = one_line(message_text(c.get("summary")), TOOL_RESULT_CHARS)
    else:
        body = one_line(message_text(c.get("text")) or json.dumps(c, ensure_ascii=False), 300)
    return f"[{event.seq}] {label}: {body}"
