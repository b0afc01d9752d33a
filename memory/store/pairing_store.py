"""Pairing requests and approved senders: the repository behind the gateway's access rules.

    store = SqlitePairingStore(db)                  # applies the gateway's migration set
    store.create_request(channel, sender, name, code, now, ttl_s=3600, max_pending=3)
    store.decide(code, approve=True, now=now)       # None: no such pending, unexpired code

Times are POSIX seconds passed in by the caller (its clock), so expiry is the caller's rule and
a test can move time. The rules of who is answered live in app/gateway/access.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

from memory.store.db import Database
from memory.store.gateway_schema import GATEWAY
from memory.store.schema import apply

PairingState = Literal["pending", "approved", "rejected"]


@dataclass(frozen=True)
class PairingRequest:
    """A code an unknown sender got; `state` moves from pending to approved or rejected once."""

    code: str
    channel: str
    sender_id: str
    sender_name: str | None
    state: str
    created_at: float
    expires_at: float


class ApprovedSender(NamedTuple):
    """A person the owner approved for direct messages on `channel`."""

    channel: str
    sender_id: str
    sender_name: str | None
    approved_at: float


class PairingStore(Protocol):
    """Pairing requests and approvals. What every implementation promises:

    - `(channel, sender_id)` is approved at most once: approving again replaces the record.
    - `create_request` is atomic: counting the channel's pending, unexpired codes and adding the
      new one happen in one transaction, so concurrent callers never exceed `max_pending`.
    - `decide` is atomic and decides a code once: it finds the pending, unexpired request with
      `code`, marks it approved/rejected and (approving) records the sender, in one transaction;
      a second `decide` of the same code returns None.
    - `latest` is the newest unexpired request of a sender (any state); `pending` lists pending,
      unexpired requests oldest first; `approved` lists approvals oldest first.
    - A request expires at `expires_at`: a request whose `expires_at` ≤ `now` counts as gone.
    """

    def is_approved(self, channel: str, sender_id: str) -> bool: ...

    def latest(self, channel: str, sender_id: str, now: float) -> PairingRequest | None: ...

    def create_request(
        self,
        channel: str,
        sender_id: str,
        sender_name: str | None,
        code: str,
        now: float,
        *,
        ttl_s: float,
        max_pending: int,
    ) -> PairingRequest | None:
        """A new pending request with `code`, or None when the channel already has
        `max_pending` pending, unexpired requests."""
        ...

    def pending(self, now: float) -> list[PairingRequest]: ...

    def approved(self) -> list[ApprovedSender]: ...

    def decide(self, code: str, *, approve: bool, now: float) -> PairingRequest | None:
        """Approve or reject the pending, unexpired request `code`; returns it in its new
        state, or None when there is none."""
        ...

    def revoke(self, channel: str, sender_id: str) -> bool:
        """Forget an approval; False when there was none."""
        ...

    def close(self) -> None:
        """Release the store's connection (a command-line run that opened it for itself)."""
        ...


_COLUMNS = "code, channel, sender_id, sender_name, state, created_at, expires_at"


def _request(row: Sequence[object]) -> PairingRequest:
    return PairingRequest(*row)  # type: ignore[arg-type]


class SqlitePairingStore:
    """`PairingStore` over the agent database (tables `pairing_requests`, `approved_senders`)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        with db.lock:
            apply(db.conn, GATEWAY)

    def is_approved(self, channel: str, sender_id: str) -> bool:
        rows = self.db.execute(
            "SELECT 1 FROM approved_senders WHERE channel = ? AND sender_id = ?",
            (channel, sender_id),
        )
        return bool(rows)

    def latest(self, channel: str, sender_id: str, now: float) -> PairingRequest | None:
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM pairing_requests WHERE channel = ? AND sender_id = ? "
            "AND expires_at > ? ORDER BY created_at DESC LIMIT 1",
            (channel, sender_id, now),
        )
        return _request(rows[0]) if rows else None

    def create_request(
        self,
        channel: str,
        sender_id: str,
        sender_name: str | None,
        code: str,
        now: float,
        *,
        ttl_s: float,
        max_pending: int,
    ) -> PairingRequest | None:
        with self.db.transaction() as conn:
            (pending,) = conn.execute(
                "SELECT count(*) FROM pairing_requests WHERE channel = ? AND state = 'pending' "
                "AND expires_at > ?",
                (channel, now),
            ).fetchone()
            if pending >= max_pending:
                return None
            conn.execute(
                "INSERT INTO pairing_requests (channel, sender_id, sender_name, code, state, "
                "created_at, expires_at) VALUES (?, ?, ?, ?, 'pending', ?, ?)",
                (channel, sender_id, sender_name, code, now, now + ttl_s),
            )
        return PairingRequest(code, channel, sender_id, sender_name, "pending", now, now + ttl_s)

    def pending(self, now: float) -> list[PairingRequest]:
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM pairing_requests WHERE state = 'pending' AND expires_at > ? "
            "ORDER BY created_at",
            (now,),
        )
        return [_request(r) for r in rows]

    def approved(self) -> list[ApprovedSender]:
        rows = self.db.execute(
            "SELECT channel, sender_id, sender_name, approved_at FROM approved_senders "
            "ORDER BY approved_at"
        )
        return [ApprovedSender(r[0], r[1], r[2], r[3]) for r in rows]

    def decide(self, code: str, *, approve: bool, now: float) -> PairingRequest | None:
        with self.db.transaction() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM pairing_requests WHERE code = ? AND state = 'pending' "
                "AND expires_at > ?",
                (code, now),
            ).fetchone()
            if row is None:
                return None
            req = _request(row)
            state = "approved" if approve else "rejected"
            conn.execute(
                "UPDATE pairing_requests SET state = ?, decided_at = ? WHERE code = ? "
                "AND state = 'pending'",
                (state, now, code),
            )
            if approve:
                conn.execute(
                    "INSERT OR REPLACE INTO approved_senders VALUES (?, ?, ?, ?)",
                    (req.channel, req.sender_id, req.sender_name, now),
                )
        return PairingRequest(
            req.code,
            req.channel,
            req.sender_id,
            req.sender_name,
            state,
            req.created_at,
            req.expires_at,
        )

    def revoke(self, channel: str, sender_id: str) -> bool:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM approved_senders WHERE channel = ? AND sender_id = ?",
                (channel, sender_id),
            )
            return bool(cur.rowcount)

    def close(self) -> None:
        self.db.close()
