"""`DreamRunStore` and `StagingLookups` on PostgreSQL (tables `dream_runs`, `dream_lease`; the
lookups read `memory_sources`, `memory_generations` and `sessions`).

How the promises are kept here: the lease row is taken with one upsert whose update applies
only when the present lease has expired (`ON CONFLICT … DO UPDATE … WHERE`), so of two callers
— in any processes — at most one holds an unexpired lease; `rewrite_preimages` reads the rows
`FOR UPDATE` and rewrites them in the same transaction. The tables exist from the first
migration (PostgreSQL creates every store's tables at open), so reading creates nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memory.store.dreams_store import LastDream, RunWrite, UndoableRun
from memory.store.postgres.database import PgDatabase, one_row

_RECENT = (
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
)


class PgDreamRuns:
    """`DreamRunStore` on PostgreSQL (memory/store/dreams_store.py states the promises)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def acquire_lease(self, name: str, holder: str, *, now: float, lease_s: float) -> bool:
        with self.db.transaction() as conn:
            row = conn.execute(
                "INSERT INTO dream_lease (name, holder, expires_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
                "expires_at = excluded.expires_at WHERE dream_lease.expires_at <= %s "
                "RETURNING holder",
                (name, holder, now + lease_s, now),
            ).fetchone()
        return row is not None

    def release_lease(self, name: str, holder: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM dream_lease WHERE name = %s AND holder = %s", (name, holder))

    def start_run(self, phase: str, *, started_at: float) -> int:
        with self.db.transaction() as conn:
            row = conn.execute(
                "INSERT INTO dream_runs (started_at, phase) VALUES (%s, %s) RETURNING id",
                (started_at, phase),
            ).fetchone()
            return int(one_row(row)[0])

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
                "UPDATE dream_runs SET finished_at = %s, promoted = %s, model_calls = %s, "
                "tokens = %s, mode = %s, preimage = %s, preimage_text = %s, pre_hash = %s, "
                "post_hash = %s, outcome = %s WHERE id = %s",
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
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO dream_runs (started_at, finished_at, phase, outcome) "
                "VALUES (%s, %s, %s, %s)",
                (at, at, phase, f"failed: {reason}"),
            )

    def last_finished(self) -> LastDream | None:
        rows = self.db.execute(
            "SELECT id, started_at, outcome, promoted, undone_at FROM dream_runs "
            "WHERE finished_at IS NOT NULL ORDER BY id DESC LIMIT 1"
        )
        if not rows:
            return None
        run_id, started, text, promoted, undone = rows[0]
        return LastDream(
            int(run_id), float(started), str(text or f"promoted {promoted}"), undone is not None
        )

    def last_undoable(self) -> UndoableRun | None:
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
            conn.execute("UPDATE dream_runs SET undone_at = %s WHERE id = %s", (at, run_id))

    def recent(self, n: int) -> list[dict[str, Any]]:
        rows = self.db.execute(
            f"SELECT {', '.join(_RECENT)} FROM dream_runs ORDER BY id DESC LIMIT %s", (n,)
        )
        return [dict(zip(_RECENT, r, strict=True)) for r in rows]

    def preimage_texts(self) -> list[tuple[int, str]]:
        rows = self.db.execute(
            "SELECT id, preimage_text FROM dream_runs WHERE preimage_text != '' ORDER BY id"
        )
        return [(int(r[0]), str(r[1])) for r in rows]

    def replace_post_hash(self, old: str, new: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE dream_runs SET post_hash = %s WHERE post_hash = %s", (new, old))

    def rewrite_preimages(self, change: Callable[[str], str | None]) -> None:
        with self.db.transaction() as conn:
            for run_id, text in conn.execute(
                "SELECT id, preimage_text FROM dream_runs WHERE preimage_text != '' "
                "ORDER BY id FOR UPDATE"
            ).fetchall():
                new = change(str(text))
                if new is not None:
                    conn.execute(
                        "UPDATE dream_runs SET preimage_text = %s WHERE id = %s", (new, int(run_id))
                    )


class PgStagingLookups:
    """`StagingLookups` on PostgreSQL (index generations, sessions)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def indexed_origin(self, path: str) -> str | None:
        rows = self.db.execute(
            "SELECT s.origin FROM memory_sources s JOIN memory_generations g "
            "ON g.id = s.generation WHERE g.state = 'active' AND s.path = %s",
            (path,),
        )
        return str(rows[0][0]) if rows else None

    def automated_sessions(self, ids: set[str]) -> set[str]:
        if not ids:
            return set()
        rows = self.db.execute(
            "SELECT id FROM sessions WHERE id = ANY(%s) AND (channel IN ('automation', "
            "'heartbeat', 'subagent') OR thread_id LIKE 'job:%%' "
            "OR thread_id LIKE 'subagent:%%')",
            (sorted(ids),),
        )
        return {str(r[0]) for r in rows}
