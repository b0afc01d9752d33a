"""Index generations and the rebuild lease, as stored: the `memory_generations` rows, the one
`memory_rebuild_lease` row and the `index_version` counter in `meta`.

The rules — when a lease may be taken over, when a generation is dropped, what a swap does — live
in memory/index/generations.py; this module only reads and writes the rows. Methods that take a
`conn` run inside the caller's write transaction (`Database.transaction()`), so several of them
(take the lease, create the generation) commit together or not at all.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Any, Protocol

from memory.store.db import Database
from memory.store.liveness import START_SLACK_SECONDS, pid_alive, process_started_at

STALE_LEASE_SECONDS = 600


@dataclass(frozen=True)
class RebuildLeaseHolder:
    """Who holds the rebuild lease: the process building a new index generation right now."""

    generation: int
    token: str
    pid: int
    host: str
    started_at: float
    heartbeat_at: float

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"

    def alive(self, now: float | None = None) -> bool:
        """Whether the holder still runs: it beat recently and (on this host) its pid exists."""
        if (now or time.time()) - self.heartbeat_at > STALE_LEASE_SECONDS:
            return False
        if self.host != socket.gethostname():
            return True  # cannot see its processes; trust the heartbeat
        if not pid_alive(self.pid):
            return False
        # A pid is reused (a restarted container gets the same one): a process that started
        # after the lease was taken is not its holder.
        began = process_started_at(self.pid)
        return began is None or began <= self.started_at + START_SLACK_SECONDS


class GenerationRepository(Protocol):
    """The generation rows and the rebuild lease of one agent database.

    Promises: a new generation's id is larger than that of every generation present; at most
    one generation is `active` at a time (enforced by the store: a unique index in SQLite);
    there is at most one lease row; `activate` retires the old active generation and activates
    the new one within the caller's transaction, so a reader sees one or the other, never none
    or two. `bump_version` makes the index version
    strictly larger than any value a reader saw before. `conn` is the caller's open write
    transaction; methods without it read on their own.
    """

    def active(self) -> tuple[int, dict[str, Any]] | None:
        """(id, identity) of the active generation (the highest id if ever several)."""
        ...

    def identity_of(self, generation: int) -> dict[str, Any] | None: ...

    def exists(self, conn: Any, generation: int) -> bool: ...

    def state_of(self, conn: Any, generation: int) -> str | None:
        """'active', 'building' or 'retired'; None when there is no such generation."""
        ...

    def dimensions_of(self, conn: Any, generation: int) -> int | None: ...

    def inactive(self, conn: Any | None = None) -> list[int]:
        """Every generation that is not active (building or retired), by id (`conn`: inside
        the caller's transaction; None: a read of its own)."""
        ...

    def has_leftovers(self) -> bool:
        """Whether any generation is not active, or a lease row exists (cheap, no lock)."""
        ...

    def create_building(self, conn: Any, identity: dict[str, Any], now: float) -> int:
        """A new generation in state 'building'; returns its id."""
        ...

    def activate(self, conn: Any, generation: int, now: float) -> None:
        """Retire the active generation and make `generation` the active one."""
        ...

    def delete(self, conn: Any, generation: int) -> None: ...

    def bump_version(self, conn: Any) -> None: ...

    def lease_holder(self, conn: Any | None = None) -> RebuildLeaseHolder | None: ...

    def take_lease(
        self, conn: Any, generation: int, token: str, pid: int, host: str, now: float
    ) -> None:
        """Write the lease row (the caller removed any previous one in this transaction)."""
        ...

    def beat_lease(self, conn: Any, generation: int, token: str, now: float) -> bool:
        """Renew the heartbeat if the lease is held by `token` for `generation`; False if not."""
        ...

    def release_lease(self, conn: Any, token: str, generation: int | None = None) -> None:
        """Remove the lease if `token` (and, when given, `generation`) holds it."""
        ...

    def clear_lease(self, conn: Any) -> None:
        """Remove the lease whoever holds it (a stale holder's)."""
        ...


class SqliteGenerations:
    """GenerationRepository on the agent SQLite file."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def active(self) -> tuple[int, dict[str, Any]] | None:
        rows = self.db.execute(
            "SELECT id, identity FROM memory_generations WHERE state = 'active' "
            "ORDER BY id DESC LIMIT 1"
        )
        return (int(rows[0][0]), json.loads(rows[0][1])) if rows else None

    def identity_of(self, generation: int) -> dict[str, Any] | None:
        rows = self.db.execute(
            "SELECT identity FROM memory_generations WHERE id = ?", (generation,)
        )
        return json.loads(rows[0][0]) if rows else None

    def exists(self, conn: Any, generation: int) -> bool:
        found = conn.execute("SELECT 1 FROM memory_generations WHERE id = ?", (generation,))
        return found.fetchone() is not None

    def state_of(self, conn: Any, generation: int) -> str | None:
        row = conn.execute(
            "SELECT state FROM memory_generations WHERE id = ?", (generation,)
        ).fetchone()
        return row[0] if row is not None else None

    def dimensions_of(self, conn: Any, generation: int) -> int | None:
        row = conn.execute(
            "SELECT dimensions FROM memory_generations WHERE id = ?", (generation,)
        ).fetchone()
        return row[0] if row else None

    def inactive(self, conn: Any | None = None) -> list[int]:
        sql = "SELECT id FROM memory_generations WHERE state != 'active'"
        rows = conn.execute(sql).fetchall() if conn is not None else self.db.execute(sql)
        return [int(r[0]) for r in rows]

    def has_leftovers(self) -> bool:
        return bool(
            self.db.execute("SELECT 1 FROM memory_generations WHERE state != 'active' LIMIT 1")
        ) or bool(self.db.execute("SELECT 1 FROM memory_rebuild_lease"))

    def create_building(self, conn: Any, identity: dict[str, Any], now: float) -> int:
        cur = conn.execute(
            "INSERT INTO memory_generations(identity, state, dimensions, created_at) "
            "VALUES (?, 'building', ?, ?)",
            (json.dumps(identity, sort_keys=True), identity["dimensions"], now),
        )
        return int(cur.lastrowid)

    def activate(self, conn: Any, generation: int, now: float) -> None:
        conn.execute("UPDATE memory_generations SET state = 'retired' WHERE state = 'active'")
        conn.execute(
            "UPDATE memory_generations SET state = 'active', completed_at = ? WHERE id = ?",
            (now, generation),
        )

    def delete(self, conn: Any, generation: int) -> None:
        conn.execute("DELETE FROM memory_generations WHERE id = ?", (generation,))

    def bump_version(self, conn: Any) -> None:
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('index_version', '1') ON CONFLICT(key) DO "
            "UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
        )

    def lease_holder(self, conn: Any | None = None) -> RebuildLeaseHolder | None:
        sql = (
            "SELECT generation, token, pid, host, started_at, heartbeat_at "
            "FROM memory_rebuild_lease WHERE id = 1"
        )
        row = (
            conn.execute(sql).fetchone()
            if conn is not None
            else next(iter(self.db.execute(sql)), None)
        )
        if row is None:
            return None
        return RebuildLeaseHolder(
            int(row[0]), row[1], int(row[2]), row[3], float(row[4]), float(row[5])
        )

    def take_lease(
        self, conn: Any, generation: int, token: str, pid: int, host: str, now: float
    ) -> None:
        conn.execute(
            "INSERT INTO memory_rebuild_lease(id, generation, token, pid, host, started_at, "
            "heartbeat_at) VALUES (1, ?, ?, ?, ?, ?, ?)",
            (generation, token, pid, host, now, now),
        )

    def beat_lease(self, conn: Any, generation: int, token: str, now: float) -> bool:
        cur = conn.execute(
            "UPDATE memory_rebuild_lease SET heartbeat_at = ? "
            "WHERE id = 1 AND token = ? AND generation = ?",
            (now, token, generation),
        )
        return bool(cur.rowcount == 1)

    def release_lease(self, conn: Any, token: str, generation: int | None = None) -> None:
        if generation is None:
            conn.execute("DELETE FROM memory_rebuild_lease WHERE token = ?", (token,))
        else:
            conn.execute(
                "DELETE FROM memory_rebuild_lease WHERE token = ? AND generation = ?",
                (token, generation),
            )

    def clear_lease(self, conn: Any) -> None:
        conn.execute("DELETE FROM memory_rebuild_lease")
