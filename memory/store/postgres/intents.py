"""`IntentRepository` on PostgreSQL (tables `intents`, `intent_triggers`, `intent_fires`).

The prefilter SQLite keeps in FTS5 is here one row per trigger entry holding its normalised
terms as a `text[]` with a GIN index: `terms && message_terms` finds every entry sharing a term
(the caller still checks that all of an entry's terms appear).

How the promises are kept here: `create` looks for the active duplicate and inserts under a
transaction-level advisory lock of (scope, action), so two gateways never store the same intent
twice; `fire_all` is one conditional `UPDATE` per intent — PostgreSQL re-checks count, cooldown
and expiry on a row another caller just fired, so exactly one of them gets the fire.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from memory.store.intents_store import IntentFire, IntentScope, NewIntent, StandingIntent
from memory.store.postgres.database import PgDatabase, one_row

MAX_ENTRIES = 15  # trigger entries per intent, as on SQLite
_COLUMNS = (
    "id, agent_id, channel, chat, sender_kind, sender_id, creator, triggers, action, state, "
    "cooldown_s, max_fires, fire_count, created_at, expires_at, last_fired_at, ended_at, project"
)
_SCOPE = (
    "agent_id = %s AND channel = %s AND chat = %s AND sender_kind = %s "
    "AND sender_id IS NOT DISTINCT FROM %s"
)


def _intent(row: Sequence[Any]) -> StandingIntent:
    return StandingIntent(
        id=int(row[0]),
        scope=IntentScope(row[1], row[2], row[3], row[4], row[5], row[17]),
        creator=row[6],
        triggers=tuple(json.loads(row[7])),
        action=row[8],
        state=row[9],
        cooldown_s=float(row[10]),
        max_fires=int(row[11]),
        fire_count=int(row[12]),
        created_at=float(row[13]),
        expires_at=float(row[14]),
        last_fired_at=None if row[15] is None else float(row[15]),
        ended_at=None if row[16] is None else float(row[16]),
    )


def _scope_values(scope: IntentScope) -> tuple[Any, ...]:
    return (scope.agent_id, scope.channel, scope.chat, scope.sender_kind, scope.sender_id)


class PgIntentRepository:
    """`IntentRepository` on PostgreSQL (memory/store/intents_store.py states the promises)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def create(self, new: NewIntent) -> StandingIntent:
        if len(new.entries) > MAX_ENTRIES:
            raise ValueError(f"at most {MAX_ENTRIES} trigger entries per intent")
        lock = json.dumps([*_scope_values(new.scope), new.scope.project, new.action])
        with self.db.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 5))", (lock,))
            for row in conn.execute(
                f"SELECT {_COLUMNS} FROM intents WHERE {_SCOPE} AND action = %s "
                "AND state IN ('armed', 'fired') AND expires_at > %s "
                "AND project IS NOT DISTINCT FROM %s ORDER BY id",
                (*_scope_values(new.scope), new.action, new.created_at, new.scope.project),
            ).fetchall():
                if _intent(row).triggers == tuple(new.entries):
                    return _intent(row)
            made = conn.execute(
                "INSERT INTO intents (agent_id, channel, chat, sender_kind, sender_id, creator, "
                "triggers, action, state, cooldown_s, max_fires, created_at, expires_at, project) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'armed', %s, %s, %s, %s, %s) "
                f"RETURNING {_COLUMNS}",
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
            ).fetchone()
            intent = _intent(one_row(made))
            conn.cursor().executemany(
                "INSERT INTO intent_triggers (intent_id, entry, terms) VALUES (%s, %s, %s)",
                [(intent.id, n, list(t)) for n, t in enumerate(new.terms)],
            )
        return intent

    def cancel(self, intent_id: int, *, now: float) -> bool:
        with self.db.transaction() as conn:
            changed = conn.execute(
                "UPDATE intents SET state = 'cancelled', ended_at = %s "
                "WHERE id = %s AND state IN ('armed', 'fired')",
                (now, intent_id),
            ).rowcount
            if changed:
                conn.execute("DELETE FROM intent_triggers WHERE intent_id = %s", (intent_id,))
        return bool(changed)

    def expire_due(self, *, now: float) -> int:
        with self.db.transaction() as conn:
            rows = conn.execute(
                "UPDATE intents SET state = 'expired', ended_at = expires_at "
                "WHERE state IN ('armed', 'fired') AND expires_at <= %s RETURNING id",
                (now,),
            ).fetchall()
            ids = [int(r[0]) for r in rows]
            if ids:
                conn.execute("DELETE FROM intent_triggers WHERE intent_id = ANY(%s)", (ids,))
        return len(ids)

    def get(self, intent_id: int) -> StandingIntent | None:
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM intents WHERE id = %s", (intent_id,))
        return _intent(rows[0]) if rows else None

    def get_many(self, intent_ids: Sequence[int]) -> list[StandingIntent]:
        if not intent_ids:
            return []
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM intents WHERE id = ANY(%s)", ([int(i) for i in intent_ids],)
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
            where.append(_SCOPE)
            params.extend(_scope_values(scope))
        statement = f"SELECT {_COLUMNS} FROM intents"
        if where:
            statement += " WHERE " + " AND ".join(where)
        return [_intent(r) for r in self.db.execute(statement + " ORDER BY id", params)]

    def fires(self, intent_id: int) -> list[IntentFire]:
        rows = self.db.execute(
            "SELECT intent_id, fired_at, session_key, excerpt FROM intent_fires "
            "WHERE intent_id = %s ORDER BY fired_at, fire_order",
            (intent_id,),
        )
        return [IntentFire(int(r[0]), float(r[1]), r[2], r[3]) for r in rows]

    def matching_entries(
        self, scope: IntentScope, terms: Sequence[str], *, now: float, limit: int
    ) -> list[tuple[int, tuple[str, ...]]]:
        if not terms or limit <= 0:
            return []
        rows = self.db.execute(
            "SELECT i.id, t.terms FROM intent_triggers t JOIN intents i ON i.id = t.intent_id "
            "WHERE t.terms && %s::text[] AND i.agent_id = %s AND i.channel = %s "
            "AND i.chat = %s AND i.sender_kind = %s "
            "AND (i.sender_id IS NULL OR i.sender_id = %s) "
            "AND (i.project IS NULL OR i.project = %s) "
            "AND i.state IN ('armed', 'fired') AND i.expires_at > %s "
            "AND (i.last_fired_at IS NULL OR i.last_fired_at <= %s - i.cooldown_s) "
            "ORDER BY i.id, t.entry LIMIT %s",
            (list(terms), *_scope_values(scope), scope.project, now, now, limit),
        )
        return [(int(i), tuple(entry)) for i, entry in rows]

    def fire_all(
        self, intent_ids: Sequence[int], *, now: float, session_key: str, excerpt: str
    ) -> list[int]:
        fired: list[int] = []
        with self.db.transaction() as conn:
            for intent_id in intent_ids:
                row = conn.execute(
                    "UPDATE intents SET fire_count = fire_count + 1, last_fired_at = %(now)s, "
                    "state = CASE WHEN fire_count + 1 >= max_fires THEN 'done' ELSE 'fired' END, "
                    "ended_at = CASE WHEN fire_count + 1 >= max_fires THEN %(now)s ELSE NULL END "
                    "WHERE id = %(id)s AND state IN ('armed', 'fired') "
                    "AND fire_count < max_fires "
                    "AND (last_fired_at IS NULL OR last_fired_at <= %(now)s - cooldown_s) "
                    "AND expires_at > %(now)s RETURNING state",
                    {"now": now, "id": intent_id},
                ).fetchone()
                if row is None:
                    continue
                fired.append(intent_id)
                conn.execute(
                    "INSERT INTO intent_fires (intent_id, fired_at, session_key, excerpt) "
                    "VALUES (%s, %s, %s, %s)",
                    (intent_id, now, session_key, excerpt),
                )
                if row[0] == "done":
                    conn.execute("DELETE FROM intent_triggers WHERE intent_id = %s", (intent_id,))
        return fired
