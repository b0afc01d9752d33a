"""`QueueStore` on PostgreSQL: the inbound queue, de-duplication, deliveries and session leases
(tables of the "gateway" set), shared by every gateway process on the database.

How the promises are kept here:
- de-duplication: `INSERT … ON CONFLICT DO NOTHING` on the (channel, dedup_key) key, in the
  same transaction as the queue row;
- arrival order within a session: `accept` takes a transaction-level advisory lock of the
  session key before drawing the id, so a session's ids commit in the order they were drawn
  (a claim never sees a later message of a session before an earlier one);
- exactly-once claiming: `claim_next` serialises the claimers of one session on the same
  advisory lock and takes the rows `FOR UPDATE SKIP LOCKED` (a row another transaction is
  finishing or recovering is left to it), then marks them running in the same transaction;
- leases: the lease row is created with `ON CONFLICT DO NOTHING` and otherwise checked and
  replaced under `FOR UPDATE`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from memory.store.postgres.database import PgDatabase, one_row
from memory.store.queue_store import (
    CLAIM_STALE_S,
    ClaimedTurn,
    Delivery,
    LeaseHolder,
    StoredMessage,
    gone_claims,
)


def _lock_session(conn: Any, session_key: str) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 2))", (f"queue:{session_key}",))


class PgQueueStore:
    """`QueueStore` on PostgreSQL (memory/store/queue_store.py states the promises)."""

    def __init__(self, db: PgDatabase, *, claimant: str | None = None) -> None:
        self.db = db
        self.claimant = claimant

    # -- inbound --------------------------------------------------------------------------

    def accept(
        self,
        channel: str,
        dedup_key: str,
        session_key: str,
        sender_role: str,
        message_json: str,
        now: float,
    ) -> int | None:
        with self.db.transaction() as conn:
            seen = conn.execute(
                "INSERT INTO inbound_dedup VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (channel, dedup_key, now),
            )
            if seen.rowcount == 0:
                return None
            _lock_session(conn, session_key)
            row = conn.execute(
                "INSERT INTO inbound_queue (session_key, channel, sender_role, message, state, "
                "received_at, claimant) VALUES (%s, %s, %s, %s, 'queued', %s, %s) RETURNING id",
                (session_key, channel, sender_role, message_json, now, self.claimant),
            ).fetchone()
            return int(one_row(row)[0])

    def first_sight(self, channel: str, dedup_key: str, now: float) -> bool:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO inbound_dedup VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (channel, dedup_key, now),
            )
            return bool(cur.rowcount)

    def beat(self, me: LeaseHolder, now: float) -> None:
        self.db.execute(
            "INSERT INTO queue_claimants VALUES (%s, %s, %s, %s) ON CONFLICT (holder) DO UPDATE "
            "SET pid = excluded.pid, host = excluded.host, heartbeat_at = excluded.heartbeat_at",
            (me.holder, me.pid, me.host, now),
        )

    def recover(
        self,
        me: str | None = None,
        *,
        now: float | None = None,
        stale_s: float = CLAIM_STALE_S,
        alive: Callable[[LeaseHolder], bool] | None = None,
    ) -> int:
        with self.db.transaction() as conn:
            # The running rows, locked (a row another transaction is finishing is left to it);
            # the claimer's heartbeat is read in the same snapshot.
            rows = conn.execute(
                "SELECT q.id, q.claimed_by, c.pid, c.host, c.heartbeat_at FROM inbound_queue q "
                "LEFT JOIN queue_claimants c ON c.holder = q.claimed_by "
                "WHERE q.state = 'running' AND q.claimant IS NOT DISTINCT FROM %s "
                "FOR UPDATE OF q SKIP LOCKED",
                (self.claimant,),
            ).fetchall()
            ids = gone_claims(rows, me, time.time() if now is None else now, stale_s, alive)
            if ids:
                conn.execute(
                    "UPDATE inbound_queue SET state = 'queued', claimed_by = NULL "
                    "WHERE id = ANY(%s)",
                    (ids,),
                )
            return len(ids)

    def pending_sessions(self) -> list[str]:
        rows = self.db.execute(
            "SELECT session_key FROM inbound_queue WHERE state = 'queued' "
            "AND claimant IS NOT DISTINCT FROM %s GROUP BY session_key ORDER BY min(id)",
            (self.claimant,),
        )
        return [row[0] for row in rows]

    def has_queued(self, session_key: str) -> bool:
        rows = self.db.execute(
            "SELECT 1 FROM inbound_queue WHERE state = 'queued' AND session_key = %s "
            "AND claimant IS NOT DISTINCT FROM %s LIMIT 1",
            (session_key, self.claimant),
        )
        return bool(rows)

    def claim_next(self, session_key: str, holder: str | None = None) -> ClaimedTurn | None:
        with self.db.transaction() as conn:
            _lock_session(conn, session_key)
            rows = conn.execute(
                "SELECT id, sender_role, message, turn_id FROM inbound_queue "
                "WHERE state = 'queued' AND session_key = %s "
                "AND claimant IS NOT DISTINCT FROM %s ORDER BY id FOR UPDATE SKIP LOCKED",
                (session_key, self.claimant),
            ).fetchall()
            if not rows:
                return None
            # An interrupted turn keeps its grouping; otherwise every message not yet in a turn.
            first_turn = rows[0][3]
            picked = [r for r in rows if r[3] == first_turn]
            turn_id = int(first_turn or picked[0][0])
            conn.execute(
                "UPDATE inbound_queue SET state = 'running', turn_id = %s, claimed_by = %s "
                "WHERE id = ANY(%s)",
                (turn_id, holder, [int(r[0]) for r in picked]),
            )
        messages = tuple(StoredMessage(int(r[0]), r[1], r[2]) for r in picked)
        return ClaimedTurn(turn_id, session_key, messages, resumed=first_turn is not None)

    # -- outbound -------------------------------------------------------------------------

    def record_delivery(self, turn_id: int, part: int, sent: Delivery, now: float) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO outbound_deliveries (turn_id, part, channel, chat_id, message_id, "
                "thread_id, final, delivered_at) VALUES (%s, %s, %s, %s, %s, %s, 0, %s) "
                "ON CONFLICT (turn_id, part) DO UPDATE SET channel = excluded.channel, "
                "chat_id = excluded.chat_id, message_id = excluded.message_id, "
                "thread_id = excluded.thread_id, final = 0, delivered_at = excluded.delivered_at",
                (turn_id, part, sent.channel, sent.chat_id, sent.message_id, sent.thread_id, now),
            )

    def deliveries(self, turn_id: int) -> list[Delivery]:
        rows = self.db.execute(
            "SELECT channel, chat_id, message_id, thread_id FROM outbound_deliveries "
            "WHERE turn_id = %s ORDER BY part",
            (turn_id,),
        )
        return [Delivery(r[0], r[1], r[2], r[3]) for r in rows]

    def finish(self, turn_id: int, now: float) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE inbound_queue SET state = 'done', done_at = %s WHERE turn_id = %s",
                (now, turn_id),
            )
            conn.execute("UPDATE outbound_deliveries SET final = 1 WHERE turn_id = %s", (turn_id,))

    def prune(self, cutoff: float) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM inbound_dedup WHERE seen_at < %s", (cutoff,))
            conn.execute(
                "DELETE FROM outbound_deliveries WHERE turn_id IN (SELECT turn_id FROM "
                "inbound_queue WHERE state = 'done' AND done_at < %s)",
                (cutoff,),
            )
            conn.execute(
                "DELETE FROM inbound_queue WHERE state = 'done' AND done_at < %s", (cutoff,)
            )
            # A closed terminal's unanswered messages: nobody else may answer them.
            conn.execute(
                "DELETE FROM inbound_queue WHERE claimant IS NOT NULL "
                "AND claimant IS DISTINCT FROM %s AND state != 'done' AND received_at < %s",
                (self.claimant, cutoff),
            )
            # Processes silent since the cutoff (a live one beats every few seconds).
            conn.execute("DELETE FROM queue_claimants WHERE heartbeat_at < %s", (cutoff,))

    def counts(self) -> dict[str, int]:
        rows = self.db.execute("SELECT state, count(*) FROM inbound_queue GROUP BY state")
        return {r[0]: int(r[1]) for r in rows}

    # -- one turn per session across processes ----------------------------------------------

    def acquire_lease(
        self,
        session_key: str,
        me: LeaseHolder,
        now: float,
        stale_s: float,
        alive: Callable[[LeaseHolder], bool],
    ) -> LeaseHolder | None:
        with self.db.transaction() as conn:
            made = conn.execute(
                "INSERT INTO session_leases VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (session_key, me.holder, me.pid, me.host, me.channel, now),
            )
            if made.rowcount == 1:
                return None
            row = conn.execute(
                "SELECT holder, pid, host, channel, heartbeat_at FROM session_leases "
                "WHERE session_key = %s FOR UPDATE",
                (session_key,),
            ).fetchone()
            if row is not None and row[0] != me.holder:
                other = LeaseHolder(row[0], int(row[1]), row[2], row[3])
                if alive(other) and row[4] > now - stale_s:
                    return other
            conn.execute(  # an upsert: the row may have been released meanwhile
                "INSERT INTO session_leases VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (session_key) DO UPDATE SET holder = excluded.holder, "
                "pid = excluded.pid, host = excluded.host, channel = excluded.channel, "
                "heartbeat_at = excluded.heartbeat_at",
                (session_key, me.holder, me.pid, me.host, me.channel, now),
            )
        return None

    def renew_lease(self, session_key: str, me: LeaseHolder, now: float) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE session_leases SET heartbeat_at = %s WHERE session_key = %s "
                "AND holder = %s",
                (now, session_key, me.holder),
            )

    def release_lease(self, session_key: str, me: LeaseHolder) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "DELETE FROM session_leases WHERE session_key = %s AND holder = %s",
                (session_key, me.holder),
            )
