"""Standing intents: "when X comes up, do Y", stored in the agent database and matched without a
model call before every reply.

    store = IntentStore.open(db)                                  # applies INTENT_MIGRATIONS
    scope = IntentScope.of(key, "owner")                          # where it may fire, for whom
    store.create(scope, ["Hangzhou", "杭州"], "remind me to confirm the return ticket", now=t)
    for intent in store.candidates(scope, "Back from Hangzhou on Sunday", now=t2):
        if store.fire(intent.id, now=t2, session_key=str(key)): ...   # at most once, atomically

An intent has trigger *entries*; it matches a message when every term of one entry appears in
it. Terms are normalised tokens: NFKC (full-width letters fold), case-folded, Porter-stemmed
English words, and CJK bigrams (single characters for one-character runs). Scripts never map
onto each other: "杭州" and "Hangzhou" are two entries when both should fire.

Life cycle: armed → fired (fired at least once, more fires left) → done (max fires reached); or
cancelled, or expired. Ended intents keep their row and their fires (history). The scope —
agent, channel, chat (the conversation's `SessionKey.memory_scope`) and sender — is checked on
every match, in SQL, so an intent the owner set in a private chat never fires for another person
nor in a group.

Every call blocks on SQLite; async callers run them in a worker thread.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from memory.errors import MemoryError_
from memory.search.porter import porter_stem
from memory.store.db import Database
from memory.store.schema import MigrationSet, apply
from memory.store.sessions import SessionKey
from memory.text import CJK_CHAR, ENGLISH_STOPWORDS, normalised_runs

DAY_S = 86_400.0
DEFAULT_COOLDOWN_S = DAY_S  # at least 24 h between two fires of one intent
DEFAULT_MAX_FIRES = 3
DEFAULT_EXPIRY_S = 90 * DAY_S
MAX_CANDIDATES = 256  # prefilter rows verified per message: bounded work on every reply
MAX_TRIGGERS = 8
MAX_TERMS_PER_TRIGGER = 8
MAX_ACTION_CHARS = 300  # three intents and their triggers always fit the 1,200-char block
ACTIVE_STATES = ("armed", "fired")
STATES = ("armed", "fired", "done", "cancelled", "expired")
_ROWS = 16  # prefilter rowids per intent (> MAX_TRIGGERS)
_QUERY_BATCH = 200  # message terms per FTS query (a pasted page has thousands)


class IntentError(MemoryError_):
    """An intent cannot be created, found or changed; the message says what to do."""


# ---- normalised terms ----------------------------------------------------------------------


def message_terms(text: str) -> frozenset[str]:
    """Every term a message offers: stems of its words, and each CJK character and bigram."""
    out: set[str] = set()
    for token in normalised_runs(text):
        if CJK_CHAR.match(token):
            out.update(token)
            out.update(token[i : i + 2] for i in range(len(token) - 1))
        else:
            out.add(porter_stem(token))
    return frozenset(out)


def trigger_terms(entry: str) -> tuple[str, ...]:
    """The terms that must all appear for trigger `entry` to match, in order, de-duplicated.

    English stopwords are left out ("the return ticket" needs "return" and "ticket") unless the
    entry is nothing else. A CJK run needs each of its bigrams ("杭州东站": 杭州, 州东, 东站)."""
    terms: list[str] = []
    glue: list[str] = []
    for token in normalised_runs(entry):
        if CJK_CHAR.match(token):
            found = (
                [token] if len(token) == 1 else [token[i : i + 2] for i in range(len(token) - 1)]
            )
            terms.extend(found)
        elif token in ENGLISH_STOPWORDS:
            glue.append(porter_stem(token))
        else:
            terms.append(porter_stem(token))
    return tuple(dict.fromkeys(terms or glue))


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

    @classmethod
    def of(cls, key: SessionKey, sender_kind: str, sender_id: str | None = None) -> IntentScope:
        return cls(key.agent_id, key.channel, key.memory_scope, sender_kind, sender_id)


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


INTENT_MIGRATIONS: list[Callable[[Any], None]] = [m001_intents]
INTENTS = MigrationSet("intents", INTENT_MIGRATIONS)


def ensure_intent_schema(db: Database) -> list[str]:
    """Apply the intents' pending migrations (their own set, memory/store/schema.py); returns the
    names applied now. Safe to call from several processes at once."""
    with db.lock:
        return apply(db.conn, INTENTS)


# ---- the store -----------------------------------------------------------------------------

_COLUMNS = (
    "id, agent_id, channel, chat, sender_kind, sender_id, creator, triggers, action, state, "
    "cooldown_s, max_fires, fire_count, created_at, expires_at, last_fired_at, ended_at"
)


def _intent(row: Sequence[Any]) -> StandingIntent:
    return StandingIntent(
        id=row[0],
        scope=IntentScope(row[1], row[2], row[3], row[4], row[5]),
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


class IntentStore:
    """The standing intents of one agent database. `now` arguments are Unix seconds (tests
    pass their own clock's)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @classmethod
    def open(cls, db: Database, *, now: float | None = None) -> IntentStore:
        """The store on `db`, its schema applied and intents past their expiry marked expired
        (matching skips them anyway; this keeps the prefilter small)."""
        ensure_intent_schema(db)
        store = cls(db)
        store.expire_due(now=time.time() if now is None else now)
        return store

    # -- creating and ending -----------------------------------------------------------------

    def create(
        self,
        scope: IntentScope,
        triggers: Sequence[str],
        action: str,
        *,
        now: float,
        creator: str = "owner",
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        max_fires: int = DEFAULT_MAX_FIRES,
        expires_in_s: float = DEFAULT_EXPIRY_S,
    ) -> StandingIntent:
        """A new armed intent; the same triggers and action already active in `scope` are
        returned as they are instead of a duplicate. Raises IntentError for unusable input."""
        entries, terms = _clean_triggers(triggers)
        action = " ".join(action.split())
        if not action:
            raise IntentError("Say what to do when the intent fires (the action is empty).")
        if len(action) > MAX_ACTION_CHARS:
            raise IntentError(
                f"The action is {len(action)} characters; keep it under {MAX_ACTION_CHARS} "
                "(a short reminder of what to do, not the whole context)."
            )
        if max_fires < 1 or cooldown_s < 0 or expires_in_s <= 0:
            raise IntentError("max_fires must be at least 1, the cooldown and expiry positive.")
        with self.db.transaction() as conn:
            for row in conn.execute(
                f"SELECT {_COLUMNS} FROM intents WHERE agent_id = ? AND channel = ? AND chat = ? "
                "AND sender_kind = ? AND sender_id IS ? AND action = ? AND state IN "
                "('armed', 'fired') AND expires_at > ?",
                (*_scope_values(scope), action, now),
            ):
                if _intent(row).triggers == tuple(entries):
                    return _intent(row)
            cursor = conn.execute(
                "INSERT INTO intents (agent_id, channel, chat, sender_kind, sender_id, creator, "
                "triggers, action, state, cooldown_s, max_fires, created_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'armed', ?, ?, ?, ?)",
                (
                    *_scope_values(scope),
                    creator,
                    json.dumps(entries, ensure_ascii=False),
                    action,
                    float(cooldown_s),
                    int(max_fires),
                    now,
                    now + expires_in_s,
                ),
            )
            intent_id = int(cursor.lastrowid)
            conn.executemany(
                "INSERT INTO intent_triggers (rowid, terms) VALUES (?, ?)",
                [(intent_id * _ROWS + n, " ".join(t)) for n, t in enumerate(terms)],
            )
        found = self.get(intent_id)
        assert found is not None
        return found

    def cancel(self, intent_id: int, *, now: float) -> StandingIntent:
        """Cancel an active intent (its row and fires stay, as history). Raises IntentError
        when there is no such intent or it has already ended."""
        with self.db.transaction() as conn:
            changed = conn.execute(
                "UPDATE intents SET state = 'cancelled', ended_at = ? "
                "WHERE id = ? AND state IN ('armed', 'fired')",
                (now, intent_id),
            ).rowcount
            if changed:
                _drop_triggers(conn, intent_id)
        intent = self.get(intent_id)
        if intent is None:
            raise IntentError(
                f"There is no standing intent #{intent_id}: `pinch intents list` shows them."
            )
        if not changed:
            raise IntentError(f"Standing intent #{intent_id} is already {intent.state}.")
        return intent

    def expire_due(self, *, now: float) -> int:
        """Mark active intents past their expiry as expired; returns how many."""
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

    # -- reading -----------------------------------------------------------------------------

    def get(self, intent_id: int) -> StandingIntent | None:
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM intents WHERE id = ?", (intent_id,))
        return _intent(rows[0]) if rows else None

    def intents(
        self, *, scope: IntentScope | None = None, include_ended: bool = False
    ) -> list[StandingIntent]:
        """Intents, oldest first: active ones (all, with `include_ended`), of `scope` if given."""
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

    # -- matching ----------------------------------------------------------------------------

    def candidates(
        self, scope: IntentScope, text: str, *, now: float, limit: int | None = None
    ) -> list[StandingIntent]:
        """The intents that may fire for `text` said in `scope` now: in scope, active, not
        expired, out of cooldown, and with one trigger entry whose terms all appear. Most
        specific (most terms matched) first, oldest first among equals; the first `limit` only
        when given. Reads only; `fire` records a fire."""
        terms = message_terms(text)
        if not terms:
            return []
        ordered = sorted(terms)
        matched: dict[int, int] = {}  # intent id -> terms of its best matching entry
        scanned = 0
        for start in range(0, len(ordered), _QUERY_BATCH):
            rows = self.db.execute(
                "SELECT i.id, t.terms FROM intent_triggers t "
                f"JOIN intents i ON i.id = t.rowid / {_ROWS} "
                "WHERE intent_triggers MATCH ? AND i.agent_id = ? AND i.channel = ? "
                "AND i.chat = ? AND i.sender_kind = ? "
                "AND (i.sender_id IS NULL OR i.sender_id = ?) "
                "AND i.state IN ('armed', 'fired') AND i.expires_at > ? "
                "AND (i.last_fired_at IS NULL OR i.last_fired_at <= ? - i.cooldown_s) "
                "LIMIT ?",
                (
                    _fts_query(ordered[start : start + _QUERY_BATCH]),
                    scope.agent_id,
                    scope.channel,
                    scope.chat,
                    scope.sender_kind,
                    scope.sender_id,
                    now,
                    now,
                    MAX_CANDIDATES - scanned,
                ),
            )
            scanned += len(rows)
            for intent_id, entry in rows:
                needed = entry.split(" ")
                if all(t in terms for t in needed):
                    matched[intent_id] = max(matched.get(intent_id, 0), len(needed))
            if scanned >= MAX_CANDIDATES:
                break
        best = sorted(matched, key=lambda i: (-matched[i], i))[:limit]
        if not best:
            return []
        marks = ",".join("?" * len(best))
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM intents WHERE id IN ({marks})", best)
        return sorted((_intent(r) for r in rows), key=lambda i: best.index(i.id))

    def fire(self, intent_id: int, *, now: float, session_key: str, excerpt: str = "") -> bool:
        """Record one fire of `intent_id` if it may fire now; False if it may not (another
        message fired it first, it is cooling down, used up, ended or expired). Atomic across
        threads and processes: of two messages at once, exactly one fires it."""
        return bool(self.fire_all([intent_id], now=now, session_key=session_key, excerpt=excerpt))

    def fire_all(
        self, intent_ids: Sequence[int], *, now: float, session_key: str, excerpt: str = ""
    ) -> list[int]:
        """`fire` for several intents in one transaction; returns the ids that fired."""
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
                    (intent_id, now, session_key, excerpt[:200]),
                )
                state = conn.execute("SELECT state FROM intents WHERE id = ?", (intent_id,))
                if state.fetchone()[0] == "done":
                    _drop_triggers(conn, intent_id)
        return fired


def _drop_triggers(conn: Any, intent_id: int) -> None:
    conn.execute(
        "DELETE FROM intent_triggers WHERE rowid BETWEEN ? AND ?",
        (intent_id * _ROWS, intent_id * _ROWS + _ROWS - 1),
    )


def _scope_values(scope: IntentScope) -> tuple[Any, ...]:
    return (scope.agent_id, scope.channel, scope.chat, scope.sender_kind, scope.sender_id)


def _clean_triggers(triggers: Sequence[str]) -> tuple[list[str], list[tuple[str, ...]]]:
    entries = list(dict.fromkeys(" ".join(str(t).split()) for t in triggers if str(t).strip()))
    if not entries:
        raise IntentError(
            'Give at least one trigger: words that must appear, e.g. ["Hangzhou", "杭州"].'
        )
    if len(entries) > MAX_TRIGGERS:
        raise IntentError(f"At most {MAX_TRIGGERS} triggers per intent; create another intent.")
    terms = [trigger_terms(e) for e in entries]
    empty = [e for e, t in zip(entries, terms, strict=True) if not t]
    if empty:
        raise IntentError(f"The trigger {empty[0]!r} has no words to match; use words or names.")
    if any(len(t) > MAX_TERMS_PER_TRIGGER for t in terms):
        raise IntentError(
            f"A trigger may have at most {MAX_TERMS_PER_TRIGGER} words, all of which must "
            "appear; use a few distinctive ones."
        )
    return entries, terms
