"""Provenance and lineage: where each line of memory came from, and which session wrote it.

Origin classes, most trusted first: `owner` (files the owner wrote, the owner's messages) >
`agent` (what the assistant wrote on the owner's behalf) > `system` (what the program wrote,
automation turns) > `untrusted` (anything from outside: fetched pages, forwarded content, other
people's messages). Mixed text counts as its lowest origin.

Inline markers. Every entry the agent appends to a Markdown file ends with a marker the
*program* writes after escaping the agent's text (agent text can never contain `<!--`):

    - Booked the ferry for Friday. <!-- origin: agent · session: 3f2a… -->

Only a marker in exactly this form, at the end of a line, is trusted (`MARKER`). The marker
covers its entry: the lines from just after the previous blank line, heading or marker line
down to the marker's line. Lines outside any entry take the file's default origin
(workspace.default_origin). Editing other lines never moves a marker off its entry. A memory
file counts as its lowest line (`file_origin`), and so does each of its chunks.

Lineage table (agent database, own migration list, `apply_lineage_migrations`): one row per thing
a session caused — `session_note`, `daily_entry`, and kinds other parts add (`recall_signal`,
`dream_candidate`, `preimage`: give `ref` your own row id and `pinch memory forget` lists and
removes the lineage rows; call `is_forgotten()` before promoting anything). Recall signals and
Dreaming's promotions need no rows: forget finds them by path and line
(memory/lifecycle/forget_dreams.py).
Tombstones record forgotten sessions so re-indexing and Dreaming never bring them back: their
marked entries are blanked, and a session note whose header names one (a copy restored from a
backup) is read as empty, unless `forget` kept that file (`Tombstones`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from memory.store.backends import store_for
from memory.store.content_hash import hash_text
from memory.store.db import Database

TRUST_ORDER = ("owner", "agent", "system", "untrusted")  # most trusted first
_RANK = {name: i for i, name in enumerate(TRUST_ORDER)}
# The one trusted form: "<!-- origin: CLASS · session: ID -->" at the very end of a line.
MARKER = re.compile(
    r"[ \t]?<!-- origin: (owner|agent|system|untrusted) · session: ([0-9A-Za-z_-]{1,64}) -->"
    r"[ \t]*\r?$"
)
# Tools whose results are outside content (agent/policy.py's TAINTING_TOOLS is this set): what
# the assistant says after one, until the next user message, is untrusted too. Every MCP tool
# (named SERVER__tool, agent/mcp) is outside content as well: `is_outside_content_tool`.
OUTSIDE_CONTENT_TOOLS = frozenset({"web_fetch", "mcp_call"})
MCP_SEPARATOR = "__"
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")


def is_outside_content_tool(name: str) -> bool:
    """Whether tool `name`'s results are outside content (web_fetch, every MCP tool)."""
    return name in OUTSIDE_CONTENT_TOOLS or MCP_SEPARATOR in name


def lowest(origins: Iterable[str]) -> str:
    """The least trusted of `origins` ('owner' when empty)."""
    return max(origins, key=lambda o: _RANK.get(o, len(TRUST_ORDER)), default="owner")


# The session an entry's marker names once `forget` kept it because the owner had edited it:
# no real session (their ids are hex), so the entry keeps its origin and the tombstone no longer
# blanks it when the file is indexed again.
KEPT_SESSION = "kept-by-owner"


def origin_marker(origin: str, session_id: str) -> str:
    """The marker the program appends to an entry (never built from agent text)."""
    if origin not in _RANK:
        raise ValueError(f"Unknown origin {origin!r}; expected one of {TRUST_ORDER}.")
    if not re.fullmatch(r"[0-9A-Za-z_-]{1,64}", session_id):
        raise ValueError(f"A session id is letters, digits, '-' and '_', not {session_id!r}.")
    return f"<!-- origin: {origin} · session: {session_id} -->"


@dataclass(frozen=True)
class MarkedEntry:
    """An appended entry found in a file: lines `start`..`end` (1-based), marker on `end`."""

    start: int
    end: int
    origin: str
    session_id: str


def marked_entries(text: str) -> list[MarkedEntry]:
    """Every entry of `text` closed by a trusted marker, in file order."""
    lines = text.split("\n")
    found: list[MarkedEntry] = []
    start = 0  # index of the first line after the last boundary
    for i, line in enumerate(lines):
        m = MARKER.search(line)
        if not line.strip() or (_HEADING.match(line) and not m):
            start = i + 1
            continue
        if m:
            found.append(MarkedEntry(start + 1, i + 1, m.group(1), m.group(2)))
            start = i + 1
    return found


def line_origins(text: str, default: str) -> list[str]:
    """The origin of each line of `text` (a marked entry's origin, else `default`)."""
    origins = [default] * (text.count("\n") + 1)
    for e in marked_entries(text):
        for i in range(e.start - 1, e.end):
            origins[i] = e.origin
    return origins


def file_origin(text: str, default: str) -> str:
    """The origin of a whole memory file: its lowest line origin (a file that mixes origins
    counts as its lowest, so one marked line from a web page makes all of it untrusted)."""
    return lowest(line_origins(text, default))


def redact_forgotten(text: str, forgotten: frozenset[str]) -> str:
    """`text` with the entries of forgotten sessions blanked (line numbers kept), so a restored
    backup of a log cannot bring them back into the index."""
    if not forgotten or "<!-- origin:" not in text:
        return text
    lines = text.split("\n")
    for e in marked_entries(text):
        if e.session_id in forgotten:
            for i in range(e.start - 1, e.end):
                lines[i] = ""
    return "\n".join(lines)


def note_session(text: str) -> str | None:
    """The session a session note's header names (`<!-- session: ID | … -->`, line 2 as /new
    writes it; any of the first three lines), None for any other text."""
    for line in text.split("\n", 3)[:3]:
        m = _NOTE_HEADER.match(line)
        if m:
            return m.group(1)
    return None


_NOTE_HEADER = re.compile(r"<!-- session: ([0-9A-Za-z_-]{1,64}) \|")


@dataclass(frozen=True)
class Tombstones:
    """The forgotten sessions, as re-indexing and Dreaming must honour them."""

    sessions: frozenset[str] = frozenset()
    kept_notes: frozenset[str] = frozenset()  # notes `forget` kept (edited by hand): the owner's

    def forgotten_note(self, path: str, text: str) -> str | None:
        """The forgotten session whose note `text` is by its header (a copy restored from a
        backup), unless `forget` kept this file; None otherwise."""
        sid = note_session(text)
        return sid if sid in self.sessions and path not in self.kept_notes else None

    def redact(self, path: str, text: str) -> str:
        """`text` without what forgotten sessions wrote (line numbers kept): all of it for a
        forgotten session's note, else their marked entries."""
        if self.forgotten_note(path, text):
            return "\n" * text.count("\n")
        return redact_forgotten(text, self.sessions)


def strip_marker(line: str) -> str:
    """`line` without its trailing trusted marker."""
    m = MARKER.search(line)
    return line[: m.start()] if m else line


# ---- the lineage tables ----------------------------------------------------------------------


def _l001_lineage(conn: Any) -> None:
    conn.execute(
        """
        CREATE TABLE lineage (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL,   -- the session that caused it
            kind TEXT NOT NULL,         -- session_note | daily_entry | recall_signal | ...
            path TEXT,                  -- workspace path, when it lives in a file
            ref TEXT,                   -- the owning table's row id, when it lives in the DB
            detail TEXT NOT NULL,       -- JSON: e.g. {"hash", "lines", "origin"}
            created_at REAL NOT NULL
        )
        """
    )
    conn.execute("CREATE INDEX lineage_by_session ON lineage (session_id, kind)")
    conn.execute(
        """
        CREATE TABLE lineage_tombstones (
            session_id TEXT PRIMARY KEY,
            session_key TEXT,
            forgotten_at REAL NOT NULL,
            summary TEXT NOT NULL       -- JSON: what was removed (counts, paths; no text)
        )
        """
    )


LINEAGE_MIGRATIONS = [_l001_lineage]


def apply_lineage_migrations(db: Database) -> list[str]:
    """Create or upgrade the lineage tables; returns the names applied now. Idempotent."""
    applied: list[str] = []
    wanted = {m.__name__.lstrip("_") for m in LINEAGE_MIGRATIONS}
    try:  # the common case, without a write transaction: everything applied already
        if wanted <= {r[0] for r in db.execute("SELECT name FROM _lineage_migrations")}:
            return applied
    except Exception as exc:  # no such table yet (driver-specific OperationalError)
        if "no such table" not in str(exc):
            raise
    with db.transaction() as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS _lineage_migrations "
            "(name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
        )
        done = {r[0] for r in conn.execute("SELECT name FROM _lineage_migrations")}
        for migration in LINEAGE_MIGRATIONS:
            name = migration.__name__.lstrip("_")
            if name in done:
                continue
            migration(conn)
            conn.execute("INSERT INTO _lineage_migrations VALUES (?, ?)", (name, time.time()))
            applied.append(name)
    return applied


@dataclass(frozen=True)
class LineageRow:
    id: int
    session_id: str
    kind: str
    path: str | None
    ref: str | None
    detail: dict[str, Any]
    created_at: float


class LineageRepository(Protocol):
    """The lineage and tombstone tables of one agent database. Every call blocks.

    Promises a second implementation must keep: `of_session` lists rows in the order they were
    recorded (ids increase, never reused); one tombstone per session id (a later one replaces
    it); `tombstones().kept_notes` are the session-note paths of forgotten sessions whose
    lineage rows were kept (the notes `forget` left to the owner)."""

    def record(
        self,
        session_id: str,
        kind: str,
        *,
        path: str | None = None,
        ref: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None: ...

    def of_session(self, session_id: str) -> list[LineageRow]: ...

    def is_forgotten(self, session_id: str) -> bool: ...

    def forgotten_sessions(self) -> frozenset[str]: ...

    def tombstone(self, session_id: str) -> tuple[float, str | None] | None: ...

    def tombstones(self) -> Tombstones: ...


class LineageStore:
    """`LineageRepository` on the agent SQLite database (tables `lineage`,
    `lineage_tombstones`). Every method blocks."""

    def __init__(self, db: Database) -> None:
        self.db = db
        apply_lineage_migrations(db)

    def record(
        self,
        session_id: str,
        kind: str,
        *,
        path: str | None = None,
        ref: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Note that `session_id` caused `kind` (at `path` in a file or row `ref`)."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO lineage(session_id, kind, path, ref, detail, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (session_id, kind, path, ref, json.dumps(detail or {}), time.time()),
            )

    def of_session(self, session_id: str) -> list[LineageRow]:
        rows = self.db.execute(
            "SELECT id, session_id, kind, path, ref, detail, created_at FROM lineage "
            "WHERE session_id = ? ORDER BY id",
            (session_id,),
        )
        return [LineageRow(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6]) for r in rows]

    def is_forgotten(self, session_id: str) -> bool:
        """Whether `session_id` was forgotten (Dreaming and re-indexing must skip it)."""
        rows = self.db.execute(
            "SELECT 1 FROM lineage_tombstones WHERE session_id = ?", (session_id,)
        )
        return bool(rows)

    def forgotten_sessions(self) -> frozenset[str]:
        return frozenset(r[0] for r in self.db.execute("SELECT session_id FROM lineage_tombstones"))

    def tombstone(self, session_id: str) -> tuple[float, str | None] | None:
        """(when it was forgotten, its session key) if `session_id` was forgotten, else None."""
        rows = self.db.execute(
            "SELECT forgotten_at, session_key FROM lineage_tombstones WHERE session_id = ?",
            (session_id,),
        )
        return (float(rows[0][0]), rows[0][1]) if rows else None

    def tombstones(self) -> Tombstones:
        """The forgotten sessions, and the notes of theirs `forget` kept (lineage rows stay)."""
        kept = self.db.execute(
            "SELECT l.path FROM lineage l JOIN lineage_tombstones t ON t.session_id = l.session_id"
            " WHERE l.kind = 'session_note' AND l.path IS NOT NULL"
        )
        return Tombstones(self.forgotten_sessions(), frozenset(str(r[0]) for r in kept))


def record_session_note(db: Database, workspace: Path, session_id: str, rel_path: str) -> None:
    """Record that `rel_path` (just written) is `session_id`'s note, with its content hash (a
    note the owner edited afterwards is kept by `forget`)."""
    text = (workspace / rel_path).read_bytes().decode("utf-8")
    lineage: LineageRepository = store_for("LineageRepository", db)
    lineage.record(session_id, "session_note", path=rel_path, detail={"hash": hash_text(text)})
