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

import contextlib
import logging
import os
import re
import tempfile
import threading
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, tzinfo
from pathlib import Path
from typing import Literal

from memory.errors import WorkspaceError
from memory.files.workspace import (
    PRIVATE_FILE_MODE,
    FileMissingError,
    confine_path,
    make_private_dirs,
    open_folder_confined,
    read_confined,
)
from memory.store.lineage import origin_marker

log = logging.getLogger(__name__)

FACT_FILES = ("USER.md", "MEMORY.md")
MAX_APPEND_BYTES = 16 * 1024
_RETRIES = 5
_MARKER = re.compile(r"<!--\s*observed:[^>]*?status:\s*(active|superseded)\s*-->", re.IGNORECASE)
_ANY_MARKER = re.compile(r"<!--\s*(?:observed:[^>]*?)?status:\s*\w+\s*-->", re.IGNORECASE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_TERMINAL_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.)?")
_ATX_HEADING = re.compile(r"^([ \t]{0,3})(#{1,6})(?=[ \t]|$)", re.MULTILINE)
_SETEXT_UNDERLINE = re.compile(r"^([ \t]{0,3})(=+|-{2,})[ \t]*$", re.MULTILINE)
# One lock for the process: two writers must not interleave read-modify-write of one file.
_write_lock = threading.RLock()


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
    ) -> AppendedEntry:
        """`append_daily_log`, returning the entry exactly as written (for lineage)."""
        entry = escape_markup(text).strip("\n")
        if not entry.strip():
            raise WorkspaceError("Nothing to append: the text is empty.")
        _check_size(entry, "note")
        if origin is not None and session_id is not None:
            entry = entry.rstrip() + " " + origin_marker(origin, session_id)
        day = self._today(now)
        rel = f"memory/{day.isoformat()}.md"

        def add(current: str | None) -> str:
            if current is None or not current.strip():
                return f"# {day.isoformat()}\n\n{entry}\n"
            return _append_block(current, entry)

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
            content = current if current is not None else _fact_file_heading(target)
            if supersedes is not None:
                content = _supersede(content, supersedes, target)
            return _insert_in_section(content, line, section)

        return self._update(target, add)

    def write_session_note(
        self,
        day: date,
        slug: str,
        body: str,
        *,
        origin: str | None = None,
        session_id: str | None = None,
    ) -> str:
        """Write memory/YYYY-MM-DD-<slug>.md; if it exists, -2, -3 … is added, never overwritten.

        With `origin` and `session_id`, every paragraph ends with the provenance marker."""
        clean = _slugify(slug)
        text = body if body.endswith("\n") else body + "\n"
        if origin is not None and session_id is not None:
            text = _mark_paragraphs(text, origin_marker(origin, session_id))
        data = _encode(text)
        with _write_lock:
            for n in range(1, 1000):
                suffix = "" if n == 1 else f"-{n}"
                rel = f"memory/{day.isoformat()}-{clean}{suffix}.md"
                target = self._confine(rel)
                if target.exists():
                    continue
                with _pinned(self.workspace, target) as pinned:
                    if _write_new(pinned, data):
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
        with _write_lock, _pinned(self.workspace, target) as pinned:
            _atomic_write(pinned, _encode(text))
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
        with _write_lock:
            if _read_text(self.workspace, rel) != expect:
                return False
            try:
                with _pinned(self.workspace, target) as pinned:  # no link swap can redirect it
                    pinned.unlink()
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise WorkspaceError(f"Could not remove {rel}: {exc.strerror or exc}.") from exc
            _fsync_dir(target.parent)
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
        with _write_lock, _pinned(self.workspace, target) as pinned:
            for _ in range(_RETRIES):
                before = _read_text(self.workspace, rel)
                data = _encode(change(before))
                if _atomic_write(pinned, data, check=True, expect=before):
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


def escape_markup(text: str) -> str:
    """Agent-written text made unable to forge structure in a memory file.

    Comments (`<!-- importance: 5 -->`, `<!-- observed: … | status: … -->`) are removed and any
    stray `<!--` / `-->` escaped; heading lines (`# …`, setext underlines) are escaped with a
    backslash, so they show as text; terminal escape sequences and control characters other than
    newline and tab are dropped (they would reach the owner's screen through search results).
    """
    text = _TERMINAL_ESCAPE.sub("", text.replace("\r\n", "\n"))
    text = "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch) != "Cc")
    text = _COMMENT.sub("", text).replace("<!--", "&lt;!--").replace("-->", "--&gt;")
    text = _ATX_HEADING.sub(r"\1\\\2", text)
    return _SETEXT_UNDERLINE.sub(r"\1\\\2", text)


def _mark_paragraphs(text: str, marker: str) -> str:
    """`marker` at the end of each paragraph's last line (not headings or comment lines)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        last = i + 1 == len(lines) or not lines[i + 1].strip()
        plain = not _HEADING.match(line) and not line.lstrip().startswith("<!--")
        if line.strip() and last and plain:
            lines[i] = line.rstrip() + " " + marker
    return "\n".join(lines)


def _check_size(text: str, what: str) -> None:
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_APPEND_BYTES:
        raise WorkspaceError(
            f"The {what} is {size:,} bytes; one write takes at most {MAX_APPEND_BYTES:,} bytes "
            "(16 kB), and nothing was written. Keep the essentials, or split it into a few "
            "shorter notes."
        )


# ---- file operations ------------------------------------------------------------------------


@contextlib.contextmanager
def _pinned(workspace: Path, target: Path) -> Iterator[Path]:
    """`target` reached through a descriptor of its folder, opened without following links.

    On Linux the folder is named `/proc/self/fd/N/`: it stays the folder that was checked even
    if someone swaps it (or a parent) for a symbolic link meanwhile, so the temporary file and
    the rename cannot land outside the workspace. Elsewhere, `target` itself.
    """
    _mkdirs(target)
    rel = target.relative_to(workspace).as_posix()
    fd = open_folder_confined(workspace, rel)
    try:
        proc = Path(f"/proc/self/fd/{fd}")
        yield proc / target.name if proc.is_dir() else target
    finally:
        os.close(fd)


def _read_text(workspace: Path, rel: str) -> str | None:
    """The file's text, None if it does not exist; refuses binary and non-UTF-8 files.

    Opened without following links (`read_confined`): a file swapped for a symbolic link after
    `_confine` checked it cannot bring outside content into the workspace.
    """
    try:
        data = read_confined(workspace, rel)
    except FileMissingError:
        return None
    if b"\x00" in data:
        raise WorkspaceError(
            f"{rel} contains NUL bytes (binary data), so Pinch will not change it. Move it out "
            "of the workspace or fix it, then try again."
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkspaceError(
            f"{rel} is not valid UTF-8 (first bad byte at offset {exc.start}), so Pinch will not "
            "write to it and risk corrupting it. Fix its encoding (re-save it as UTF-8 in your "
            "editor, or `iconv -f latin1 -t utf-8`), then try again."
        ) from exc


def _encode(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise WorkspaceError(f"The text cannot be written as UTF-8: {exc.reason}.") from exc


def _new_file_mode() -> int:
    # Memory files hold the owner's life: readable by the owner only, whatever the umask.
    return PRIVATE_FILE_MODE


def _mkdirs(path: Path) -> None:
    try:
        make_private_dirs(path.parent)
    except OSError as exc:
        raise WorkspaceError(f"Cannot create the folder {path.parent}: {exc.strerror}.") from exc


def _temp_copy(target: Path, data: bytes, mode: int) -> str:
    """A synced temporary file beside `target` holding `data`; returns its path."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return tmp


def _atomic_write(
    target: Path, data: bytes, *, check: bool = False, expect: str | None = None
) -> bool:
    """Replace `target` with `data` atomically, keeping its permissions.

    With `check`, the replace happens only if the file still holds `expect` (the text read
    before; None: it did not exist); returns False when it changed meanwhile.
    """
    _mkdirs(target)
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = _new_file_mode()
    tmp = _temp_copy(target, data, mode)
    try:
        if check:
            try:
                now = target.read_bytes().decode("utf-8")
            except FileNotFoundError:
                now = None
            except UnicodeDecodeError:
                return False
            if now != expect:
                return False
        os.replace(tmp, target)
    except OSError as exc:
        raise WorkspaceError(
            f"Could not write {target.name}: {exc.strerror or exc}. The file was not changed."
        ) from exc
    finally:
        _unlink_quietly(tmp)
    _fsync_dir(target.parent)
    return True


def _write_new(target: Path, data: bytes) -> bool:
    """Create `target` with `data` atomically, never replacing a file; False if one exists."""
    _mkdirs(target)
    tmp = _temp_copy(target, data, _new_file_mode())
    try:
        try:
            os.link(tmp, target)  # atomic, and fails if the name is taken
        except FileExistsError:
            return False
        except OSError:
            # No hard links on this file system: the exists-check before is the best we have.
            if target.exists():
                return False
            os.replace(tmp, target)
    finally:
        _unlink_quietly(tmp)
    _fsync_dir(target.parent)
    return True


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _fsync_dir(folder: Path) -> None:
    # Make the rename itself durable; not possible (nor needed) on every platform.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---- Markdown edits ---------------------------------------------------------------------------


def _newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _append_block(current: str, entry: str) -> str:
    """`current` with `entry` after it: a blank line between, except list item after list item."""
    nl = _newline(current)
    entry = entry.replace("\r\n", "\n").replace("\n", nl)
    body = current.rstrip("\r\n")
    last = body.rsplit("\n", 1)[-1]
    together = _LIST_ITEM.match(last) and _LIST_ITEM.match(entry)
    return body + (nl if together else nl + nl) + entry + nl


def _fact_file_heading(target: str) -> str:
    return "# USER.md — the owner\n" if target == "USER.md" else "# MEMORY.md — long-term memory\n"


def _is_fact_line(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("<!--") and not _HEADING.match(line)


def _supersede(content: str, old: str, target: str) -> str:
    """Mark the one active fact line containing `old` as superseded."""
    needle = old.strip().casefold()
    if not needle:
        raise WorkspaceError("`supersedes` is empty: give part of the old fact's text.")
    lines = content.split("\n")
    matches = [
        i
        for i, line in enumerate(lines)
        if _is_fact_line(line)
        and needle in _COMMENT.sub("", line).casefold()
        and not _is_superseded(lines, i)
    ]
    if not matches:
        raise WorkspaceError(
            f"No active fact in {target} contains {old!r}; nothing was written. Give part of "
            "the old fact exactly as it is in the file."
        )
    if len(matches) > 1:
        shown = "; ".join(lines[i].strip()[:80] for i in matches[:3])
        raise WorkspaceError(
            f"{len(matches)} facts in {target} contain {old!r} ({shown}); nothing was written. "
            "Give more of the old fact's text so only one matches."
        )
    i = matches[0]
    if _MARKER.search(lines[i]):
        lines[i] = _set_status(lines[i])
    elif i > 0 and _MARKER.fullmatch(lines[i - 1].strip()):
        lines[i - 1] = _set_status(lines[i - 1])  # the marker sits on the line above
    else:
        cr = "\r" if lines[i].endswith("\r") else ""
        lines[i] = lines[i].rstrip("\r") + " <!-- status: superseded -->" + cr
    return "\n".join(lines)


def _is_superseded(lines: list[str], i: int) -> bool:
    def status(line: str) -> str | None:
        m = _ANY_MARKER.search(line)
        return m.group(0).lower() if m else None

    own = status(lines[i])
    if own is None and i > 0 and lines[i - 1].strip().startswith("<!--"):
        own = status(lines[i - 1])
    return own is not None and "superseded" in own


def _set_status(line: str) -> str:
    m = _MARKER.search(line)
    assert m is not None
    return line[: m.start(1)] + "superseded" + line[m.end(1) :]


def _insert_in_section(content: str, line: str, section: str | None) -> str:
    """`line` appended at the end of `## section` (added at the end if missing) or the file."""
    if section is None or not section.strip():
        return _append_block(content, line)
    nl = _newline(content)
    name = " ".join(section.strip().lstrip("#").split())
    lines = content.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    found = [
        (i, len(m.group(1)))
        for i, text in enumerate(lines)
        if (m := _HEADING.match(text)) and m.group(2).casefold() == name.casefold()
    ]
    if not found:
        return _append_block(content, f"## {name}") + nl + line + nl
    start, level = found[0]
    end = next(
        (
            j
            for j in range(start + 1, len(lines))
            if (m := _HEADING.match(lines[j])) and len(m.group(1)) <= level
        ),
        len(lines),
    )
    last = end - 1
    while last > start and not lines[last].strip():
        last -= 1
    added = ["", line] if last == start else [line]
    if last + 1 == end < len(lines):
        added.append("")  # keep a blank line before the next heading
    return nl.join([*lines[: last + 1], *added, *lines[last + 1 :]]) + nl


def _slugify(slug: str) -> str:
    words = re.sub(r"[^\w]+", "-", unicodedata.normalize("NFKC", slug).casefold()).strip("-_")
    return words[:48].strip("-_") or "session"
