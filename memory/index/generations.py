"""Index generations and the rebuild lease: which build serves searches, and who may build.

A generation is one complete build of the index. Exactly one is `active` at a time; a full
rebuild fills a `building` one beside it and swaps it in, in one transaction, only when
complete. Only the holder of the *rebuild lease* may build: one row with the pid, host and
heartbeat of the process (and the token of the MemoryIndex in it). A lease is taken over only
when stale — its process is gone (same host) or it has not beaten for STALE_LEASE_SECONDS — and
taking it over drops the half-built generation it left. The rows themselves are kept by
memory/store/index_generations.py and memory/store/index_rows.py.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

from memory.errors import IndexingError
from memory.store.db import Database
from memory.store.index_generations import (
    STALE_LEASE_SECONDS,
    GenerationRepository,
    RebuildLeaseHolder,
)
from memory.store.index_rows import IndexRowRepository

__all__ = ["STALE_LEASE_SECONDS", "DropVectors", "GenerationGone", "Generations"]

# Drops a generation's vector rows (vec0 table or numpy rows) inside the caller's transaction.
DropVectors = Callable[[Any, int, int | None], None]


class GenerationGone(Exception):
    """The generation a sync was writing to was swapped out or dropped by another process."""


class Generations:
    """The generation rows and the rebuild lease of one agent database."""

    def __init__(
        self,
        db: Database,
        repo: GenerationRepository,
        rows: IndexRowRepository,
        drop_vectors: DropVectors,
    ) -> None:
        self.db = db
        self.repo = repo
        self._rows = rows
        self._drop_vectors = drop_vectors

    # ---- reading ------------------------------------------------------------------------------

    def active(self) -> tuple[int, dict[str, Any]] | None:
        """(id, identity) of the generation searches read, or None before the first build."""
        return self.repo.active()

    def identity_of(self, generation: int) -> dict[str, Any] | None:
        return self.repo.identity_of(generation)

    def dimensions_of(self, conn: Any, generation: int) -> int | None:
        return self.repo.dimensions_of(conn, generation)

    def lease_holder(self, conn: Any | None = None) -> RebuildLeaseHolder | None:
        return self.repo.lease_holder(conn)

    def live_rebuild(self) -> RebuildLeaseHolder | None:
        """The holder of the lease if it is still building (not stale)."""
        holder = self.lease_holder()
        return holder if holder is not None and holder.alive() else None

    def leftover_chunks(self) -> int:
        """Chunks of generations neither active nor being built by a live holder: what a
        killed or failed rebuild left. They weigh on keyword scores until dropped (by the next
        sync, or `drop_retired`)."""
        if not self.repo.has_leftovers():
            return 0
        inactive = self.repo.inactive()
        building = self.live_rebuild()
        keep = building.generation if building is not None else None
        return sum(self._rows.chunk_count(gen) for gen in inactive if gen != keep)

    # ---- writing ------------------------------------------------------------------------------

    def bump_version(self, conn: Any) -> None:
        """Tell readers (numpy vector cache, searches) that the index changed."""
        self.repo.bump_version(conn)

    def begin_rebuild(self, identity: dict[str, Any], token: str) -> int | RebuildLeaseHolder:
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
                self.repo.clear_lease(conn)
            generation = self.repo.create_building(conn, identity, now)
            self.repo.take_lease(conn, generation, token, os.getpid(), socket.gethostname(), now)
        return generation

    def check_writable(self, conn: Any, generation: int, token: str | None) -> None:
        """Inside a write transaction: may this sync still write to `generation`?

        With a token (a rebuild), the lease must still be ours for that generation — which also
        beats its heartbeat; without (an incremental sync), the generation must still be active.
        """
        if token is not None:
            if not self.repo.beat_lease(conn, generation, token, time.time()):
                raise IndexingError(
                    "Another process took over this rebuild (this one stalled for over "
                    f"{STALE_LEASE_SECONDS // 60} minutes); its result will serve. Nothing to do."
                )
            return
        if self.repo.state_of(conn, generation) != "active":
            raise GenerationGone(generation)

    def swap_in(self, generation: int, token: str) -> None:
        """Make the built generation the active one and release the lease; drop the old one."""
        with self.db.transaction() as conn:
            self.check_writable(conn, generation, token)
            self.repo.activate(conn, generation, time.time())
            self.repo.release_lease(conn, token)
            self.bump_version(conn)
        self.drop_retired()

    def abandon(self, generation: int, token: str) -> None:
        """Drop a failed build and release the lease (if it is still ours)."""
        with self.db.transaction() as conn:
            self.repo.release_lease(conn, token, generation)
            state = self.repo.state_of(conn, generation)
            if state is not None and state != "active":
                self._drop_rows(conn, generation)

    def drop_retired(self) -> None:
        """Drop every generation that is neither active nor being built by a live holder:
        retired ones, and builds left by a killed or failed rebuild."""
        if not self.repo.has_leftovers():
            return
        now = time.time()
        with self.db.transaction() as conn:
            holder = self.lease_holder(conn)
            keep = None
            if holder is not None:
                if holder.alive(now):
                    keep = holder.generation
                else:
                    self.repo.clear_lease(conn)
            stale = [gen for gen in self.repo.inactive(conn) if gen != keep]
            for gen in stale:
                self._drop_rows(conn, gen)

    def _drop_rows(self, conn: Any, generation: int) -> None:
        dims = self.dimensions_of(conn, generation)
        self._rows.drop_keywords_of(conn, generation)
        self._drop_vectors(conn, generation, dims)
        self._rows.drop_generation(conn, generation)
        self.repo.delete(conn, generation)
