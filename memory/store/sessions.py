"""Sessions and their transcripts in the agent database.

A `SessionKey` names a conversation place (agent, channel, chat type, peer, thread). Each key has
one *current* `Session`, which a restart resumes; `/new` and `/reset` archive it and start a fresh
one, and archived sessions are kept. A session's `TranscriptEvent`s are numbered 1, 2, 3 … and are
the source of truth for its history: `SessionStore.append` commits (and syncs to disk) before it
returns, so nothing the owner was answered about can be lost to a crash.

Every call blocks on SQLite; async callers run them in a worker thread.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from memory.errors import SessionError
from memory.store.db import Database

CHAT_TYPES = ("direct", "group", "channel")
# The peer id of the owner's direct chats on every channel: the gateway maps each identity listed
# in `[owners]` (and the terminal user) to it, so a key alone says whether a chat is the owner's.
OWNER_PEER = "owner"
EVENT_KINDS = frozenset(
    {"user", "assistant", "tool_call", "tool_result", "compaction", "command", "flush"}
)
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def _escape(part: str) -> str:
    # ':' separates the parts of a key; escape it (and the escape character) inside a part.
    return part.replace("%", "%25").replace(":", "%3A")


def _unescape(part: str) -> str:
    return part.replace("%3A", ":").replace("%25", "%")


@dataclass(frozen=True)
class SessionKey:
    """Where a conversation happens; `str(key)` is its stable text form."""

    agent_id: str  # "main"
    channel: str  # "cli" | "telegram" | "slack"
    chat_type: str  # "direct" | "group" | "channel"
    peer_id: str  # "owner", or another person's user id, in direct chats; else the chat's id
    thread_id: str | None = None

    def __post_init__(self) -> None:
        if self.chat_type not in CHAT_TYPES:
            raise ValueError(f"chat_type must be one of {CHAT_TYPES}, not {self.chat_type!r}")
        for name in ("agent_id", "channel", "peer_id"):
            if not getattr(self, name):
                raise ValueError(f"A session key needs a non-empty {name}.")
        if self.thread_id == "":
            raise ValueError("thread_id must be None or non-empty.")

    def __str__(self) -> str:
        parts = [self.agent_id, self.channel, self.chat_type, self.peer_id]
        text = ":".join(_escape(p) for p in parts)
        if self.thread_id is not None:
            text += ":thread:" + _escape(self.thread_id)
        return text

    @classmethod
    def parse(cls, text: str) -> SessionKey:
        """The key `str(key)` produced, e.g. "main:slack:channel:C1:thread:171.2"."""
        parts = text.split(":")
        if len(parts) == 4:
            thread = None
        elif len(parts) == 6 and parts[4] == "thread":
            thread = _unescape(parts[5])
        else:
            raise ValueError(
                f"{text!r} is not a session key: expected agent:channel:chat_type:peer "
                "with an optional :thread:<id>, e.g. main:telegram:direct:12345."
            )
        agent_id, channel, chat_type, peer_id = (_unescape(p) for p in parts[:4])
        return cls(agent_id, channel, chat_type, peer_id, thread)

    @property
    def is_group(self) -> bool:
        return self.chat_type in ("group", "channel")

    @property
    def is_owner_direct(self) -> bool:
        """The owner's own direct chat (any channel, any thread of it). Only these are private:
        what the owner may see there is decided by agent/policy.py."""
        return self.chat_type == "direct" and self.peer_id == OWNER_PEER

    @property
    def memory_scope(self) -> str:
        """The search scope of this conversation's transcript chunks.

        Direct chats drop the thread (one person, one scope); group and channel threads keep it,
        so recall never crosses from one audience to another.
        """
        if self.chat_type == "direct":
            return str(SessionKey(self.agent_id, self.channel, self.chat_type, self.peer_id))
        return str(self)

    @classmethod
    def owner_direct(cls, channel: str, agent_id: str = "main") -> SessionKey:
        """The owner's direct chat on `channel` (`[gateway] owner_dm_scope = "per-channel"`)."""
        return cls(agent_id, channel, "direct", OWNER_PEER)

    @classmethod
    def owner_main(cls, agent_id: str = "main") -> SessionKey:
        """The ONE session the owner's direct chats on every channel share by default
        (`owner_dm_scope = "main"`). It is the terminal's key, "main:cli:direct:owner", so the
        conversations `pinch chat` stored before channels existed simply continue."""
        return cls.owner_direct("cli", agent_id)

    @classmethod
    def owner_cli(cls, agent_id: str = "main") -> SessionKey:
        return cls.owner_main(agent_id)


@dataclass(frozen=True)
class TranscriptEvent:
    seq: int  # 1-based order within the session
    kind: str  # one of EVENT_KINDS
    content: dict[str, Any]  # JSON-able; its shape depends on `kind`
    created_at: float
    usage: dict[str, Any] | None = None  # input/output/cache_read/cache_write tokens, model


@dataclass(frozen=True)
class Session:
    id: str  # uuid4 hex
    key: SessionKey
    created_at: float
    compactions: int
    flushed_cycle: int  # the compaction cycle whose memory flush already ran (-1: none)
    # The project chosen with /project (agent/projects.py): None = not chosen (the default from
    # `[projects.NAME]` applies), "" = none (`/project none`), else its name.
    project: str | None = None


_SESSION_COLUMNS = (
    "id, agent_id, channel, chat_type, peer_id, thread_id, created_at, compactions, "
    "flushed_cycle, project"
)


def _session(row: Any) -> Session:
    key = SessionKey(row[1], row[2], row[3], row[4], row[5])
    return Session(row[0], key, float(row[6]), int(row[7]), int(row[8]), row[9])


def _event(row: Any) -> TranscriptEvent:
    usage = json.loads(row[4]) if row[4] is not None else None
    return TranscriptEvent(int(row[0]), row[1], json.loads(row[2]), float(row[3]), usage)


class SessionStore(Protocol):
    """Sessions and their transcripts: the source of truth for every conversation's history.

    Promises (a second implementation keeps them):
    - Each key has exactly one current session at a time; `current` creates it on first use and
      returns the same one until `reset`, which archives it (kept, still readable) and makes a
      fresh one current in one transaction. Session ids are unique (uuid4 hex).
    - A session's events are numbered 1, 2, 3 … without gaps, in the order `append` was called;
      `append` is atomic and durable: when it returns the event is on disk (a crash right after
      loses nothing), and two appends to one session never get the same seq.
    - `events` returns events in seq order; `history` and `all_sessions` oldest first;
      `with_id_prefix` at most `limit` sessions whose id starts with the prefix, in id order.
    - `mark_flushed` and `increment_compactions` change one session's counters atomically;
      `set_project` records the session's chosen project ("" none, None back to the default).
    Every call blocks: async callers run it in a worker thread."""

    def current(self, key: SessionKey) -> Session: ...
    def reset(self, key: SessionKey, project: str | None = None) -> Session: ...
    def get(self, session_id: str) -> Session | None: ...
    def with_id_prefix(self, prefix: str, limit: int = 5) -> list[Session]: ...
    def history(self, key: SessionKey) -> list[Session]: ...
    def all_sessions(self) -> list[Session]: ...
    def append(
        self,
        session_id: str,
        kind: str,
        content: dict[str, Any],
        usage: dict[str, Any] | None = None,
    ) -> TranscriptEvent: ...
    def events(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        kinds: Collection[str] | None = None,
        limit: int | None = None,
    ) -> list[TranscriptEvent]: ...
    def latest_compaction(self, session_id: str) -> TranscriptEvent | None: ...
    def mark_flushed(self, session_id: str, cycle: int) -> None: ...
    def increment_compactions(self, session_id: str) -> Session: ...
    def set_project(self, session_id: str, project: str | None) -> Session: ...
    def usage_totals(self, session_id: str) -> dict[str, int]: ...


class SqliteSessionStore:
    """`SessionStore` in the agent database (tables of `m002_sessions`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def current(self, key: SessionKey) -> Session:
        """The key's current session, created if it has none; a restart resumes the same one."""
        with self.db.transaction() as conn:
            row = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE key = ? AND state = 'current'",
                (str(key),),
            ).fetchone()
            return _session(row) if row else self._create(conn, key)

    def reset(self, key: SessionKey, project: str | None = None) -> Session:
        """Archive the key's current session (kept, still searchable) and start a fresh one
        (in `project`, as `set_project` records it: a reset Pinch makes keeps the project)."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE sessions SET state = 'archived', archived_at = ? "
                "WHERE key = ? AND state = 'current'",
                (time.time(), str(key)),
            )
            return self._create(conn, key, project)

    def _create(self, conn: Any, key: SessionKey, project: str | None = None) -> Session:
        session = Session(uuid.uuid4().hex, key, time.time(), 0, -1, project)
        conn.execute(
            "INSERT INTO sessions(id, key, agent_id, channel, chat_type, peer_id, thread_id, "
            "state, created_at, project) VALUES (?, ?, ?, ?, ?, ?, ?, 'current', ?, ?)",
            (
                session.id,
                str(key),
                key.agent_id,
                key.channel,
                key.chat_type,
                key.peer_id,
                key.thread_id,
                session.created_at,
                project,
            ),
        )
        return session

    def get(self, session_id: str) -> Session | None:
        rows = self.db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        )
        return _session(rows[0]) if rows else None

    def with_id_prefix(self, prefix: str, limit: int = 5) -> list[Session]:
        """Up to `limit` sessions whose id starts with `prefix` (hex), in id order."""
        if not prefix or any(c not in "0123456789abcdef" for c in prefix):
            return []
        rows = self.db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
            (prefix, prefix + "g", limit),
        )
        return [_session(r) for r in rows]

    def history(self, key: SessionKey) -> list[Session]:
        """All sessions of a key, archived and current, oldest first."""
        rows = self.db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE key = ? ORDER BY created_at, rowid",
            (str(key),),
        )
        return [_session(r) for r in rows]

    def all_sessions(self) -> list[Session]:
        """Every session of every key, oldest first (for re-indexing transcripts)."""
        rows = self.db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions ORDER BY created_at, rowid"
        )
        return [_session(r) for r in rows]

    def append(
        self,
        session_id: str,
        kind: str,
        content: dict[str, Any],
        usage: dict[str, Any] | None = None,
    ) -> TranscriptEvent:
        """Add the next event to a session's transcript; it is on disk when this returns."""
        if kind not in EVENT_KINDS:
            raise ValueError(
                f"Unknown transcript event kind {kind!r}; expected one of {sorted(EVENT_KINDS)}."
            )
        body = json.dumps(content, ensure_ascii=False)
        usage_json = json.dumps(usage, ensure_ascii=False) if usage is not None else None
        with self.db.lock, _synchronous_full(self.db.conn), self.db.transaction() as conn:
            if not conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone():
                raise SessionError(f"No session {session_id!r} in this agent database.")
            (last,) = conn.execute(
                "SELECT coalesce(max(seq), 0) FROM transcript_events WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            event = TranscriptEvent(
                int(last) + 1,
                kind,
                json.loads(body),
                time.time(),
                json.loads(usage_json) if usage_json else None,
            )
            conn.execute(
                "INSERT INTO transcript_events(session_id, seq, kind, content, usage, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (session_id, event.seq, kind, body, usage_json, event.created_at),
            )
        return event

    def events(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        kinds: Collection[str] | None = None,
        limit: int | None = None,
    ) -> list[TranscriptEvent]:
        """The session's events with seq > after_seq, in order (only `kinds`, at most `limit`)."""
        sql = (
            "SELECT seq, kind, content, created_at, usage FROM transcript_events "
            "WHERE session_id = ? AND seq > ?"
        )
        params: list[Any] = [session_id, after_seq]
        if kinds is not None:
            sql += f" AND kind IN ({','.join('?' for _ in kinds)})"
            params.extend(kinds)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = self.db.execute(sql, params)
        return [_event(r) for r in rows]

    def latest_compaction(self, session_id: str) -> TranscriptEvent | None:
        rows = self.db.execute(
            "SELECT seq, kind, content, created_at, usage FROM transcript_events "
            "WHERE session_id = ? AND kind = 'compaction' ORDER BY seq DESC LIMIT 1",
            (session_id,),
        )
        return _event(rows[0]) if rows else None

    def mark_flushed(self, session_id: str, cycle: int) -> None:
        """Record that the memory flush of compaction cycle `cycle` ran (it runs once a cycle)."""
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE sessions SET flushed_cycle = ? WHERE id = ?", (cycle, session_id)
            )
            if cur.rowcount == 0:
                raise SessionError(f"No session {session_id!r} in this agent database.")

    def increment_compactions(self, session_id: str) -> Session:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE sessions SET compactions = compactions + 1 WHERE id = ?", (session_id,)
            )
            row = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if row is None:
                raise SessionError(f"No session {session_id!r} in this agent database.")
            return _session(row)

    def set_project(self, session_id: str, project: str | None) -> Session:
        """Record the project chosen for the session (kept across restarts, like the session)."""
        with self.db.transaction() as conn:
            conn.execute("UPDATE sessions SET project = ? WHERE id = ?", (project, session_id))
            row = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if row is None:
                raise SessionError(f"No session {session_id!r} in this agent database.")
            return _session(row)

    def usage_totals(self, session_id: str) -> dict[str, int]:
        """Summed token usage of the session's model calls, and how many calls reported it."""
        sums = ", ".join(f"coalesce(sum(json_extract(usage, '$.{f}')), 0)" for f in USAGE_FIELDS)
        row = self.db.execute(
            f"SELECT {sums}, count(usage) FROM transcript_events WHERE session_id = ?",
            (session_id,),
        )[0]
        totals = {f: int(v) for f, v in zip(USAGE_FIELDS, row, strict=False)}
        totals["calls"] = int(row[len(USAGE_FIELDS)])
        return totals


@contextlib.contextmanager
def _synchronous_full(conn: Any) -> Iterator[None]:
    """PRAGMA synchronous = FULL around one transaction (the caller holds the database lock).

    In WAL mode the database's usual NORMAL level survives a crash of the process but may lose
    the last commits to a power cut; a transcript event must not be lost that way.
    """
    previous = int(conn.execute("PRAGMA synchronous").fetchone()[0])
    conn.execute("PRAGMA synchronous = FULL")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA synchronous = {previous}")
