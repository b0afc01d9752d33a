"""Index generations and the rebuild lease: which build serves searches, and who may build.

A generation is one complete build of the index. Exactly one is `active` at a time (a unique
index enforces it); a full rebuild fills a `building` one beside it and swaps it in, in one
transaction, only when complete. Only the holder of the *rebuild lease* may build: one row with
the pid, host and heartbeat of the process (and the token of the MemoryIndex in it). A lease is
taken over only when stale — its process is gone (same host) or it has not beaten for
STALE_LEASE_SECONDS — and taking it over drops the half-built generation it left.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memory.errors import IndexingError
from memory.store.db import Database

STALE_LEASE_SECONDS = 600

# Drops a generation's vector rows (vec0 table or numpy rows) inside the caller's transaction.
DropVectors = Callable[[Any, int, int | None], None]


class GenerationGone(Exception):
    """The generation a sync was writing to was swapped out or dropped by another process."""


@dataclass(frozen=True)
class LeaseHolder:
    """Who is building a new generation right now."""

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
        began = _process_start(self.pid)
        return began is None or began <= self.started_at + _START_SLACK_SECONDS


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (another user's process counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# /proc/stat's boot time is whole seconds, and a process takes its lease after starting; the
# margin also absorbs a small clock step between the lease and now.
_START_SLACK_SECONDS = 5.0


def _process_start(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), or None where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as fh:
            boot = next(float(line.split()[1]) for line in fh if line.startswith(b"btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


class Generations:
    """The generation rows and the rebuild lease of one agent database."""

    def __init__(self, db: Database, drop_vectors: DropVectors) -> None:
        self.db = db
        self._drop_vectors = drop_vectors

    # ---- reading ------------------------------------------------------------------------------

    def active(self) -> tuple[int, dict[str, Any]] | None:
        """(id, identity) of the generation searches read, or None before the first build."""
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

    def dimensions_of(self, conn: Any, generation: int) -> int | None:
        row = conn.execute(
            "SELECT dimensions FROM memory_generations WHERE id = ?", (generation,)
        ).fetchone()
        return row[0] if row else None

    def lease_holder(self, conn: Any | None = None) -> LeaseHolder | None:
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
        return LeaseHolder(int(row[0]), row[1], int(row[2]), row[3], float(row[4]), float(row[5]))

    def live_rebuild(self) -> LeaseHolder | None:
        """The holder of the lease if it is still building (not stale)."""
        holder = self.lease_holder()
        return holder if holder is not None and holder.alive() else None

    # ---- writing ------------------------------------------------------------------------------

    @staticmethod
    def bump_version(conn: Any) -> None:
        """Tell readers (numpy vector cache, searches) that the index changed."""
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('index_version', '1') ON CONFLICT(key) DO "
            "UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
        )

    def begin_rebuild(self, identity: dict[str, Any], token: str) -> int | LeaseHolder:
        """Take the lease and create the generation to build, in one transaction.

        Returns the new generation's id, or the live holder when another rebuild runs. A stale
        holder's half-built generation is dropped first.
        """
        now = time.time()
        with self.db.transaction() as conn:
            holder = self.lease_holder(conn)
            if holder is not None and holder.token != token and holder.alive(now):
                return holder
            if holder is not None:
                self._drop_rows(conn, holder.generation)
                conn.execute("DELETE FROM memory_rebuild_lease")
            cur = conn.execute(
                "INSERT INTO memory_generations(identity, state, dimensions, created_at) "
                "VALUES (?, 'building', ?, ?)",
                (json.dumps(identity, sort_keys=True), identity["dimensions"], now),
            )
            generation = int(cur.lastrowid)
            conn.execute(
                "INSERT INTO memory_rebuild_lease(id, generation, token, pid, host, started_at, "
                "heartbeat_at) VALUES (1, ?, ?, ?, ?, ?, ?)",
                (generation, token, os.getpid(), socket.gethostname(), now, now),
            )
        return generation

    def check_writable(self, conn: Any, generation: int, token: str | None) -> None:
        """Inside a write transaction: may this sync still write to `generation`?

        With a token (a rebuild), the lease must still be ours for that generation — which also
        beats its heartbeat; without (an incremental sync), the generation must still be active.
        """
        if token is not None:
            cur = conn.execute(
                "UPDATE memory_rebuild_lease SET heartbeat_at = ? "
                "WHERE id = 1 AND token = ? AND generation = ?",
                (time.time(), token, generation),
            )
            if cur.rowcount != 1:
                raise IndexingError(
                    "Another process took over this rebuild (this one stalled for over "
                    f"{STALE_LEASE_SECONDS // 60} minutes); its result will serve. Nothing to do."
                )
            return
        row = conn.execute(
            "SELECT state FROM memory_generations WHERE id = ?", (generation,)
        ).fetchone()
        if row is None or row[0] != "active":
            raise GenerationGone(generation)

    def swap_in(self, generation: int, token: str) -> None:
        """Make the built generation the active one and release the lease; drop the old one."""
        with self.db.transaction() as conn:
            self.check_writable(conn, generation, token)
            conn.execute("UPDATE memory_generations SET state = 'retired' WHERE state = 'active'")
            conn.execute(
                "UPDATE memory_generations SET state = 'active', completed_at = ? WHERE id = ?",
                (time.time(), generation),
            )
            conn.execute("DELETE FROM memory_rebuild_lease WHERE token = ?", (token,))
            self.bump_version(conn)
        self.drop_retired()

    def abandon(self, generation: int, token: str) -> None:
        """Drop a failed build and release the lease (if it is still ours)."""
        with self.db.transaction() as conn:
            conn.execute(
                "DELETE FROM memory_rebuild_lease WHERE token = ? AND generation = ?",
                (token, generation),
            )
            state = conn.execute(
                "SELECT state FROM memory_generations WHERE id = ?", (generation,)
            ).fetchone()
            if state is not None and state[0] != "active":
                self._drop_rows(conn, generation)

    def drop_retired(self) -> None:
        """Drop every generation that is neither active nor being built by a live holder:
        retired ones, and builds left by a killed or failed rebuild."""
        if not self.db.execute(
            "SELECT 1 FROM memory_generations WHERE state != 'active' LIMIT 1"
        ) and not self.db.execute("SELECT 1 FROM memory_rebuild_lease"):
            return
        now = time.time()
        with self.db.transaction() as conn:
            holder = self.lease_holder(conn)
            keep = None
            if holder is not None:
                if holder.alive(now):
                    keep = holder.generation
                else:
                    conn.execute("DELETE FROM memory_rebuild_lease")
            stale = [
                int(r[0])
                for r in conn.execute(
                    "SELECT id FROM memory_generations WHERE state != 'active'"
                ).fetchall()
                if int(r[0]) != keep
            ]
            for gen in stale:
                self._drop_rows(conn, gen)

    def _drop_rows(self, conn: Any, generation: int) -> None:
        dims = self.dimensions_of(conn, generation)
        conn.execute(
            "DELETE FROM memory_fts WHERE rowid IN "
            "(SELECT id FROM memory_chunks WHERE generation = ?)",
            (generation,),
        )
        self._drop_vectors(conn, generation, dims)
        conn.execute("DELETE FROM memory_units WHERE generation = ?", (generation,))
        conn.execute("DELETE FROM memory_chunks WHERE generation = ?", (generation,))
        conn.execute("DELETE FROM memory_sources WHERE generation = ?", (generation,))
        conn.execute("DELETE FROM memory_generations WHERE id = ?", (generation,))
