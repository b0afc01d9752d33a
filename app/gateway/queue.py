"""The gateway's durable inbound queue, de-duplication records and delivery records.

Every method is one short SQLite transaction; the gateway calls them in a worker thread.

    store = GatewayStore(db)                       # applies the gateway's migration set
    row = store.accept(msg, key, "person")         # None: a redelivery, already accepted
    batch = store.next_batch(str(key))             # claims the queued messages of one turn
    store.record_delivery(batch.turn_id, 0, sent)  # right after the platform accepted it
    store.finish(batch.turn_id)                    # the turn is answered: never run again

A store with a `claimant` (the terminal of one `pinch chat` process) queues and claims only its
own messages; the gateway's store (claimant None) never claims them. Turns of one session are
serialised across processes by a lease (`acquire_lease` / `renew_lease` / `release_lease`).

A message is in the queue from `accept` until `finish`; a kill between the two only means the
turn runs again after the restart, editing the reply it already sent (`deliveries`) instead of
sending another.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

from app.gateway.schema import GATEWAY
from channels.base import Attachment, InboundMessage, SentMessage
from memory.store.db import Database
from memory.store.liveness import pid_alive
from memory.store.schema import apply

DEDUP_MIN_S = 600.0  # Slack retries for about 5 minutes; keep ids at least twice that


@dataclass(frozen=True)
class QueuedMessage:
    id: int
    session_key: str
    sender_role: str
    message: InboundMessage


@dataclass(frozen=True)
class Batch:
    """The messages one turn answers (several when they came in quick succession)."""

    turn_id: int
    session_key: str
    messages: tuple[QueuedMessage, ...]
    resumed: bool = False  # claimed before, by a gateway that stopped before answering


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a session's lease: a process (by instance id) answering a message on `channel`."""

    holder: str
    pid: int
    host: str
    channel: str


def this_process(channel: str, instance: str) -> LeaseHolder:
    return LeaseHolder(instance, os.getpid(), socket.gethostname(), channel)


def message_to_json(msg: InboundMessage) -> str:
    return json.dumps(asdict(msg), ensure_ascii=False)


def message_from_json(text: str) -> InboundMessage:
    data: dict[str, Any] = json.loads(text)
    data["attachments"] = tuple(Attachment(**a) for a in data.get("attachments") or ())
    return InboundMessage(**data)


class GatewayStore:
    def __init__(self, db: Database, *, claimant: str | None = None) -> None:
        self.db = db
        self.claimant = claimant
        with db.lock:
            apply(db.conn, GATEWAY)

    # -- inbound --------------------------------------------------------------------------

    def accept(self, msg: InboundMessage, session_key: str, sender_role: str) -> int | None:
        """Queue `msg` durably (committed on return) and return its queue id, or None when the
        same platform message (channel, dedup_key) was accepted before."""
        now = time.time()
        with self.db.transaction() as conn:
            seen = conn.execute(
                "INSERT OR IGNORE INTO inbound_dedup VALUES (?, ?, ?)",
                (msg.channel, msg.dedup_key, now),
            )
            if seen.rowcount == 0:
                return None
            cur = conn.execute(
                "INSERT INTO inbound_queue (session_key, channel, sender_role, message, state, "
                "received_at, claimant) VALUES (?, ?, ?, ?, 'queued', ?, ?)",
                (session_key, msg.channel, sender_role, message_to_json(msg), now, self.claimant),
            )
            return int(cur.lastrowid)

    def first_sight(self, msg: InboundMessage) -> bool:
        """Record `msg`'s platform id without queueing it (a message answered by the gateway
        itself, such as a pairing notice); False when it was seen before."""
        with self.db.transaction() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO inbound_dedup VALUES (?, ?, ?)",
                (msg.channel, msg.dedup_key, time.time()),
            )
            return bool(cur.rowcount)

    def recover(self) -> int:
        """After a restart: turns that were running are queued again (keeping their grouping,
        so the reply they began is edited, not repeated). Returns how many messages."""
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE inbound_queue SET state = 'queued' WHERE state = 'running' "
                "AND claimant IS ?",
                (self.claimant,),
            )
            return int(cur.rowcount)

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

    def next_batch(self, session_key: str) -> Batch | None:
        """Claim the next turn's messages of `session_key`: an interrupted turn's messages as
        they were grouped, else every queued message (in arrival order)."""
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
                f"UPDATE inbound_queue SET state = 'running', turn_id = ? WHERE id IN ({marks})",
                (turn_id, *ids),
            )
        messages = tuple(
            QueuedMessage(r[0], session_key, r[1], message_from_json(r[2])) for r in picked
        )
        return Batch(turn_id, session_key, messages, resumed=first_turn is not None)

    # -- outbound -------------------------------------------------------------------------

    def record_delivery(self, turn_id: int, part: int, sent: SentMessage) -> None:
        """Remember that part `part` of turn `turn_id`'s reply is on the platform as `sent`."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO outbound_deliveries (turn_id, part, channel, chat_id, "
                "message_id, thread_id, final, delivered_at) VALUES (?, ?, ?, ?, ?, ?, 0, ?)",
                (
                    turn_id,
                    part,
                    sent.channel,
                    sent.chat_id,
                    sent.message_id,
                    sent.thread_id,
                    time.time(),
                ),
            )

    def deliveries(self, turn_id: int) -> list[SentMessage]:
        rows = self.db.execute(
            "SELECT channel, chat_id, message_id, thread_id FROM outbound_deliveries "
            "WHERE turn_id = ? ORDER BY part",
            (turn_id,),
        )
        return [SentMessage(r[0], r[1], r[2], r[3]) for r in rows]

    def finish(self, turn_id: int) -> None:
        """The turn's reply is delivered: its messages are answered and never run again."""
        now = time.time()
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE inbound_queue SET state = 'done', done_at = ? WHERE turn_id = ?",
                (now, turn_id),
            )
            conn.execute("UPDATE outbound_deliveries SET final = 1 WHERE turn_id = ?", (turn_id,))

    def prune(self, dedup_ttl_s: float) -> None:
        """Forget de-duplication ids older than `dedup_ttl_s` (at least 10 minutes) and
        answered messages and their delivery records older than that."""
        cutoff = time.time() - max(dedup_ttl_s, DEDUP_MIN_S)
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

    def counts(self) -> dict[str, int]:
        rows = self.db.execute("SELECT state, count(*) FROM inbound_queue GROUP BY state")
        return {r[0]: int(r[1]) for r in rows}

    # -- one turn per session across processes ----------------------------------------------

    def acquire_lease(
        self, session_key: str, me: LeaseHolder, stale_s: float
    ) -> LeaseHolder | None:
        """Take (or renew) `session_key`'s lease for `me`; returns the other holder instead
        when a live process holds it (its heartbeat newer than `stale_s`, its pid alive)."""
        now = time.time()
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT holder, pid, host, channel, heartbeat_at FROM session_leases "
                "WHERE session_key = ?",
                (session_key,),
            ).fetchone()
            if row is not None and row[0] != me.holder:
                other = LeaseHolder(row[0], int(row[1]), row[2], row[3])
                dead = other.host == me.host and not pid_alive(other.pid)
                if not dead and row[4] > now - stale_s:
                    return other
            conn.execute(
                "INSERT OR REPLACE INTO session_leases VALUES (?, ?, ?, ?, ?, ?)",
                (session_key, me.holder, me.pid, me.host, me.channel, now),
            )
        return None

    def renew_lease(self, session_key: str, me: LeaseHolder) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE session_leases SET heartbeat_at = ? WHERE session_key = ? AND holder = ?",
                (time.time(), session_key, me.holder),
            )

    def release_lease(self, session_key: str, me: LeaseHolder) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "DELETE FROM session_leases WHERE session_key = ? AND holder = ?",
                (session_key, me.holder),
            )
