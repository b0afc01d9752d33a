"""What Dreaming kept of a forgotten session: recall signals, promotions, preimages, the diary.

`forget` (memory/lifecycle/forget.py) calls these with the session's entries as they are on disk
*before*
it cuts them (their text and line numbers are what Dreaming cited):

- recall signals whose path and line range overlap a removed entry (or a removed session note,
  or the session's transcript) — `count_signals` / `delete_signals`;
- MEMORY.md lines Dreaming wrote from one of those entries: the exact line `entry_line` would
  write for it (its `<!-- source: path#Ln -->` resolves to the entry, the entry to the session).
  A line citing the entry whose text differs (edited by hand, or a merge into an entry that was
  already there) is kept and reported;
- the same lines in the preimages (memory/.dreams/MEMORY-*.md and `dream_runs.preimage_text`),
  so `pinch memory dream --undo` cannot bring them back;
- DREAMS.md report lines quoting one of those entries, replaced by a line saying it was
  forgotten (the diary is the owner's, but a user expects the text gone).

Dreaming stores no per-candidate rows (candidates are recomputed each night from the files, and
the tombstone keeps Light from staging a forgotten session's entries again).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory.files.atomic import locked_target, read_workspace_text, replace_atomically
from memory.files.discovery import DREAMS_FILE
from memory.files.writes import WorkspaceWriter
from memory.lifecycle.dream_memory import content_hash, entry_line
from memory.lifecycle.dream_stages import MEMORY_FILE, PREIMAGE_DIR, Candidate, log_entries
from memory.project_tags import line_projects
from memory.store.db import Database
from memory.store.dreams_store import dream_runs_for
from memory.store.recall_signals import Span, signals_for

FORGOTTEN_REPORT = "(an entry here was removed by `pinch memory forget`)"


@dataclass(frozen=True)
class Attributed:
    """One of Dreaming's entries (a bullet or paragraph) that belonged to the forgotten session."""

    path: str
    start: int
    end: int
    text: str
    project: str | None = None  # its project tag, which the promoted line keeps

    @property
    def source(self) -> str:
        return f"{self.path}#L{self.start}"

    @property
    def memory_line(self) -> str:
        """The MEMORY.md line a dream promoting it wrote."""
        c = Candidate("", self.path, self.start, self.end, self.text, None, self.project)
        return entry_line(c)

    def quoted_in(self, report_line: str) -> bool:
        """Whether a DREAMS.md report line is about this entry (its source and its snippet)."""
        snippet = repr(" ".join(self.text.split())[:70])
        return report_line.startswith(f"- {self.source}") and snippet in report_line


def attributed(path: str, text: str, spans: Sequence[Span]) -> list[Attributed]:
    """Dreaming's entries of `text` (file `path`) that start inside one of `spans`."""
    mine = [s for s in spans if s.path == path]
    out = []
    projects = line_projects(text.splitlines())
    for start, end, body in log_entries(text):
        project = next((p for p in projects[start - 1 : end] if p is not None), None)
        for s in mine:
            if s.start is None or s.end is None or s.start <= start <= s.end:
                out.append(Attributed(path, start, end, body.strip(), project))
                break
    return out


# ---- recall signals ---------------------------------------------------------------------------


def count_signals(db: Database, spans: Sequence[Span]) -> dict[str, int]:
    """path -> how many recall signals fall on `spans`."""
    return signals_for(db).count_on(spans)


# ---- MEMORY.md, preimages, DREAMS.md ----------------------------------------------------------


@dataclass(frozen=True)
class DreamFinding:
    kind: str  # memory_entry | dream_preimage | dream_preimage_db | dream_report
    action: str  # remove | keep
    path: str | None
    lines: str | None = None
    count: int = 1
    reason: str | None = None


def _without(text: str, drop: set[str]) -> tuple[str, int]:
    lines = text.split("\n")
    kept = [line for line in lines if line.rstrip() not in drop]
    return "\n".join(kept), len(lines) - len(kept)


def _redacted(text: str, entries: Sequence[Attributed]) -> tuple[str, int]:
    lines = text.split("\n")
    n = 0
    for i, line in enumerate(lines):
        hit = next((a for a in entries if a.quoted_in(line)), None)
        if hit is not None:
            lines[i] = f"- {hit.source}: {FORGOTTEN_REPORT}"
            n += 1
    return "\n".join(lines), n


def _read_hidden(workspace: Path, rel: str) -> str | None:
    """A preimage's text (`read_workspace_text` refuses hidden folders); None if absent or not
    a file."""
    path = workspace / rel
    if path.is_symlink() or not path.is_file():
        return None
    try:
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _preimage_files(workspace: Path) -> list[str]:
    folder = workspace / PREIMAGE_DIR
    if not folder.is_dir():
        return []
    return [f"{PREIMAGE_DIR}/{p.name}" for p in sorted(folder.glob("MEMORY-*.md")) if p.is_file()]


def _memory_findings(memory: str, entries: Sequence[Attributed]) -> list[DreamFinding]:
    wanted = {a.memory_line for a in entries}
    sources = [f"<!-- source: {a.source} -->" for a in entries]
    out = []
    for i, line in enumerate(memory.split("\n"), start=1):
        if line.rstrip() in wanted:
            out.append(DreamFinding("memory_entry", "remove", MEMORY_FILE, str(i)))
        elif any(s in line for s in sources):
            reason = "edited by hand, or merged into an entry that was there before"
            out.append(DreamFinding("memory_entry", "keep", MEMORY_FILE, str(i), reason=reason))
    return out


def plan_dreams(db: Database, workspace: Path, entries: Sequence[Attributed]) -> list[DreamFinding]:
    """What Dreaming holds of `entries`: MEMORY.md lines, preimages, diary lines. Reads only."""
    if not entries:
        return []
    wanted = {a.memory_line for a in entries}
    out = _memory_findings(read_workspace_text(workspace, MEMORY_FILE) or "", entries)
    for rel in _preimage_files(workspace):
        n = _without(_read_hidden(workspace, rel) or "", wanted)[1]
        if n:
            out.append(DreamFinding("dream_preimage", "remove", rel, count=n))
    runs = [
        run_id for run_id, text in dream_runs_for(db).preimage_texts() if _without(text, wanted)[1]
    ]
    if runs:
        out.append(DreamFinding("dream_preimage_db", "remove", None, count=len(runs)))
    diary = _redacted(read_workspace_text(workspace, DREAMS_FILE) or "", entries)[1]
    if diary:
        out.append(DreamFinding("dream_report", "remove", DREAMS_FILE, count=diary))
    return out


def forget_dreams(
    db: Database, workspace: Path, writer: WorkspaceWriter, entries: Sequence[Attributed]
) -> list[DreamFinding]:
    """Remove what `plan_dreams` finds, each file rewritten atomically against what is on disk
    when it is written (a line edited meanwhile no longer matches and stays). Returns what was
    done, as `plan_dreams` lists it."""
    done = plan_dreams(db, workspace, entries)
    if not done:
        return done
    wanted = {a.memory_line for a in entries}
    if any(f.kind == "memory_entry" and f.action == "remove" for f in done):
        swap: list[str] = []  # (before, after) of the write that happened (cut may run again)

        def cut(text: str | None) -> str:
            swap[:] = [text or "", _without(text or "", wanted)[0]]
            return swap[1]

        writer.rewrite(MEMORY_FILE, cut)
        # What was actually removed or kept is what the text on disk held at the swap.
        done = [f for f in done if f.kind != "memory_entry"]
        done = _memory_findings(swap[0], entries) + done
        # The last dream's undo still works: it checks MEMORY.md against what the dream wrote.
        dream_runs_for(db).replace_post_hash(content_hash(swap[0]), content_hash(swap[1]))
    for f in done:
        if f.kind == "dream_preimage" and f.path:
            _rewrite_hidden(workspace, f.path, lambda t: _without(t, wanted)[0])
        elif f.kind == "dream_report":
            writer.rewrite(DREAMS_FILE, lambda t: _redacted(t or "", entries)[0])

    def cut_preimage(text: str) -> str | None:
        new, n = _without(text, wanted)
        return new if n else None

    dream_runs_for(db).rewrite_preimages(cut_preimage)
    return done


def _rewrite_hidden(workspace: Path, rel: str, change: Any) -> None:
    """Rewrite a preimage (memory/.dreams/, outside what the writer may touch) compare-and-swap."""
    target = workspace / rel
    with locked_target(workspace, target) as pinned:
        for _ in range(5):
            current = _read_hidden(workspace, rel)
            if current is None:
                return
            if replace_atomically(
                pinned, change(current).encode("utf-8"), check=True, expect=current
            ):
                return
