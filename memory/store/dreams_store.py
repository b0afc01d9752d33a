"""Dream runs and the dream lease: `DreamRunStore` (what any store of them promises) and
`SqliteDreamRuns`; and `StagingLookups` / `SqliteStagingLookups`, the two reads Light needs from
other tables (a file's origin in the active index generation; which sessions were automated).

Tables `dream_runs` and `dream_lease` (migrations in memory/store/dreaming_schema.py).
memory/lifecycle/dream_*.py decide; every SQL statement is here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from memory.store.backends import store_for
from memory.store.db import Database
from memory.store.dreaming_schema import apply_dreaming_migrations


@dataclass(frozen=True)
class LastDream:
    run_id: int
    started_at: float
    outcome: str  # "promoted 2 of 7 candidates (append)", "nothing promoted: …", "failed: …"
    undone: bool


@dataclass(frozen=True)
class UndoableRun:
    """The latest dream that wrote MEMORY.md and was not undone."""

    run_id: int
    preimage: str  # workspace path of the copy of MEMORY.md before the write
    post_hash: str  # hash of what the dream wrote
    preimage_text: str  # what undo restores
    started_at: float


@dataclass(frozen=True)
class RunWrite:
    """What a dream wrote to MEMORY.md, as its run row keeps it."""

    mode: str  # "rewrite" | "append" | "none"
    preimage: str | None
    preimage_text: str
    pre_hash: str
    post_hash: str


class DreamRunStore(Protocol):
    """Dream runs and the dream lease of one agent database. Every call blocks.

    Promises: run ids increase in start order and are never reused; `acquire_lease` is atomic
    across processes (of two callers, at most one holds an unexpired lease of a name);
    `release_lease` releases only the holder's own lease; `rewrite_preimages` changes every run's
    preimage in one transaction. `last_finished` and `last_undoable` read only: they create no
    table in a database that never dreamed."""

    def acquire_lease(self, name: str, holder: str, *, now: float, lease_s: float) -> bool:
        """Take lease `name` for `holder` until `now + lease_s`; False if another holder has
        it unexpired."""
        ...

    def release_lease(self, name: str, holder: str) -> None: ...

    def start_run(self, phase: str, *, started_at: float) -> int: ...

    def finish_run(
        self,
        run_id: int,
        *,
        finished_at: float,
        promoted: int,
        model_calls: int,
        tokens: int,
        write: RunWrite | None,
        outcome: str,
    ) -> None: ...

    def record_failed_run(self, phase: str, reason: str, *, at: float) -> None:
        """A finished run with outcome "failed: <reason>" (started and finished at `at`)."""
        ...

    def last_finished(self) -> LastDream | None:
        """The latest finished run, newest by id."""
        ...

    def last_undoable(self) -> UndoableRun | None: ...

    def mark_undone(self, run_id: int, *, at: float) -> None: ...

    def recent(self, n: int) -> list[dict[str, Any]]:
        """The last `n` runs, newest first: id, started_at, finished_at, phase, promoted,
        model_calls, tokens, mode, outcome, undone_at."""
        ...

    def preimage_texts(self) -> list[tuple[int, str]]:
        """(run id, preimage text) of every run that kept a non-empty preimage."""
        ...

    def replace_post_hash(self, old: str, new: str) -> None:
        """Runs whose write ended in `old` now end in `new` (MEMORY.md changed under them)."""
        ...

    def rewrite_preimages(self, change: Callable[[str], str | None]) -> None:
        """Replace each non-empty preimage text by `change(text)` (None: unchanged), atomically."""
        ...


class StagingLookups(Protocol):
    """The reads Light (dreaming's staging) needs from the index and the sessions."""

    def indexed_origin(self, path: str) -> str | None:
        """The origin the active index generation gives file `path`; None if not indexed."""
        ...

    def automated_sessions(self, ids: set[str]) -> set[str]:
        """Those of `ids` that are sessions of scheduled jobs, heartbeats or sub-agents."""
        ...


# ---- dream runs in SQLite ------------------------------------------------------------------


class SqliteDreamRuns:
    """`DreamRunStore` on the agent SQLite database (tables `dream_runs`, `dream_lease`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def _has_runs(self) -> bool:
        return bool(self.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'dream_runs'"))

    def acquire_lease(self, name: str, holder: str, *, now: float, lease_s: float) -> bool:
        apply_dreaming_migrations(self.db)
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT expires_at FROM dream_lease WHERE name = ?", (name,)
            ).fetchone()
            if row and float(row[0]) > now:
                return False
            conn.execute(
                "INSERT OR REPLACE INTO dream_lease(name, holder, expires_at) VALUES (?, ?, ?)",
                (name, holder, now + lease_s),
            )
        return True

    def release_lease(self, name: str, holder: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM dream_lease WHERE name = ? AND holder = ?", (name, holder))

    def start_run(self, phase: str, *, started_at: float) -> int:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO dream_runs(started_at, phase) VALUES (?, ?)", (started_at, phase)
            )
            return int(cur.lastrowid)

    def finish_run(
        self,
        run_id: int,
        *,
        finished_at: float,
        promoted: int,
        model_calls: int,
        tokens: int,
        write: RunWrite | None,
        outcome: str,
    ) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE dream_runs SET finished_at = ?, promoted = ?, model_calls = ?, "
                "tokens = ?, mode = ?, preimage = ?, preimage_text = ?, pre_hash = ?, "
                "post_hash = ?, outcome = ? WHERE id = ?",
                (
                    finished_at,
                    promoted,
                    model_calls,
                    tokens,
                    write.mode if write else None,
                    write.preimage if write else None,
                    write.preimage_text if write else None,
                    write.pre_hash if write else None,
                    write.post_hash if write else None,
                    outcome,
                    run_id,
                ),
            )

    def record_failed_run(self, phase: str, reason: str, *, at: float) -> None:
        apply_dreaming_migrations(self.db)
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO dream_runs(started_at, finished_at, phase, outcome) "
                "VALUES (?, ?, ?, ?)",
                (at, at, phase, f"failed: {reason}"),
            )

    def last_finished(self) -> LastDream | None:
        if not self._has_runs():
            return None
        columns = {str(r[1]) for r in self.db.execute("PRAGMA table_info(dream_runs)")}
        outcome = "outcome" if "outcome" in columns else "NULL"
        rows = self.db.execute(
            f"SELECT id, started_at, {outcome}, promoted, undone_at FROM dream_runs "
            "WHERE finished_at IS NOT NULL ORDER BY id DESC LIMIT 1"
        )
        if not rows:
            return None
        run_id, started, text, promoted, undone = rows[0]
        return LastDream(
            int(run_id), float(started), str(text or f"promoted {promoted}"), undone is not None
        )

    def last_undoable(self) -> UndoableRun | None:
        if not self._has_runs():
            return None  # never dreamed: create nothing
        apply_dreaming_migrations(self.db)
        rows = self.db.execute(
            "SELECT id, preimage, post_hash, preimage_text, started_at FROM dream_runs "
            "WHERE preimage_text IS NOT NULL AND undone_at IS NULL ORDER BY id DESC LIMIT 1"
        )
        if not rows:
            return None
        run_id, preimage, post_hash, text, started = rows[0]
        return UndoableRun(int(run_id), str(preimage), str(post_hash), str(text), float(started))

    def mark_undone(self, run_id: int, *, at: float) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE dream_runs SET undone_at = ? WHERE id = ?", (at, run_id))

    def recent(self, n: int) -> list[dict[str, Any]]:
        apply_dreaming_migrations(self.db)
        cols = [
            "id",
            "started_at",
            "finished_at",
            "phase",
            "promoted",
            "model_calls",
            "tokens",
            "mode",
            "outcome",
            "undone_at",
        ]
        rows = self.db.execute(
            f"SELECT {', '.join(cols)} FROM dream_runs ORDER BY id DESC LIMIT ?", (n,)
        )
        return [dict(zip(cols, r, strict=True)) for r in rows]

    def preimage_texts(self) -> list[tuple[int, str]]:
        apply_dreaming_migrations(self.db)
        rows = self.db.execute("SELECT id, preimage_text FROM dream_runs WHERE preimage_text != ''")
        return [(int(r[0]), str(r[1])) for r in rows]

    def replace_post_hash(self, old: str, new: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE dream_runs SET post_hash = ? WHERE post_hash = ?", (new, old))

    def rewrite_preimages(self, change: Callable[[str], str | None]) -> None:
        with self.db.transaction() as conn:
            for run_id, text in conn.execute(
                "SELECT id, preimage_text FROM dream_runs WHERE preimage_text != ''"
            ).fetchall():
                new = change(str(text))
                if new is not None:
                    conn.execute(
                        "UPDATE dream_runs SET preimage_text = ? WHERE id = ?", (new, int(run_id))
                    )


# ---- Light's lookups in SQLite -------------------------------------------------------------


class SqliteStagingLookups:
    """`StagingLookups` on the agent SQLite database (index generations, sessions)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def indexed_origin(self, path: str) -> str | None:
        rows = self.db.execute(
            "SELECT s.origin FROM memory_sources s JOIN memory_generations g "
            "ON g.id = s.generation WHERE g.state = 'active' AND s.path = ?",
            (path,),
        )
        return str(rows[0][0]) if rows else None

    def automated_sessions(self, ids: set[str]) -> set[str]:
        if not ids:
            return set()
        marks = ",".join("?" for _ in ids)
        rows = self.db.execute(
            f"SELECT id FROM sessions WHERE id IN ({marks}) AND (channel IN ('automation', "
            "'heartbeat', 'subagent') OR thread_id LIKE 'job:%' OR thread_id LIKE 'subagent:%')",
            tuple(ids),
        )
        return {str(r[0]) for r in rows}


def dream_runs_for(db: Database) -> DreamRunStore:
    """The dream runs and lease of `db` (`db`'s backend: memory/store/backends.py)."""
    found: DreamRunStore = store_for("DreamRunStore", db)
    return found


def staging_lookups_for(db: Database) -> StagingLookups:
    """Light's lookups in `db` (`db`'s backend: memory/store/backends.py)."""
    found: StagingLookups = store_for("StagingLookups", db)
    return found
