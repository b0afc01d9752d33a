"""Which gateway process serves an agent: the agent lease, in the agent's own database (and the
gateways that asked for it lately, so gateways can share the agents out evenly).

    store = SqliteAgentLeaseStore(db)              # applies the "agent_leases" migration set
    me = GatewayProcess("gw-1a2b", "host-a", 4242)
    lease = store.take(me, now, lease_s=15, alive=lambda other: True)   # None: another holds it
    store.renew(me, now)                           # False: the lease is no longer mine
    store.release(me)
    store.announce(me, now); store.gateways(since=now - 15)

Times are POSIX seconds passed in by the caller. What "alive" means (a process on this host
that still runs) is the caller's rule: memory/store/liveness.py answers it for one host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from memory.store.db import Database
from memory.store.schema import MigrationSet, apply


@dataclass(frozen=True)
class GatewayProcess:
    """One `pinch gateway` process: its instance id (unique per start), host and pid."""

    gateway: str
    host: str
    pid: int


@dataclass(frozen=True)
class AgentLease:
    """Who serves the agent, since when (`taken_at`), last heartbeat (`renewed_at`); `epoch`
    grows by one at every change of holder (a fencing number: a later holder has a larger one)."""

    holder: GatewayProcess
    taken_at: float
    renewed_at: float
    epoch: int


class AgentLeaseStore(Protocol):
    """The agent's lease. What every implementation promises:

    - At most one holder at a time: `take` checks and takes in one transaction, so of two
      gateways taking a free lease at once exactly one gets it.
    - `take` by the holder renews it; by another gateway it succeeds only when the lease is
      free, released, not renewed for `lease_s` seconds, or `alive(holder)` says its process is
      gone — and then `epoch` grows by one.
    - `renew` moves `renewed_at` only while `me` holds the lease, and says whether it does; a
      holder whose renew returns False has lost the agent and must stop serving it at once.
    - `release` frees the lease only if `me` holds it.
    - `announce` records that a gateway wants to serve agents (one row per gateway, its last
      time replaced); `gateways(since)` lists those announced at or after `since`.
    """

    def take(
        self,
        me: GatewayProcess,
        now: float,
        lease_s: float,
        alive: Callable[[GatewayProcess], bool],
    ) -> AgentLease | None:
        """The lease, now held by `me`; None when another live holder keeps it."""
        ...

    def renew(self, me: GatewayProcess, now: float) -> bool: ...

    def release(self, me: GatewayProcess) -> None: ...

    def current(self) -> AgentLease | None:
        """The lease as stored (None: never taken or released), whether fresh or not."""
        ...

    def announce(self, me: GatewayProcess, now: float) -> None: ...

    def gateways(self, since: float) -> list[GatewayProcess]: ...


# -- the schema (its own migration set: the agent lease feature) --------------------------------


def l001_agent_lease(conn: Any) -> None:
    conn.executescript(
        """
        -- The one gateway process serving this agent (one row at most).
        CREATE TABLE agent_lease (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            gateway TEXT NOT NULL,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            taken_at REAL NOT NULL,
            renewed_at REAL NOT NULL,
            epoch INTEGER NOT NULL
        );
        -- Gateways that asked for the lease lately (for an even share of the agents).
        CREATE TABLE agent_lease_gateways (
            gateway TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            seen_at REAL NOT NULL
        );
        -- The epoch survives a release (a later holder's epoch is still larger).
        CREATE TABLE agent_lease_epoch (id INTEGER PRIMARY KEY CHECK (id = 1), epoch INTEGER);
        INSERT INTO agent_lease_epoch VALUES (1, 0);
        """
    )


AGENT_LEASES = MigrationSet("agent_leases", [l001_agent_lease])
# Not an agent's data: `pinch migrate` leaves them behind (the copy's gateway takes its own).
LEASE_TABLES = frozenset({"agent_lease", "agent_lease_gateways", "agent_lease_epoch"})
LEASE_NOT_COPIED = "which gateway serves the agent: each database keeps its own lease"

_LEASE_COLUMNS = "gateway, host, pid, taken_at, renewed_at, epoch"


def lease_from_row(row: Any) -> AgentLease:
    return AgentLease(
        GatewayProcess(str(row[0]), str(row[1]), int(row[2])),
        float(row[3]),
        float(row[4]),
        int(row[5]),
    )


def lease_is_free(
    lease: AgentLease | None,
    me: GatewayProcess,
    now: float,
    lease_s: float,
    alive: Callable[[GatewayProcess], bool],
) -> bool:
    """Whether `me` may take the agent given the stored `lease` (the rule both backends use)."""
    if lease is None or lease.holder.gateway == me.gateway:
        return True
    return lease.renewed_at <= now - lease_s or not alive(lease.holder)


class SqliteAgentLeaseStore:
    """`AgentLeaseStore` in the agent's SQLite database (tables `agent_lease`,
    `agent_lease_gateways`, `agent_lease_epoch`). Every method is one short transaction."""

    def __init__(self, db: Database) -> None:
        self.db = db
        with db.lock:
            apply(db.conn, AGENT_LEASES)

    def take(
        self,
        me: GatewayProcess,
        now: float,
        lease_s: float,
        alive: Callable[[GatewayProcess], bool],
    ) -> AgentLease | None:
        with self.db.transaction() as conn:  # BEGIN IMMEDIATE: one writer checks and takes
            row = conn.execute(f"SELECT {_LEASE_COLUMNS} FROM agent_lease").fetchone()
            lease = lease_from_row(row) if row is not None else None
            if not lease_is_free(lease, me, now, lease_s, alive):
                return None
            if lease is not None and lease.holder.gateway == me.gateway:
                conn.execute("UPDATE agent_lease SET renewed_at = ?", (now,))
                return AgentLease(me, lease.taken_at, now, lease.epoch)
            epoch = int(conn.execute("SELECT epoch FROM agent_lease_epoch").fetchone()[0]) + 1
            conn.execute("UPDATE agent_lease_epoch SET epoch = ?", (epoch,))
            conn.execute(
                "INSERT OR REPLACE INTO agent_lease VALUES (1, ?, ?, ?, ?, ?, ?)",
                (me.gateway, me.host, me.pid, now, now, epoch),
            )
        return AgentLease(me, now, now, epoch)

    def renew(self, me: GatewayProcess, now: float) -> bool:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE agent_lease SET renewed_at = ? WHERE gateway = ?", (now, me.gateway)
            )
            return bool(cur.rowcount)

    def release(self, me: GatewayProcess) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM agent_lease WHERE gateway = ?", (me.gateway,))

    def current(self) -> AgentLease | None:
        rows = self.db.execute(f"SELECT {_LEASE_COLUMNS} FROM agent_lease")
        return lease_from_row(rows[0]) if rows else None

    def announce(self, me: GatewayProcess, now: float) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO agent_lease_gateways VALUES (?, ?, ?, ?)",
                (me.gateway, me.host, me.pid, now),
            )
            # Rows of gateways gone for a day are of no use to anyone.
            conn.execute("DELETE FROM agent_lease_gateways WHERE seen_at < ?", (now - 86400,))

    def gateways(self, since: float) -> list[GatewayProcess]:
        rows = self.db.execute(
            "SELECT gateway, host, pid FROM agent_lease_gateways WHERE seen_at >= ? "
            "ORDER BY gateway",
            (since,),
        )
        return [GatewayProcess(str(r[0]), str(r[1]), int(r[2])) for r in rows]
