"""The gateway's durable inbound queue, de-duplication records and delivery records.

The rules (message JSON, de-duplication window, lease liveness) over a `QueueStore` repository
(memory/store/queue_store.py), where every method is one short transaction; the gateway calls
them in a worker thread.

    store = GatewayStore(SqliteQueueStore(db))     # applies the gateway's migration set
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

from channels.base import InboundMessage, SentMessage
from common.attachment import Attachment
from memory.store.liveness import pid_alive
from memory.store.queue_store import ClaimedTurn, Delivery, LeaseHolder, QueueStore

__all__ = ["Batch", "GatewayStore", "LeaseHolder", "QueuedMessage", "this_process"]

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


def this_process(channel: str, instance: str) -> LeaseHolder:
    return LeaseHolder(instance, os.getpid(), socket.gethostname(), channel)


def message_to_json(msg: InboundMessage) -> str:
    return json.dumps(asdict(msg), ensure_ascii=False)


def message_from_json(text: str) -> InboundMessage:
    data: dict[str, Any] = json.loads(text)
    data["attachments"] = tuple(Attachment(**a) for a in data.get("attachments") or ())
    return InboundMessage(**data)


def _batch(claimed: ClaimedTurn) -> Batch:
    messages = tuple(
        QueuedMessage(m.id, claimed.session_key, m.sender_role, message_from_json(m.message_json))
        for m in claimed.messages
    )
    return Batch(claimed.turn_id, claimed.session_key, messages, resumed=claimed.resumed)


class GatewayStore:
    """The gateway's queue in terms of channel messages, over a `QueueStore`."""

    def __init__(self, store: QueueStore) -> None:
        self.store = store
        # The process whose claims this store makes (set by the Gateway it serves): recorded
        # with each claim, so another process's `recover` leaves them while it lives.
        self.me: LeaseHolder | None = None

    # -- inbound --------------------------------------------------------------------------

    def accept(self, msg: InboundMessage, session_key: str, sender_role: str) -> int | None:
        """Queue `msg` durably (committed on return) and return its queue id, or None when the
        same platform message (channel, dedup_key) was accepted before."""
        return self.store.accept(
            msg.channel, msg.dedup_key, session_key, sender_role, message_to_json(msg), time.time()
        )

    def first_sight(self, msg: InboundMessage) -> bool:
        """Record `msg`'s platform id without queueing it (a message answered by the gateway
        itself, such as a pairing notice); False when it was seen before."""
        return self.store.first_sight(msg.channel, msg.dedup_key, time.time())

    def recover(self) -> int:
        """Turns whose process is gone (a restart, or another gateway that died) are queued
        again, keeping their grouping, so the reply they began is edited, not repeated; a live
        process's running turn is left to it. Returns how many messages."""
        me = self.me
        if me is None:
            return self.store.recover()

        def alive(other: LeaseHolder) -> bool:
            return not (other.host == me.host and not pid_alive(other.pid))

        return self.store.recover(me.holder, now=time.time(), alive=alive)

    def beat(self) -> None:
        """This process is alive: its claims are kept (called every few seconds)."""
        if self.me is not None:
            self.store.beat(self.me, time.time())

    def give_up(self) -> None:
        """This gateway stopped: its claims (turns it cancelled) are free for the next one."""
        if self.me is not None:
            self.store.beat(self.me, 0.0)  # a heartbeat older than any stale_s

    def pending_sessions(self) -> list[str]:
        return self.store.pending_sessions()

    def has_queued(self, session_key: str) -> bool:
        return self.store.has_queued(session_key)

    def next_batch(self, session_key: str) -> Batch | None:
        """Claim the next turn's messages of `session_key`: an interrupted turn's messages as
        they were grouped, else every queued message (in arrival order)."""
        claimed = self.store.claim_next(session_key, self.me.holder if self.me else None)
        return _batch(claimed) if claimed is not None else None

    # -- outbound -------------------------------------------------------------------------

    def record_delivery(self, turn_id: int, part: int, sent: SentMessage) -> None:
        """Remember that part `part` of turn `turn_id`'s reply is on the platform as `sent`."""
        delivery = Delivery(sent.channel, sent.chat_id, sent.message_id, sent.thread_id)
        self.store.record_delivery(turn_id, part, delivery, time.time())

    def deliveries(self, turn_id: int) -> list[SentMessage]:
        return [
            SentMessage(d.channel, d.chat_id, d.message_id, d.thread_id)
            for d in self.store.deliveries(turn_id)
        ]

    def finish(self, turn_id: int) -> None:
        """The turn's reply is delivered: its messages are answered and never run again."""
        self.store.finish(turn_id, time.time())

    def prune(self, dedup_ttl_s: float) -> None:
        """Forget de-duplication ids older than `dedup_ttl_s` (at least 10 minutes) and
        answered messages and their delivery records older than that."""
        self.store.prune(time.time() - max(dedup_ttl_s, DEDUP_MIN_S))

    def counts(self) -> dict[str, int]:
        return self.store.counts()

    # -- one turn per session across processes ----------------------------------------------

    def acquire_lease(
        self, session_key: str, me: LeaseHolder, stale_s: float
    ) -> LeaseHolder | None:
        """Take (or renew) `session_key`'s lease for `me`; returns the other holder instead
        when a live process holds it (its heartbeat newer than `stale_s`, its pid alive)."""

        def alive(other: LeaseHolder) -> bool:
            return not (other.host == me.host and not pid_alive(other.pid))

        return self.store.acquire_lease(session_key, me, time.time(), stale_s, alive)

    def renew_lease(self, session_key: str, me: LeaseHolder) -> None:
        self.store.renew_lease(session_key, me, time.time())

    def release_lease(self, session_key: str, me: LeaseHolder) -> None:
        self.store.release_lease(session_key, me)
