"""`PairingStore` on PostgreSQL (tables `pairing_requests`, `approved_senders`).

How the promises are kept here: `create_request` counts and inserts under a transaction-level
advisory lock of the channel, so concurrent requests (from several gateways) never exceed the
pending cap; `decide` takes the pending row `FOR UPDATE`, so of two deciders the second finds
it decided (PostgreSQL re-checks `state = 'pending'` on the locked row) and gets None; an
approval is an upsert on (channel, sender_id).
"""

from __future__ import annotations

from collections.abc import Sequence

from memory.store.pairing_store import ApprovedSender, PairingRequest
from memory.store.postgres.database import PgDatabase

_COLUMNS = "code, channel, sender_id, sender_name, state, created_at, expires_at"


def _request(row: Sequence[object]) -> PairingRequest:
    return PairingRequest(*row)  # type: ignore[arg-type]


class PgPairingStore:
    """`PairingStore` on PostgreSQL (memory/store/pairing_store.py states the promises)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def is_approved(self, channel: str, sender_id: str) -> bool:
        rows = self.db.execute(
            "SELECT 1 FROM approved_senders WHERE channel = %s AND sender_id = %s",
            (channel, sender_id),
        )
        return bool(rows)

    def latest(self, channel: str, sender_id: str, now: float) -> PairingRequest | None:
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM pairing_requests WHERE channel = %s AND sender_id = %s "
            "AND expires_at > %s ORDER BY created_at DESC, id DESC LIMIT 1",
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
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 3))", (f"pairing:{channel}",)
            )
            row = conn.execute(
                "SELECT count(*) FROM pairing_requests WHERE channel = %s "
                "AND state = 'pending' AND expires_at > %s",
                (channel, now),
            ).fetchone()
            if row is not None and int(row[0]) >= max_pending:
                return None
            conn.execute(
                "INSERT INTO pairing_requests (channel, sender_id, sender_name, code, state, "
                "created_at, expires_at) VALUES (%s, %s, %s, %s, 'pending', %s, %s)",
                (channel, sender_id, sender_name, code, now, now + ttl_s),
            )
        return PairingRequest(code, channel, sender_id, sender_name, "pending", now, now + ttl_s)

    def pending(self, now: float) -> list[PairingRequest]:
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM pairing_requests WHERE state = 'pending' "
            "AND expires_at > %s ORDER BY created_at, id",
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
        state = "approved" if approve else "rejected"
        with self.db.transaction() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS}, id FROM pairing_requests WHERE code = %s "
                "AND state = 'pending' AND expires_at > %s ORDER BY id LIMIT 1 FOR UPDATE",
                (code, now),
            ).fetchone()
            if row is None:
                return None
            req = _request(row[:-1])
            conn.execute(
                "UPDATE pairing_requests SET state = %s, decided_at = %s WHERE id = %s",
                (state, now, row[-1]),
            )
            if approve:
                conn.execute(
                    "INSERT INTO approved_senders VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT (channel, sender_id) DO UPDATE SET "
                    "sender_name = excluded.sender_name, approved_at = excluded.approved_at",
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
                "DELETE FROM approved_senders WHERE channel = %s AND sender_id = %s",
                (channel, sender_id),
            )
            return bool(cur.rowcount)

    def close(self) -> None:
        self.db.close()
