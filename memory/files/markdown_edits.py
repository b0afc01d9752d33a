"""Pure Markdown edits of memory files: escaping agent text, appending blocks, facts and
their sections, superseding a fact, session-note slugs. No I/O; `WorkspaceWriter` applies them."""

from __future__ import annotations

import re
import unicodedata

from memory.errors import WorkspaceError

_MARKER = re.compile(r"<!--\s*observed:[^>]*?status:\s*(active|superseded)\s*-->", re.IGNORECASE)
_ANY_MARKER = re.compile(r"<!--\s*(?:observed:[^>]*?)?status:\s*\w+\s*-->", re.IGNORECASE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_TERMINAL_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.)?")
_ATX_HEADING = re.compile(r"^([ \t]{0,3})(#{1,6})(?=[ \t]|$)", re.MULTILINE)
_SETEXT_UNDERLINE = re.compile(r"^([ \t]{0,3})(=+|-{2,})[ \t]*$", re.MULTILINE)


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


def mark_paragraphs(text: str, marker: str) -> str:
    """`marker` at the end of each paragraph's last line (not headings or comment lines)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        last = i + 1 == len(lines) or not lines[i + 1].strip()
        plain = not _HEADING.match(line) and not line.lstrip().startswith("<!--")
        if line.strip() and last and plain:
            lines[i] = line.rstrip() + " " + marker
    return "\n".join(lines)


def _newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def append_block(current: str, entry: str) -> str:
    """`current` with `entry` after it: a blank line between, except list item after list item."""
    nl = _newline(current)
    entry = entry.replace("\r\n", "\n").replace("\n", nl)
    body = current.rstrip("\r\n")
    last = body.rsplit("\n", 1)[-1]
    together = _LIST_ITEM.match(last) and _LIST_ITEM.match(entry)
    return body + (nl if together else nl + nl) + entry + nl


def fact_file_heading(target: str) -> str:
    return "# USER.md — the owner\n" if target == "USER.md" else "# MEMORY.md — long-term memory\n"


def _is_fact_line(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("<!--") and not _HEADING.match(line)


def supersede_fact(content: str, old: str, target: str) -> str:
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


def insert_in_section(content: str, line: str, section: str | None) -> str:
    """`line` appended at the end of `## section` (added at the end if missing) or the file."""
    if section is None or not section.strip():
        return append_block(content, line)
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
        return append_block(content, f"## {name}") + nl + line + nl
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


def slugify(slug: str) -> str:
    words = re.sub(r"[^\w]+", "-", unicodedata.normalize("NFKC", slug).casefold()).strip("-_")
    return words[:48].strip("-_") or "session"
