"""`AgentLeaseStore` on PostgreSQL (tables `agent_lease`, `agent_lease_gateways` in the agent's
schema): which gateway process serves the agent when several share one database.

How the promises are kept here: `take` locks the one lease row (`SELECT … FOR UPDATE`, the row
made first if missing, under a transaction-level advisory lock of the agent's lease), so of two
gateways taking it at once the second sees the first's row and its fresh `renewed_at`; `renew`
and `release` are conditional updates on `gateway = me`, re-checked by PostgreSQL on a row
another transaction just changed. The tables are created here, once, under the same advisory
lock (they belong to the agent-lease feature; the PostgreSQL migration sets are the stores' own).
"""

from __future__ import annotations

from collections.abc import Callable

from memory.store.agent_leases import (
    AgentLease,
    GatewayProcess,
    lease_from_row,
    lease_is_free,
)
from memory.store.postgres.database import PgDatabase

_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('pinch:agent_lease', 7))"
_TABLES = (
    "CREATE TABLE IF NOT EXISTS agent_lease ("
    " id integer PRIMARY KEY CHECK (id = 1), gateway text, host text, pid integer,"
    " taken_at double precision, renewed_at double precision, epoch bigint NOT NULL)",
    "CREATE TABLE IF NOT EXISTS agent_lease_gateways ("
    " gateway text PRIMARY KEY, host text NOT NULL, pid integer NOT NULL,"
    " seen_at double precision NOT NULL)",
    # The row always exists (gateway NULL: free), so FOR UPDATE always has a row to lock.
    "INSERT INTO agent_lease (id, epoch) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
)
_COLUMNS = "gateway, host, pid, taken_at, renewed_at, epoch"


class PgAgentLeaseStore:
    """`AgentLeaseStore` on PostgreSQL (memory/store/agent_leases.py states the promises)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db
        with db.transaction() as conn:
            conn.execute(_LOCK)
            for statement in _TABLES:
                conn.execute(statement)

    def take(
        self,
        me: GatewayProcess,
        now: float,
        lease_s: float,
        alive: Callable[[GatewayProcess], bool],
    ) -> AgentLease | None:
        with self.db.transaction() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM agent_lease WHERE id = 1 FOR UPDATE"
            ).fetchone()
            assert row is not None  # made with the table
            lease = lease_from_row(row) if row[0] is not None else None
            if not lease_is_free(lease, me, now, lease_s, alive):
                return None
            if lease is not None and lease.holder.gateway == me.gateway:
                conn.execute("UPDATE agent_lease SET renewed_at = %s WHERE id = 1", (now,))
                return AgentLease(me, lease.taken_at, now, lease.epoch)
            epoch = int(row[5]) + 1
            conn.execute(
                "UPDATE agent_lease SET gateway = %s, host = %s, pid = %s, taken_at = %s, "
                "renewed_at = %s, epoch = %s WHERE id = 1",
                (me.gateway, me.host, me.pid, now, now, epoch),
            )
        return AgentLease(me, now, now, epoch)

    def renew(self, me: GatewayProcess, now: float) -> bool:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE agent_lease SET renewed_at = %s WHERE id = 1 AND gateway = %s",
                (now, me.gateway),
            )
            return bool(cur.rowcount)

    def release(self, me: GatewayProcess) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE agent_lease SET gateway = NULL, host = NULL, pid = NULL, "
                "taken_at = NULL, renewed_at = NULL WHERE id = 1 AND gateway = %s",
                (me.gateway,),
            )

    def current(self) -> AgentLease | None:
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM agent_lease WHERE id = 1")
        return lease_from_row(rows[0]) if rows and rows[0][0] is not None else None

    def announce(self, me: GatewayProcess, now: float) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO agent_lease_gateways VALUES (%s, %s, %s, %s) ON CONFLICT (gateway) "
                "DO UPDATE SET host = excluded.host, pid = excluded.pid, "
                "seen_at = excluded.seen_at",
                (me.gateway, me.host, me.pid, now),
            )
            conn.execute("DELETE FROM agent_lease_gateways WHERE seen_at < %s", (now - 86400,))

    def gateways(self, since: float) -> list[GatewayProcess]:
        rows = self.db.execute(
            "SELECT gateway, host, pid FROM agent_lease_gateways WHERE seen_at >= %s "
            "ORDER BY gateway",
            (since,),
        )
        return [GatewayProcess(str(r[0]), str(r[1]), int(r[2])) for r in rows]
