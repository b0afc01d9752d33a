"""The standing intents' tables: `IntentRepository` (what any store of them promises) and
`SqliteIntentRepository`, the SQLite implementation holding every statement.

memory/lifecycle/intents.py decides (validation, normalised terms, ranking); this module only
stores, finds and changes rows. The values it hands out are the frozen dataclasses below.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memory.store.backends import backend_of, store_for
from memory.store.db import Database
from memory.store.schema import MigrationSet, apply
from memory.store.sessions import SessionKey

ACTIVE_STATES = ("armed", "fired")
STATES = ("armed", "fired", "done", "cancelled", "expired")


# ---- values --------------------------------------------------------------------------------


@dataclass(frozen=True)
class IntentScope:
    """Where an intent may fire and whose messages fire it. `sender_id` None: any sender of
    `sender_kind` ("owner" | "person" | "automation" | "system") in that chat."""

    agent_id: str
    channel: str
    chat: str  # SessionKey.memory_scope of the conversation
    sender_kind: str
    sender_id: str | None = None
    # The project it was created in (it fires only while that project is active there); or,
    # when matching, the active project (None: none, so only intents without one fire).
    project: str | None = None

    @classmethod
    def of(
        cls,
        key: SessionKey,
        sender_kind: str,
        sender_id: str | None = None,
        project: str | None = None,
    ) -> IntentScope:
        return cls(key.agent_id, key.channel, key.memory_scope, sender_kind, sender_id, project)


@dataclass(frozen=True)
class StandingIntent:
    id: int
    scope: IntentScope
    creator: str
    triggers: tuple[str, ...]  # the entries as given; any one of them fires it
    action: str
    state: str  # one of STATES
    cooldown_s: float
    max_fires: int
    fire_count: int
    created_at: float
    expires_at: float
    last_fired_at: float | None = None
    ended_at: float | None = None  # when it became done, cancelled or expired

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


@dataclass(frozen=True)
class IntentFire:
    intent_id: int
    fired_at: float
    session_key: str
    excerpt: str  # the start of the message that fired it


@dataclass(frozen=True)
class NewIntent:
    """An intent to store: `entries` as given, `terms[i]` the normalised terms of `entries[i]`
    (all must appear in a message for that entry to match)."""

    scope: IntentScope
    entries: tuple[str, ...]
    terms: tuple[tuple[str, ...], ...]
    action: str
    creator: str
    cooldown_s: float
    max_fires: int
    created_at: float
    expires_at: float


# ---- the interface -------------------------------------------------------------------------


class IntentRepository(Protocol):
    """The standing intents of one agent database, their trigger entries and their fires.

    Promises a second implementation must keep:
    - ids are unique, increasing in creation order, never reused; lists are oldest (lowest id)
      first, fires in the order they happened;
    - `create` is atomic and unique: while an intent with the same scope, action and entries
      (in the same order) is active and unexpired, it is returned instead of a new row;
    - `fire_all` is atomic across threads and processes: of two callers firing one intent at
      once, exactly one gets it (fire count, cooldown, expiry and max fires checked and changed
      in one step); an intent reaching max fires becomes `done` in the same step;
    - an intent that ends (done, cancelled, expired) keeps its row and fires, but its entries
      are no longer returned by `matching_entries`.
    Every call blocks; async callers run them in a worker thread.
    """

    def create(self, new: NewIntent) -> StandingIntent:
        """Store `new` armed, or return the active duplicate (see the class promises)."""
        ...

    def cancel(self, intent_id: int, *, now: float) -> bool:
        """Cancel an active intent (ended at `now`); False if none is active with that id."""
        ...

    def expire_due(self, *, now: float) -> int:
        """Mark active intents with `expires_at <= now` expired; returns how many."""
        ...

    def get(self, intent_id: int) -> StandingIntent | None: ...

    def get_many(self, intent_ids: Sequence[int]) -> list[StandingIntent]:
        """Those of `intent_ids` that exist, in no particular order."""
        ...

    def intents(
        self, *, scope: IntentScope | None = None, include_ended: bool = False
    ) -> list[StandingIntent]:
        """Active intents (all with `include_ended`), of exactly `scope` if given; oldest first."""
        ...

    def fires(self, intent_id: int) -> list[IntentFire]: ...

    def matching_entries(
        self, scope: IntentScope, terms: Sequence[str], *, now: float, limit: int
    ) -> list[tuple[int, tuple[str, ...]]]:
        """(intent id, entry terms) of trigger entries sharing at least one of `terms`, of
        intents that may fire in `scope` now: same agent, channel, chat and sender kind, any
        sender or this one, no project or `scope.project`, active, unexpired, out of cooldown.
        At most `limit` rows; the caller checks that all of an entry's terms appear."""
        ...

    def fire_all(
        self, intent_ids: Sequence[int], *, now: float, session_key: str, excerpt: str
    ) -> list[int]:
        """Record one fire of each of `intent_ids` that may fire now, in one transaction;
        returns the ids that fired, in the order given."""
        ...


# ---- schema --------------------------------------------------------------------------------


def m001_intents(conn: Any) -> None:
    conn.executescript(
        """
        CREATE TABLE intents (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            agent_id TEXT NOT NULL,
            channel TEXT NOT NULL,
            chat TEXT NOT NULL,              -- SessionKey.memory_scope where it may fire
            sender_kind TEXT NOT NULL,       -- whose messages fire it
            sender_id TEXT,                  -- NULL: anyone of sender_kind in that chat
            creator TEXT NOT NULL,
            triggers TEXT NOT NULL,          -- JSON list of entries as given
            action TEXT NOT NULL,
            state TEXT NOT NULL
                CHECK (state IN ('armed', 'fired', 'done', 'cancelled', 'expired')),
            cooldown_s REAL NOT NULL,
            max_fires INTEGER NOT NULL,
            fire_count INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            last_fired_at REAL,
            ended_at REAL
        );
        CREATE INDEX intents_by_chat ON intents (agent_id, chat, action);
        CREATE INDEX intents_by_expiry ON intents (state, expires_at);
        -- The prefilter: one row per trigger entry of an active intent, its normalised terms
        -- space-separated, rowid = intent id * 16 + entry number (so an intent's rows are one
        -- rowid range). Rows are deleted when the intent ends; the JSON above keeps them.
        CREATE VIRTUAL TABLE intent_triggers USING fts5(
            terms, tokenize = 'unicode61 remove_diacritics 0'
        );
        CREATE TABLE intent_fires (
            intent_id INTEGER NOT NULL REFERENCES intents(id) ON DELETE CASCADE,
            fired_at REAL NOT NULL,
            session_key TEXT NOT NULL,
            excerpt TEXT NOT NULL
        );
        CREATE INDEX intent_fires_by_intent ON intent_fires (intent_id, fired_at);
        """
    )


def m002_projects_intent_project(conn: Any) -> None:
    """Feature "projects" (issue 21): the project an intent was created in; NULL fires in any."""
    conn.executescript("ALTER TABLE intents ADD COLUMN project TEXT;")


INTENT_MIGRATIONS: list[Callable[[Any], None]] = [m001_intents, m002_projects_intent_project]
INTENTS = MigrationSet("intents", INTENT_MIGRATIONS, retired=["i002_projects_intent_project"])


def ensure_intent_schema(db: Database) -> list[str]:
    """Apply the intents' pending migrations (their own set, memory/store/schema.py); returns the
    names applied now. Safe to call from several processes at once. (PostgreSQL applies every
    set when its store opens: nothing to do here.)"""
    if backend_of(db) != "sqlite":
        return []
    with db.lock:
        return apply(db.conn, INTENTS)


# ---- the SQLite implementation -------------------------------------------------------------

_ROWS = 16  # prefilter rowids per intent (> the most trigger entries an intent may have)
_QUERY_BATCH = 200  # message terms per FTS query (a pasted page has thousands)
_COLUMNS = (
    "id, agent_id, channel, chat, sender_kind, sender_id, creator, triggers, action, state, "
    "cooldown_s, max_fires, fire_count, created_at, expires_at, last_fired_at, ended_at, project"
)


def _intent(row: Sequence[Any]) -> StandingIntent:
    return StandingIntent(
        id=row[0],
        scope=IntentScope(row[1], row[2], row[3], row[4], row[5], row[17]),
        creator=row[6],
        triggers=tuple(json.loads(row[7])),
        action=row[8],
        state=row[9],
        cooldown_s=row[10],
        max_fires=row[11],
        fire_count=row[12],
        created_at=row[13],
        expires_at=row[14],
        last_fired_at=row[15],
        ended_at=row[16],
    )


def _fts_query(terms: Iterable[str]) -> str:
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def _scope_values(scope: IntentScope) -> tuple[Any, ...]:
    return (scope.agent_id, scope.channel, scope.chat, scope.sender_kind, scope.sender_id)


def _drop_triggers(conn: Any, intent_id: int) -> None:
    conn.execute(
        "DELETE FROM intent_triggers WHERE rowid BETWEEN ? AND ?",
        (intent_id * _ROWS, intent_id * _ROWS + _ROWS - 1),
    )


class SqliteIntentRepository:
    """`IntentRepository` on the agent SQLite database (tables `intents`, `intent_triggers`,
    `intent_fires`); the schema is applied by `ensure_intent_schema`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, new: NewIntent) -> StandingIntent:
        if len(new.entries) >= _ROWS:
            raise ValueError(f"at most {_ROWS - 1} trigger entries per intent")
        with self.db.transaction() as conn:
            for row in conn.execute(
                f"SELECT {_COLUMNS} FROM intents WHERE agent_id = ? AND channel = ? AND chat = ? "
                "AND sender_kind = ? AND sender_id IS ? AND action = ? AND state IN "
                "('armed', 'fired') AND expires_at > ? AND project IS ?",
                (*_scope_values(new.scope), new.action, new.created_at, new.scope.project),
            ):
                if _intent(row).triggers == tuple(new.entries):
                    return _intent(row)
            cursor = conn.execute(
                "INSERT INTO intents (agent_id, channel, chat, sender_kind, sender_id, creator, "
                "triggers, action, state, cooldown_s, max_fires, created_at, expires_at, project) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'armed', ?, ?, ?, ?, ?)",
                (
                    *_scope_values(new.scope),
                    new.creator,
                    json.dumps(list(new.entries), ensure_ascii=False),
                    new.action,
                    float(new.cooldown_s),
                    int(new.max_fires),
                    new.created_at,
                    new.expires_at,
                    new.scope.project,
                ),
            )
            intent_id = int(cursor.lastrowid)
            conn.executemany(
                "INSERT INTO intent_triggers (rowid, terms) VALUES (?, ?)",
                [(intent_id * _ROWS + n, " ".join(t)) for n, t in enumerate(new.terms)],
            )
        found = self.get(intent_id)
        assert found is not None
        return found

    def cancel(self, intent_id: int, *, now: float) -> bool:
        with self.db.transaction() as conn:
            changed = conn.execute(
                "UPDATE intents SET state = 'cancelled', ended_at = ? "
                "WHERE id = ? AND state IN ('armed', 'fired')",
                (now, intent_id),
            ).rowcount
            if changed:
                _drop_triggers(conn, intent_id)
        return bool(changed)

    def expire_due(self, *, now: float) -> int:
        with self.db.transaction() as conn:
            ids = [
                row[0]
                for row in conn.execute(
                    "SELECT id FROM intents WHERE state IN ('armed', 'fired') AND expires_at <= ?",
                    (now,),
                )
            ]
            for intent_id in ids:
                conn.execute(
                    "UPDATE intents SET state = 'expired', ended_at = expires_at WHERE id = ?",
                    (intent_id,),
                )
                _drop_triggers(conn, intent_id)
        return len(ids)

    def get(self, intent_id: int) -> StandingIntent | None:
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM intents WHERE id = ?", (intent_id,))
        return _intent(rows[0]) if rows else None

    def get_many(self, intent_ids: Sequence[int]) -> list[StandingIntent]:
        if not intent_ids:
            return []
        marks = ",".join("?" * len(intent_ids))
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM intents WHERE id IN ({marks})", list(intent_ids)
        )
        return [_intent(r) for r in rows]

    def intents(
        self, *, scope: IntentScope | None = None, include_ended: bool = False
    ) -> list[StandingIntent]:
        where: list[str] = []
        params: list[Any] = []
        if not include_ended:
            where.append("state IN ('armed', 'fired')")
        if scope is not None:
            where.append(
                "agent_id = ? AND channel = ? AND chat = ? AND sender_kind = ? AND sender_id IS ?"
            )
            params.extend(_scope_values(scope))
        sql = f"SELECT {_COLUMNS} FROM intents"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_intent(r) for r in self.db.execute(sql + " ORDER BY id", params)]

    def fires(self, intent_id: int) -> list[IntentFire]:
        rows = self.db.execute(
            "SELECT intent_id, fired_at, session_key, excerpt FROM intent_fires "
            "WHERE intent_id = ? ORDER BY fired_at",
            (intent_id,),
        )
        return [IntentFire(*row) for row in rows]

    def matching_entries(
        self, scope: IntentScope, terms: Sequence[str], *, now: float, limit: int
    ) -> list[tuple[int, tuple[str, ...]]]:
        found: list[tuple[int, tuple[str, ...]]] = []
        for start in range(0, len(terms), _QUERY_BATCH):
            rows = self.db.execute(
                "SELECT i.id, t.terms FROM intent_triggers t "
                f"JOIN intents i ON i.id = t.rowid / {_ROWS} "
                "WHERE intent_triggers MATCH ? AND i.agent_id = ? AND i.channel = ? "
                "AND i.chat = ? AND i.sender_kind = ? "
                "AND (i.sender_id IS NULL OR i.sender_id = ?) "
                "AND (i.project IS NULL OR i.project = ?) "
                "AND i.state IN ('armed', 'fired') AND i.expires_at > ? "
                "AND (i.last_fired_at IS NULL OR i.last_fired_at <= ? - i.cooldown_s) "
                "LIMIT ?",
                (
                    _fts_query(terms[start : start + _QUERY_BATCH]),
                    scope.agent_id,
                    scope.channel,
                    scope.chat,
                    scope.sender_kind,
                    scope.sender_id,
                    scope.project,
                    now,
                    now,
                    limit - len(found),
                ),
            )
            found += [(int(i), tuple(str(entry).split(" "))) for i, entry in rows]
            if len(found) >= limit:
                break
        return found

    def fire_all(
        self, intent_ids: Sequence[int], *, now: float, session_key: str, excerpt: str
    ) -> list[int]:
        fired: list[int] = []
        with self.db.transaction() as conn:
            for intent_id in intent_ids:
                changed = conn.execute(
                    "UPDATE intents SET fire_count = fire_count + 1, last_fired_at = :now, "
                    "state = CASE WHEN fire_count + 1 >= max_fires THEN 'done' ELSE 'fired' END, "
                    "ended_at = CASE WHEN fire_count + 1 >= max_fires THEN :now ELSE NULL END "
                    "WHERE id = :id AND state IN ('armed', 'fired') AND fire_count < max_fires "
                    "AND (last_fired_at IS NULL OR last_fired_at <= :now - cooldown_s) "
                    "AND expires_at > :now",
                    {"now": now, "id": intent_id},
                ).rowcount
                if changed != 1:
                    continue
                fired.append(intent_id)
                conn.execute(
                    "INSERT INTO intent_fires VALUES (?, ?, ?, ?)",
                    (intent_id, now, session_key, excerpt),
                )
                state = conn.execute("SELECT state FROM intents WHERE id = ?", (intent_id,))
                if state.fetchone()[0] == "done":
                    _drop_triggers(conn, intent_id)
        return fired


def intents_for(db: Database) -> IntentRepository:
    """The standing intents of `db` (`db`'s backend: memory/store/backends.py)."""
    found: IntentRepository = store_for("IntentRepository", db)
    return found
