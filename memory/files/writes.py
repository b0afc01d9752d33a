"""Every write Pinch makes to the workspace: confined, atomic, UTF-8, and never lossy.

- Confined: workspace-relative paths only — no absolute paths, `..`, hidden segments (`.git/…`)
  or symbolic links anywhere along the path — and only Markdown (`.md`) files.
- Atomic: the new content goes to a temporary file in the same folder, is synced to disk and
  renamed over the old file (keeping its permissions); a failure leaves the old file as it was.
- Never lossy: appends re-read the file just before the rename and start over if someone (the
  owner in an editor) changed it meanwhile; a file that is not valid UTF-8 is refused, not
  rewritten with replacement characters; session notes never overwrite an existing file.

- Unforgeable: text the agent writes (appends, facts, section names) cannot add structure the
  index trusts — `<!-- … -->` markers (importance, observed/status) are removed and stray `<!--`
  `-->` escaped, Markdown headings escaped, control characters and terminal escapes dropped
  (`escape_markup`) — and one append or fact is at most 16 kB (`MAX_APPEND_BYTES`).

Each successful write calls `on_written(rel_path)` (the agent re-indexes memory there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, tzinfo
from pathlib import Path
from typing import Literal

from memory.errors import WorkspaceError
from memory.files.atomic import (
    WRITE_LOCK,
    create_atomically,
    encode_utf8,
    locked_target,
    pinned_target,
    read_workspace_text,
    replace_atomically,
    sync_folder,
)
from memory.files.markdown_edits import (
    append_block,
    escape_markup,
    fact_file_heading,
    insert_in_section,
    mark_paragraphs,
    slugify,
    supersede_fact,
)
from memory.files.workspace import confine_path
from memory.project_tags import tag_entries, tag_section
from memory.store.lineage import origin_marker

log = logging.getLogger(__name__)

FACT_FILES = ("USER.md", "MEMORY.md")
MAX_APPEND_BYTES = 16 * 1024
_RETRIES = 5


@dataclass(frozen=True)
class AppendedEntry:
    path: str  # workspace path of the log
    text: str  # the entry as written, marker included

    @property
    def lines(self) -> int:
        return self.text.count("\n") + 1


class WorkspaceWriter:
    """Writes memory files inside one workspace. Every method blocks (file I/O)."""

    def __init__(
        self,
        workspace: Path,
        on_written: Callable[[str], None] | None = None,
        tz: tzinfo | None = None,
    ) -> None:
        self.workspace = workspace
        self.on_written = on_written
        self.tz = tz  # the owner's time zone; None: this machine's local time

    # ---- the write paths --------------------------------------------------------------------

    def append_daily_log(
        self,
        text: str,
        *,
        now: datetime | None = None,
        origin: str | None = None,
        session_id: str | None = None,
    ) -> str:
        """Append a line or paragraph to today's log, memory/YYYY-MM-DD.md; returns that path.

        The file is created with a "# YYYY-MM-DD" heading on the day's first entry. "Today" is
        in the owner's time zone (`now` without tzinfo is taken as the owner's local time).
        With `origin` and `session_id`, the entry ends with the provenance marker
        (memory/store/lineage.py), added after escaping so the agent's text cannot forge one.
        """
        return self.append_daily_entry(text, now=now, origin=origin, session_id=session_id).path

    def append_daily_entry(
        self,
        text: str,
        *,
        now: datetime | None = None,
        origin: str | None = None,
        session_id: str | None = None,
        project: str | None = None,
    ) -> AppendedEntry:
        """`append_daily_log`, returning the entry exactly as written (for lineage). With
        `project` (the session's active one), each of its entries is tagged with it."""
        entry = escape_markup(text).strip("\n")
        if not entry.strip():
            raise WorkspaceError("Nothing to append: the text is empty.")
        _check_size(entry, "note")
        if project is not None:
            entry = tag_entries(entry, project)
        if origin is not None and session_id is not None:
            entry = entry.rstrip() + " " + origin_marker(origin, session_id)
        day = self._today(now)
        rel = f"memory/{day.isoformat()}.md"

        def add(current: str | None) -> str:
            if current is None or not current.strip():
                return f"# {day.isoformat()}\n\n{entry}\n"
            return append_block(current, entry)

        return AppendedEntry(self._update(rel, add), entry)

    def record_fact(
        self,
        target: Literal["USER.md", "MEMORY.md"],
        text: str,
        *,
        section: str | None = None,
        supersedes: str | None = None,
        now: datetime | None = None,
    ) -> str:
        """Add "- text <!-- observed: DATE | status: active -->" to USER.md or MEMORY.md.

        Goes at the end of `## section` (created if missing), else at the end of the file. With
        `supersedes` (part of one existing fact line), that line's status becomes superseded; if
        no line or several lines match, nothing is written and the error says so.
        """
        if target not in FACT_FILES:
            raise WorkspaceError(f"Facts go to USER.md or MEMORY.md, not {target!r}.")
        # One bullet, one line; markers and headings inside it could forge structure.
        fact = " ".join(escape_markup(text).split())
        if not fact:
            raise WorkspaceError("Nothing to record: the fact is empty.")
        _check_size(fact, "fact")
        if section is not None:
            section = " ".join(escape_markup(section).split()).lstrip("#\\ ")[:200] or None
        day = self._today(now).isoformat()
        line = f"- {fact} <!-- observed: {day} | status: active -->"

        def add(current: str | None) -> str:
            content = current if current is not None else fact_file_heading(target)
            if supersedes is not None:
                content = supersede_fact(content, supersedes, target)
            return insert_in_section(content, line, section)

        return self._update(target, add)

    def write_session_note(
        self,
        day: date,
        slug: str,
        body: str,
        *,
        origin: str | None = None,
        session_id: str | None = None,
        project: str | None = None,
    ) -> str:
        """Write memory/YYYY-MM-DD-<slug>.md; if it exists, -2, -3 … is added, never overwritten.

        With `origin` and `session_id`, every paragraph ends with the provenance marker; with
        `project`, the note is tagged with it (on its title: the whole note)."""
        clean = slugify(slug)
        text = body if body.endswith("\n") else body + "\n"
        if project is not None:
            text = tag_section(text, project)
        if origin is not None and session_id is not None:
            text = mark_paragraphs(text, origin_marker(origin, session_id))
        data = encode_utf8(text)
        with WRITE_LOCK:
            for n in range(1, 1000):
                suffix = "" if n == 1 else f"-{n}"
                rel = f"memory/{day.isoformat()}-{clean}{suffix}.md"
                target = self._confine(rel)
                if target.exists():
                    continue
                with pinned_target(self.workspace, target) as pinned:
                    if create_atomically(pinned, data):
                        break
            else:
                raise WorkspaceError(
                    f"Too many session notes named {clean!r} on {day}; use another slug."
                )
        self._written(rel)
        return rel

    def write_file(self, rel_path: str, text: str) -> str:
        """Replace (or create) a Markdown file inside the workspace, atomically."""
        target = self._confine(rel_path)
        rel = target.relative_to(self.workspace).as_posix()
        with locked_target(self.workspace, target) as pinned:
            replace_atomically(pinned, encode_utf8(text))
        self._written(rel)
        return rel

    def rewrite(self, rel_path: str, change: Callable[[str | None], str]) -> str:
        """Read–change–write `rel_path` atomically; `change` may run again if the file changed
        on disk meanwhile (an editor), so it must work on whatever text it is given."""
        return self._update(rel_path, change)

    def remove_file(self, rel_path: str, expect: str) -> bool:
        """Delete `rel_path` only if it still holds exactly `expect`; False if it changed."""
        target = self._confine(rel_path)
        rel = target.relative_to(self.workspace).as_posix()
        with WRITE_LOCK:
            if read_workspace_text(self.workspace, rel) != expect:
                return False
            try:
                with pinned_target(
                    self.workspace, target
                ) as pinned:  # no link swap can redirect it
                    pinned.unlink()
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise WorkspaceError(f"Could not remove {rel}: {exc.strerror or exc}.") from exc
            sync_folder(target.parent)
        self._written(rel)
        return True

    # ---- helpers ----------------------------------------------------------------------------

    def _today(self, now: datetime | None) -> date:
        if now is None:
            now = datetime.now(self.tz) if self.tz else datetime.now().astimezone()
        elif now.tzinfo is not None and self.tz is not None:
            now = now.astimezone(self.tz)
        return now.date()

    def _update(self, rel_path: str, change: Callable[[str | None], str]) -> str:
        """Read–change–write one file, retrying if it changed on disk while we worked."""
        target = self._confine(rel_path)
        rel = target.relative_to(self.workspace).as_posix()
        with locked_target(self.workspace, target) as pinned:
            for _ in range(_RETRIES):
                before = read_workspace_text(self.workspace, rel)
                data = encode_utf8(change(before))
                if replace_atomically(pinned, data, check=True, expect=before):
                    break
            else:
                raise WorkspaceError(
                    f"{rel} kept changing while Pinch tried to write to it; try again once "
                    "nobody else is editing it."
                )
        self._written(rel)
        return rel

    def _written(self, rel: str) -> None:
        if self.on_written is None:
            return
        try:
            self.on_written(rel)
        except Exception:
            log.warning("The on_written hook failed for %s", rel, exc_info=True)

    def _confine(self, raw: str) -> Path:
        """The absolute path of a workspace-relative Markdown path, or WorkspaceError.

        A target with several hard links is refused (`confine_path`): it may be a file outside
        the workspace, whose content the read–change–write would copy in.
        """
        target, rel = confine_path(self.workspace, raw)
        if not rel.endswith(".md"):
            raise WorkspaceError(
                f"{raw!r} is not a Markdown file: Pinch writes only .md files in the workspace."
            )
        if target.exists() and not target.is_file():
            raise WorkspaceError(f"{rel} exists and is not a regular file.")
        return target


def _check_size(text: str, what: str) -> None:
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_APPEND_BYTES:
        raise WorkspaceError(
            f"The {what} is {size:,} bytes; one write takes at most {MAX_APPEND_BYTES:,} bytes "
            "(16 kB), and nothing was written. Keep the essentials, or split it into a few "
            "shorter notes."
        )
