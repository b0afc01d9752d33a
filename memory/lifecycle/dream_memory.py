"""Dreaming's writes: the MEMORY.md lines it adds, merges or supersedes, written safely.

`write_memory`: compare-and-swap on MEMORY.md's content, atomic replace, the preimage kept in
memory/.dreams/ (a hidden folder: never indexed), a rewrite that would drop more than
`max_drop_fraction` of prior entries refused (appended instead). DREAMS.md (workspace root) is the
human-readable diary (`append_diary`): it is not a memory file (not discovered, not indexed, not a
bootstrap file).
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from memory.errors import WorkspaceError
from memory.files.atomic import (
    locked_target,
    pinned_target,
    read_workspace_text,
    replace_atomically,
)
from memory.files.discovery import DREAMS_FILE
from memory.files.writes import escape_markup
from memory.lifecycle.dream_stages import (
    MEMORY_FILE,
    PREIMAGE_DIR,
    Candidate,
    DreamingConfig,
    Reinforced,
)
from memory.project_tags import project_marker

# ---- MEMORY.md entries and the new text -------------------------------------------------------

Action = Literal["added", "merged", "superseded"]


@dataclass(frozen=True)
class PromotionDecision:
    """What a dream does with one candidate that passed the gate: add it as a new MEMORY.md
    line, merge it into entry `target` (its source cited there), or supersede that entry."""

    item: Reinforced
    action: Action
    target: int | None = None  # index into `memory_entries(...)` for merged / superseded


def memory_entries(text: str) -> list[tuple[int, str]]:
    """(line index, line) of each entry of MEMORY.md: its bullet lines."""
    return [
        (i, line)
        for i, line in enumerate(text.splitlines())
        if re.match(r"^\s*([-*+]|\d+\.)\s", line)
    ]


def entry_line(c: Candidate) -> str:
    """The one line the program writes for a candidate, citing where it came from."""
    body = " ".join(escape_markup(c.text).split()).lstrip("-*+ ")
    tag = f" {project_marker(c.project)}" if c.project else ""  # the tag stays with the entry
    return f"- {body} <!-- source: {c.source} -->{tag}"


def build_rewrite(before: str, decisions: Sequence[PromotionDecision]) -> tuple[str, int]:
    """MEMORY.md after `decisions`; returns (text, prior entries dropped)."""
    lines = before.splitlines()
    entries = memory_entries(before)
    added: list[str] = []
    dropped = 0
    for d in decisions:
        new = entry_line(d.item.candidate)
        if d.action == "added" or d.target is None or not 0 <= d.target < len(entries):
            added.append(new)
            continue
        at = entries[d.target][0]
        if d.action == "merged":
            lines[at] = f"{lines[at]} <!-- source: {d.item.candidate.source} -->"
        else:
            lines[at] = new
            dropped += 1
    return _with_appended("\n".join(lines) + ("\n" if lines else ""), added), dropped


def build_append(before: str, decisions: Sequence[PromotionDecision]) -> str:
    """MEMORY.md with every decided candidate appended and nothing else changed."""
    return _with_appended(before, [entry_line(d.item.candidate) for d in decisions])


def _with_appended(text: str, new_lines: Sequence[str]) -> str:
    if not new_lines:
        return text
    if not text.strip():
        text = "# MEMORY.md\n"
    if not text.endswith("\n"):
        text += "\n"
    heading = "## Consolidated by dreaming"
    if heading not in text:
        text += f"\n{heading}\n\n"
    return text + "".join(f"{line}\n" for line in new_lines)


# ---- safe writes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteResult:
    mode: Literal["rewrite", "append", "none"]
    preimage: str | None
    pre_hash: str
    post_hash: str
    note: str = ""  # why a rewrite became an append
    preimage_text: str = ""


def content_hash(text: str | None) -> str:
    return hashlib.sha256((text or "").encode("utf-8")).hexdigest()


def write_memory(
    workspace: Path,
    decisions: Sequence[PromotionDecision],
    *,
    before: str | None,
    config: DreamingConfig,
    budget_chars: int,
    now: datetime,
    before_write: Callable[[], None] | None = None,
) -> WriteResult:
    """Write `decisions` into MEMORY.md read as `before`: a rewrite when it keeps ≥ 75 % of the
    prior entries and the file has not changed since it was read, else an append to what is on
    disk now. The preimage is saved first. `before_write` runs just before the swap (tests)."""
    pre = before or ""
    note = ""
    text, dropped = build_rewrite(pre, decisions)
    prior = len(memory_entries(pre))
    mode: Literal["rewrite", "append"] = "rewrite"
    if prior and dropped / prior > config.max_drop_fraction:
        note = f"a rewrite would drop {dropped} of {prior} entries: appended instead"
        mode, text = "append", build_append(pre, decisions)
    elif not any(d.action != "added" for d in decisions):
        mode = "append"
    if len(text) > budget_chars:
        raise WorkspaceError(f"MEMORY.md would exceed its budget of {budget_chars} characters.")
    preimage = _save_preimage(workspace, pre, now)
    target = workspace / MEMORY_FILE
    with locked_target(workspace, target) as pinned:
        if before_write is not None:
            before_write()
        if replace_atomically(pinned, text.encode("utf-8"), check=True, expect=before):
            return WriteResult(mode, preimage, content_hash(pre), content_hash(text), note, pre)
        # Someone edited MEMORY.md since we read it: keep their text, add ours at the end.
        for _ in range(5):
            current = read_workspace_text(workspace, MEMORY_FILE)
            preimage = _save_preimage(workspace, current or "", now)
            appended = build_append(current or "", decisions)
            if replace_atomically(pinned, appended.encode("utf-8"), check=True, expect=current):
                note = "MEMORY.md changed during the dream: appended instead of rewriting"
                return WriteResult(
                    "append",
                    preimage,
                    content_hash(current),
                    content_hash(appended),
                    note,
                    current or "",
                )
    raise WorkspaceError("MEMORY.md kept changing during the dream; nothing was written.")


def check_writable(workspace: Path) -> None:
    """Raise WorkspaceError unless a dream can write everything it writes: MEMORY.md and
    DREAMS.md readable as UTF-8 (each is rewritten from what it holds) and their folders, and
    that of the preimages, writable (an atomic replace writes beside the file). Checked before
    MEMORY.md changes, so a run never stops half-way: rewritten, but no report."""
    try:
        for rel in (MEMORY_FILE, DREAMS_FILE):
            read_workspace_text(workspace, rel)
        for folder in (workspace, _nearest_existing(workspace / PREIMAGE_DIR)):
            if not os.access(folder, os.W_OK | os.X_OK):
                raise WorkspaceError(
                    f"{folder} is not writable for this user: let Pinch write there (chmod u+w)."
                )
    except WorkspaceError as exc:
        raise WorkspaceError(f"{exc} Nothing was written: MEMORY.md is unchanged.") from exc


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _save_preimage(workspace: Path, text: str, now: datetime) -> str:
    stamp = now.strftime("%Y%m%dT%H%M%S") + f"-{uuid.uuid4().hex[:6]}"
    rel = f"{PREIMAGE_DIR}/MEMORY-{stamp}.md"
    target = workspace / rel
    with pinned_target(workspace, target) as pinned:
        replace_atomically(pinned, text.encode("utf-8"))
    return rel


def append_diary(workspace: Path, text: str) -> None:
    """Append a report to DREAMS.md (a diary for the owner; never indexed nor loaded)."""
    target = workspace / DREAMS_FILE
    with locked_target(workspace, target) as pinned:
        for _ in range(5):
            current = read_workspace_text(workspace, DREAMS_FILE)
            head = current if current else "# DREAMS.md\n\nWhat dreaming did, night by night.\n"
            new = head.rstrip("\n") + "\n\n" + text.strip("\n") + "\n"
            if replace_atomically(pinned, new.encode("utf-8"), check=True, expect=current):
                return
