"""The gateway's durable inbound queue, de-duplication records, delivery records and session
leases: the repository behind app/gateway/queue.py.

    store = SqliteQueueStore(db, claimant=None)     # applies the gateway's migration set
    queue_id = store.accept("telegram", "42:7", key, "owner", message_json, now)
    claimed = store.claim_next(key)                 # the messages of one turn, now 'running'
    store.finish(claimed.turn_id, now)

Messages are stored as the caller's JSON text: this layer knows nothing of channels. Times are
POSIX seconds passed in by the caller.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from memory.store.db import Database
from memory.store.gateway_schema import GATEWAY
from memory.store.schema import apply


@dataclass(frozen=True)
class StoredMessage:
    """One queued message as stored: its queue id (the order of arrival) and JSON text."""

    id: int
    sender_role: str
    message_json: str


@dataclass(frozen=True)
class ClaimedTurn:
    """The messages one turn answers, claimed (state 'running') for this store's claimant."""

    turn_id: int
    session_key: str
    messages: tuple[StoredMessage, ...]
    resumed: bool  # claimed before, by a process that stopped before answering


@dataclass(frozen=True)
class Delivery:
    """One part of a reply the platform accepted."""

    channel: str
    chat_id: str
    message_id: str
    thread_id: str | None


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a session's lease: a process (by instance id) answering a message on `channel`."""

    holder: str
    pid: int
    host: str
    channel: str


CLAIM_STALE_S = 30.0  # a claiming process silent this long is gone: its claims are taken over


class QueueStore(Protocol):
    """The inbound queue, de-duplication, deliveries and session leases. What every
    implementation promises:

    - De-duplication: `(channel, dedup_key)` is accepted at most once while its record is kept
      (at least until `prune` drops records older than its cutoff). `accept` records the key and
      queues the message in one transaction: both or neither.
    - Ordering: queue ids grow in arrival order; `pending_sessions` lists sessions by their
      oldest queued message; a claimed turn's messages are in arrival order.
    - Exactly-once claiming: `claim_next` moves the messages it returns from 'queued' to
      'running' in one transaction, so two callers never claim the same message. An interrupted
      turn (queued again by `recover`) is claimed again with the same turn id and grouping.
    - Claimants: a store with a `claimant` queues, recovers and claims only its own messages; the
      store with claimant None never claims another's.
    - `finish` marks a turn's messages 'done' and its deliveries final in one transaction;
      `record_delivery` replaces the record of the same (turn id, part).
    - Leases: at most one holder per session key; `acquire_lease` checks and takes it in one
      transaction.
    - Several processes: `recover` re-queues only the claims of processes that are gone (no
      heartbeat for `stale_s`, or not running), so a live process's running turn is never run
      twice, and a dead one's is taken over.
    """

    def accept(
        self,
        channel: str,
        dedup_key: str,
        session_key: str,
        sender_role: str,
        message_json: str,
        now: float,
    ) -> int | None:
        """Queue a message; its queue id, or None when (channel, dedup_key) was seen before."""
        ...

    def first_sight(self, channel: str, dedup_key: str, now: float) -> bool:
        """Record a platform id without queueing anything; False when it was seen before."""
        ...

    def beat(self, me: LeaseHolder, now: float) -> None:
        """Record that process `me` is alive: its claims are kept while its heartbeat is newer
        than `recover`'s `stale_s`."""
        ...

    def recover(
        self,
        me: str | None = None,
        *,
        now: float | None = None,
        stale_s: float = CLAIM_STALE_S,
        alive: Callable[[LeaseHolder], bool] | None = None,
    ) -> int:
        """Queue this claimant's 'running' messages again whose claiming process is gone —
        claimed by no known process, or by one whose heartbeat (`beat`) is older than `stale_s`
        or which `alive` says is not running — never `me`'s nor another live process's; in one
        transaction. Returns how many."""
        ...

    def pending_sessions(self) -> list[str]: ...

    def has_queued(self, session_key: str) -> bool: ...

    def claim_next(self, session_key: str, holder: str | None = None) -> ClaimedTurn | None:
        """Claim the next turn of `session_key`: an interrupted turn's messages as they were
        grouped, else every queued message; None when nothing is queued. `holder`: the claiming
        process (recorded, so that `recover` elsewhere leaves its claim while it lives)."""
        ...

    def record_delivery(self, turn_id: int, part: int, sent: Delivery, now: float) -> None: ...

    def deliveries(self, turn_id: int) -> list[Delivery]:
        """The delivered parts of a turn's reply, by part number."""
        ...

    def finish(self, turn_id: int, now: float) -> None: ...

    def prune(self, cutoff: float) -> None:
        """Forget de-duplication records, answered messages and their deliveries older than
        `cutoff`, other (closed) claimants' unanswered messages received before it, and the
        heartbeats of processes silent since then."""
        ...

    def counts(self) -> dict[str, int]:
        """How many messages are in each state ('queued', 'running', 'done')."""
        ...

    def acquire_lease(
        self,
        session_key: str,
        me: LeaseHolder,
        now: float,
        stale_s: float,
        alive: Callable[[LeaseHolder], bool],
    ) -> LeaseHolder | None:
        """Take (or renew) the lease for `me`; returns the other holder instead when one holds
        it, `alive(other)` says it is running and its heartbeat is newer than `stale_s`."""
        ...

    def renew_lease(self, session_key: str, me: LeaseHolder, now: float) -> None: ...

    def release_lease(self, session_key: str, me: LeaseHolder) -> None: ...


def gone_claims(
    rows: list[Any],
    me: str | None,
    now: float,
    stale_s: float,
    alive: Callable[[LeaseHolder], bool] | None,
) -> list[int]:
    """Of running messages (id, claimed_by, pid, host, heartbeat_at — the last three None when
    the claimer never beat), the ids whose claiming process is gone (both backends' rule)."""
    gone = []
    for qid, holder, pid, host, beat_at in rows:
        if holder is not None and holder == me:
            continue  # this process's own running turn
        fresh = holder is not None and beat_at is not None and beat_at > now - stale_s
        if fresh and (alive is None or alive(LeaseHolder(holder, int(pid), str(host), ""))):
            continue  # a live process's claim: never taken
        gone.append(int(qid))
    return gone


class SqliteQueueStore:
    """`QueueStore` over the agent database (tables `inbound_queue`, `inbound_dedup`,
    `outbound_deliveries`, `session_leases`). Every method is one short transaction."""

    def __init__(self, db: Database, *, claimant: str | None = None) -> None:
        self.db = db
        self.claimant = claimant
        with db.lock:
            apply(db.conn, GATEWAY)

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
                "INSERT OR IGNORE INTO inbound_dedup VALUES (?, ?, ?)", (channel, dedup_key, now)
            )
            if seen.rowcount == 0:
                return None
            cur = conn.execute(
                "INSERT INTO inbound_queue (session_key, channel, sender_role, message, state, "
                "received_at, claimant) VALUES (?, ?, ?, ?, 'queued', ?, ?)",
                (session_key, channel, sender_role, message_json, now, self.claimant),
            )
            return int(cur.lastrowid)

    def first_sight(self, channel: str, dedup_key: str, now: float) -> bool:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO inbound_dedup VALUES (?, ?, ?)", (channel, dedup_key, now)
            )
            return bool(cur.rowcount)

    def beat(self, me: LeaseHolder, now: float) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO queue_claimants VALUES (?, ?, ?, ?)",
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
            rows = conn.execute(
                "SELECT q.id, q.claimed_by, c.pid, c.host, c.heartbeat_at FROM inbound_queue q "
                "LEFT JOIN queue_claimants c ON c.holder = q.claimed_by "
                "WHERE q.state = 'running' AND q.claimant IS ?",
                (self.claimant,),
            ).fetchall()
            ids = gone_claims(rows, me, time.time() if now is None else now, stale_s, alive)
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                conn.execute(
                    "UPDATE inbound_queue SET state = 'queued', claimed_by = NULL "
                    f"WHERE id IN ({','.join('?' * len(part))})",
                    part,
                )
            return len(ids)

    def pending_sessions(self) -> list[str]:
        rows = self.db.execute(
            "SELECT session_key, min(id) FROM inbound_queue WHERE state = 'queued' "
            "AND claimant IS ? GROUP BY session_key ORDER BY min(id)",
            (self.claimant,),
        )
        return [row[0] for row in rows]

    def has_queued(self, session_key: str) -> bool:
        rows = self.db.execute(
            "SELECT 1 FROM inbound_queue WHERE state = 'queued' AND session_key = ? "
            "AND claimant IS ? LIMIT 1",
            (session_key, self.claimant),
        )
        return bool(rows)

    def claim_next(self, session_key: str, holder: str | None = None) -> ClaimedTurn | None:
        with self.db.transaction() as conn:
            rows = conn.execute(
                "SELECT id, sender_role, message, turn_id FROM inbound_queue "
                "WHERE state = 'queued' AND session_key = ? AND claimant IS ? ORDER BY id",
                (session_key, self.claimant),
            ).fetchall()
            if not rows:
                return None
            # An interrupted turn keeps its grouping; otherwise every message not yet in a turn.
            first_turn = rows[0][3]
            picked = [r for r in rows if r[3] == first_turn]
            turn_id = int(first_turn or picked[0][0])
            ids = [r[0] for r in picked]
            marks = ",".join("?" * len(ids))
            conn.execute(
                "UPDATE inbound_queue SET state = 'running', turn_id = ?, claimed_by = ? "
                f"WHERE id IN ({marks})",
                (turn_id, holder, *ids),
            )
        messages = tuple(StoredMessage(int(r[0]), r[1], r[2]) for r in picked)
        return ClaimedTurn(turn_id, session_key, messages, resumed=first_turn is not None)

    # -- outbound -------------------------------------------------------------------------

    def record_delivery(self, turn_id: int, part: int, sent: Delivery, now: float) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO outbound_deliveries (turn_id, part, channel, chat_id, "
                "message_id, thread_id, final, delivered_at) VALUES (?, ?, ?, ?, ?, ?, 0, ?)",
                (turn_id, part, sent.channel, sent.chat_id, sent.message_id, sent.thread_id, now),
            )

    def deliveries(self, turn_id: int) -> list[Delivery]:
        rows = self.db.execute(
            "SELECT channel, chat_id, message_id, thread_id FROM outbound_deliveries "
            "WHERE turn_id = ? ORDER BY part",
            (turn_id,),
        )
        return [Delivery(r[0], r[1], r[2], r[3]) for r in rows]

    def finish(self, turn_id: int, now: float) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE inbound_queue SET state = 'done', done_at = ? WHERE turn_id = ?",
                (now, turn_id),
            )
            conn.execute("UPDATE outbound_deliveries SET final = 1 WHERE turn_id = ?", (turn_id,))

    def prune(self, cutoff: float) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM inbound_dedup WHERE seen_at < ?", (cutoff,))
            conn.execute(
                "DELETE FROM outbound_deliveries WHERE turn_id IN (SELECT turn_id FROM "
                "inbound_queue WHERE state = 'done' AND done_at < ?)",
                (cutoff,),
            )
            conn.execute(
                "DELETE FROM inbound_queue WHERE state = 'done' AND done_at < ?", (cutoff,)
            )
            # A closed terminal's unanswered messages: nobody else may answer them.
            conn.execute(
                "DELETE FROM inbound_queue WHERE claimant IS NOT NULL AND claimant IS NOT ? "
                "AND state != 'done' AND received_at < ?",
                (self.claimant, cutoff),
            )
            # Processes silent since the cutoff (a live one beats every few seconds).
            conn.execute("DELETE FROM queue_claimants WHERE heartbeat_at < ?", (cutoff,))

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
            row = conn.execute(
                "SELECT holder, pid, host, channel, heartbeat_at FROM session_leases "
                "WHERE session_key = ?",
                (session_key,),
            ).fetchone()
            if row is not None and row[0] != me.holder:
                other = LeaseHolder(row[0], int(row[1]), row[2], row[3])
                if alive(other) and row[4] > now - stale_s:
                    return other
            conn.execute(
                "INSERT OR REPLACE INTO session_leases VALUES (?, ?, ?, ?, ?, ?)",
                (session_key, me.holder, me.pid, me.host, me.channel, now),
            )
        return None

    def renew_lease(self, session_key: str, me: LeaseHolder, now: float) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE session_leases SET heartbeat_at = ? WHERE session_key = ? AND holder = ?",
                (now, session_key, me.holder),
            )

    def release_lease(self, session_key: str, me: LeaseHolder) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "DELETE FROM session_leases WHERE session_key = ? AND holder = ?",
                (session_key, me.holder),
            )
