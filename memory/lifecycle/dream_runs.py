"""Dream runs: the lease that lets one dream run at a time, the record of each run, and undo.

`undo_last` puts the preimage of the last dream that wrote MEMORY.md back, compare-and-swap
checked (refused when MEMORY.md was edited since). Rows live in a `DreamRunStore`
(memory/store/dreams_store.py).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from memory.errors import WorkspaceError
from memory.files.atomic import locked_target, read_workspace_text, replace_atomically
from memory.lifecycle.dream_memory import WriteResult, content_hash, memory_entries
from memory.lifecycle.dream_stages import MEMORY_FILE
from memory.store.db import Database
from memory.store.dreams_store import LastDream, RunWrite, dream_runs_for

LEASE_NAME = "dream"


class DreamBusyError(WorkspaceError):
    """Another dream is running."""


def acquire_lease(db: Database, *, lease_s: float, now: float | None = None) -> str:
    """Take the dream lease or raise DreamBusyError; returns the holder id to release with."""
    holder = uuid.uuid4().hex
    at = time.time() if now is None else now
    if not dream_runs_for(db).acquire_lease(LEASE_NAME, holder, now=at, lease_s=lease_s):
        raise DreamBusyError(
            "A dream is already running (started by another process or the nightly job); "
            "wait for it to finish."
        )
    return holder


def release_lease(db: Database, holder: str) -> None:
    dream_runs_for(db).release_lease(LEASE_NAME, holder)


def start_run(db: Database, phase: str, *, started_at: float | None = None) -> int:
    at = time.time() if started_at is None else started_at
    return dream_runs_for(db).start_run(phase, started_at=at)


def finish_run(
    db: Database,
    run_id: int,
    *,
    promoted: int,
    model_calls: int,
    tokens: int,
    write: WriteResult | None,
    outcome: str = "",
) -> None:
    kept = (
        RunWrite(write.mode, write.preimage, write.preimage_text, write.pre_hash, write.post_hash)
        if write
        else None
    )
    dream_runs_for(db).finish_run(
        run_id,
        finished_at=time.time(),
        promoted=promoted,
        model_calls=model_calls,
        tokens=tokens,
        write=kept,
        outcome=outcome,
    )


def record_failed_run(db: Database, phase: str, reason: str) -> None:
    """Record a run that could not happen (the nightly job's model failed, say), so that
    `pinch memory status` shows it; nothing else is kept of it."""
    dream_runs_for(db).record_failed_run(phase, reason, at=time.time())


def last_dream(db: Database) -> LastDream | None:
    """The latest finished dream (not a dry run), read only: creates no table."""
    return dream_runs_for(db).last_finished()


@dataclass(frozen=True)
class UndoPlan:
    """What `pinch memory dream --undo` would do: put `restored` (the preimage of dream
    `run_id`, saved as `preimage`) back in place of `current`."""

    run_id: int
    preimage: str
    started_at: float
    restored: str
    current: str | None
    post_hash: str

    @property
    def coming_back(self) -> list[str]:
        """Entries of the preimage that MEMORY.md no longer has (superseded by the dream)."""
        return _missing_from(self.restored, self.current or "")

    @property
    def going(self) -> list[str]:
        """Entries of MEMORY.md that the preimage does not have (added by the dream)."""
        return _missing_from(self.current or "", self.restored)

    def lines(self) -> list[str]:
        when = datetime.fromtimestamp(self.started_at).astimezone()
        back, going = self.coming_back, self.going
        return [
            f"Would restore MEMORY.md from {self.preimage} (the copy saved by dream "
            f"#{self.run_id} of {when:%Y-%m-%d %H:%M}):",
            f"{_entries_count(len(going))} would go:",
            *(f"  {line}" for line in going),
            f"{_entries_count(len(back))} would come back:",
            *(f"  {line}" for line in back),
            "Nothing was changed (dry run).",
        ]


def _entries_count(n: int) -> str:
    return f"{n} entry" if n == 1 else f"{n} entries"


def _missing_from(text: str, other: str) -> list[str]:
    """Entries of `text` that `other` lacks (counted: a duplicate line counts twice)."""
    left = Counter(line.strip() for _, line in memory_entries(other))
    out = []
    for _, line in memory_entries(text):
        if left[line.strip()]:
            left[line.strip()] -= 1
        else:
            out.append(line.strip())
    return out


def plan_undo(db: Database, workspace: Path) -> UndoPlan:
    """The undo of the last dream that wrote MEMORY.md, not yet done.

    Raises WorkspaceError when there is none, or when MEMORY.md was edited since that dream
    wrote it (undoing would lose the edit)."""
    run = dream_runs_for(db).last_undoable()
    if run is None:
        raise WorkspaceError("There is no dream to undo.")
    plan = UndoPlan(
        run.run_id,
        run.preimage,
        run.started_at,
        run.preimage_text,
        read_workspace_text(workspace, MEMORY_FILE),
        run.post_hash,
    )
    _check_unedited(plan, plan.current)
    return plan


def _check_unedited(plan: UndoPlan, current: str | None) -> None:
    if content_hash(current) != plan.post_hash:
        raise WorkspaceError(
            "MEMORY.md was edited after the last dream, so undo would lose those edits; "
            f"nothing was changed. The pre-dream copy is {plan.preimage}."
        )


def undo_last(db: Database, workspace: Path) -> str:
    """Restore MEMORY.md from the last dream's preimage; returns what was done.

    Refused (WorkspaceError) when MEMORY.md changed since that dream wrote it."""
    plan = plan_undo(db, workspace)
    target = workspace / MEMORY_FILE
    with locked_target(workspace, target) as pinned:
        current = read_workspace_text(workspace, MEMORY_FILE)
        _check_unedited(plan, current)
        restored = plan.restored.encode("utf-8")
        if not replace_atomically(pinned, restored, check=True, expect=current):
            raise WorkspaceError("MEMORY.md changed during the undo; nothing was changed.")
    dream_runs_for(db).mark_undone(plan.run_id, at=time.time())
    return f"MEMORY.md restored from {plan.preimage} (dream #{plan.run_id} undone)."


def last_runs(db: Database, n: int = 5) -> list[dict[str, Any]]:
    return dream_runs_for(db).recent(n)
