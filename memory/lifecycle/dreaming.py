"""Dreaming, the program's side: nightly consolidation of recalled notes into MEMORY.md.

The stages and their pieces, each in its own module (this one only gathers their names):
- memory/lifecycle/dream_stages.py — Light (`stage_candidates`), REM (`reinforce`), Deep
  (`gate`), and `DreamingConfig`;
- memory/lifecycle/dream_memory.py — the MEMORY.md lines a dream writes (`PromotionDecision`,
  `build_rewrite`, `build_append`), written safely (`write_memory`), and the DREAMS.md diary;
- memory/lifecycle/dream_runs.py — the lease, the record of each run, `plan_undo`/`undo_last`.
The model's side (asking which entries to promote, and how) is agent/dream_run.py.
"""

from __future__ import annotations

from memory.lifecycle.dream_memory import (
    Action,
    PromotionDecision,
    WriteResult,
    append_diary,
    build_append,
    build_rewrite,
    check_writable,
    content_hash,
    entry_line,
    memory_entries,
    write_memory,
)
from memory.lifecycle.dream_runs import (
    LEASE_NAME,
    DreamBusyError,
    UndoPlan,
    acquire_lease,
    finish_run,
    last_dream,
    last_runs,
    plan_undo,
    record_failed_run,
    release_lease,
    start_run,
    undo_last,
)
from memory.lifecycle.dream_stages import (
    MEMORY_FILE,
    PREIMAGE_DIR,
    TRUSTED_FOR_DREAMING,
    Candidate,
    DreamingConfig,
    Reinforced,
    gate,
    log_entries,
    reinforce,
    stage_candidates,
)
from memory.store.dreams_store import LastDream

__all__ = [
    "LEASE_NAME",
    "MEMORY_FILE",
    "PREIMAGE_DIR",
    "TRUSTED_FOR_DREAMING",
    "Action",
    "Candidate",
    "DreamBusyError",
    "DreamingConfig",
    "LastDream",
    "PromotionDecision",
    "Reinforced",
    "UndoPlan",
    "WriteResult",
    "acquire_lease",
    "append_diary",
    "build_append",
    "build_rewrite",
    "check_writable",
    "content_hash",
    "entry_line",
    "finish_run",
    "gate",
    "last_dream",
    "last_runs",
    "log_entries",
    "memory_entries",
    "plan_undo",
    "record_failed_run",
    "reinforce",
    "release_lease",
    "stage_candidates",
    "start_run",
    "undo_last",
    "write_memory",
]
