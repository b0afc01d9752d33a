"""Project tags in the Markdown memory files: `<!-- project: NAME -->`.

A project name is lower-case letters, digits and '-' (1–40 characters; written in any case, read
case-insensitively: "Apollo" is "apollo"). A marker tags

- the *entry* it sits in — a list item with its indented continuation lines, or a paragraph —
  or the entry right below a line of markers only (as `<!-- trigger: … -->` and
  `<!-- importance: N -->` do, memory/lifecycle/triggers.py);
- on a heading, the whole *section* under it (down to the next heading of the same or a higher
  level); an entry's own marker wins over its section's.

`line_projects` gives each line of a file its project (None: untagged), which the chunker uses
to keep a tag with the lines it belongs to and the ranking to boost the active project's hits.
Text inside a multi-line comment is not an entry. Shared by memory/index (chunks),
memory/lifecycle (triggers, Dreaming) and memory/files (what the agent writes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

PROJECT_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?")
ALL_PROJECTS = "*"  # memory_search(project="*"): no project preferred
_MARKER = re.compile(r"<!--\s*project:\s*([^<>]*?)\s*-->", re.IGNORECASE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_HEADING = re.compile(r"^\s{0,3}(#{1,6})(?:\s|$)")
_LIST_ITEM = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s+")


def normalise_project(name: str) -> str | None:
    """`name` as a project name (lower-cased, trimmed), or None if it is not one."""
    clean = name.strip().lower()
    return clean if PROJECT_NAME.fullmatch(clean) else None


def project_name_error(name: str) -> str:
    """Why `name` is not a project name, worded as advice."""
    return (
        f"{name.strip()[:60]!r} is not a project name: use letters, digits and '-' "
        '(at most 40, e.g. "apollo" or "the-wedding").'
    )


def project_marker(name: str) -> str:
    return f"<!-- project: {name} -->"


def marker_project(text: str) -> str | None:
    """The project of the first valid `<!-- project: NAME -->` marker in `text`, if any."""
    for match in _MARKER.finditer(text):
        name = normalise_project(match.group(1))
        if name is not None:
            return name
    return None


def has_project_marker(text: str) -> bool:
    return marker_project(text) is not None


def _heading_level(line: str) -> int:
    match = _HEADING.match(line)
    return len(match.group(1)) if match else 0


def line_projects(lines: Sequence[str]) -> list[str | None]:
    """The project each line belongs to (None: untagged), by the rules above.

    Linear in the number of lines; a file without markers gets None everywhere."""
    out: list[str | None] = [None] * len(lines)
    if not any("project" in line.lower() for line in lines):
        return out  # the common case: nothing to find
    sections: list[tuple[int, str | None]] = []  # (heading level, project) from the top down
    entry: list[int] = []  # the current entry's line numbers (0-based), markers above included
    entry_is_item = False
    pending: list[int] = []  # marker-only lines waiting for the entry below them
    in_comment = False

    def section() -> str | None:
        return next((p for _, p in reversed(sections) if p is not None), None)

    def close() -> None:
        nonlocal entry_is_item
        if entry:
            own = next((p for i in entry if (p := marker_project(lines[i]))), None)
            project = own or section()
            for i in entry:
                out[i] = project
        entry.clear()
        entry_is_item = False

    def drop_pending() -> None:
        for i in pending:
            out[i] = section()
        pending.clear()

    for number, line in enumerate(lines):
        stripped = line.strip()
        if in_comment:  # a commented-out block: never an entry
            in_comment = "-->" not in line
            out[number] = section()
            continue
        opened = stripped.rfind("<!--")
        if opened != -1 and "-->" not in stripped[opened:]:
            close()
            drop_pending()
            in_comment = True
            out[number] = section()
            continue
        level = _heading_level(line)
        if level:
            close()
            drop_pending()
            while sections and sections[-1][0] >= level:
                sections.pop()
            sections.append((level, marker_project(line)))
            out[number] = section()
            continue
        if not stripped:
            close()
            drop_pending()
            out[number] = section()
            continue
        if not _COMMENT.sub("", stripped).strip():  # a line of markers only
            if entry and entry_is_item and line[:1].isspace():
                entry.append(number)  # an indented marker belongs to the item above
                continue
            close()
            pending.append(number)
            continue
        starts_item = _LIST_ITEM.match(line) is not None
        if entry and starts_item:
            close()
        if not entry:
            entry.extend(pending)
            pending.clear()
            entry_is_item = starts_item
        entry.append(number)
    close()
    drop_pending()
    return out


def tag_entries(text: str, name: str) -> str:
    """`text` with `<!-- project: name -->` at the end of each of its entries' first line (a
    heading's section is tagged on the heading); lines already tagged are left as they are."""
    lines = text.split("\n")
    marker = project_marker(name)
    tagged = list(lines)
    starts = entry_starts(lines)
    for i in starts:
        if not has_project_marker(lines[i]):
            tagged[i] = lines[i].rstrip() + " " + marker
    return "\n".join(tagged)


def entry_starts(lines: Sequence[str]) -> list[int]:
    """The first line of each entry (list item or paragraph) of `lines`, skipping headings
    (their entries are tagged themselves) and fenced code."""
    starts: list[int] = []
    previous_blank = True
    in_fence = False
    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("```"):
            in_fence = not in_fence
            previous_blank = False
            continue
        if in_fence or not stripped or _heading_level(line) or stripped.startswith("<!--"):
            previous_blank = not stripped or bool(_heading_level(line))
            continue
        if previous_blank or _LIST_ITEM.match(line):
            starts.append(number)
        previous_blank = False
    return starts


def count_project_entries(chunks: Iterable[tuple[str, int, str, str]]) -> dict[str, int]:
    """Entries per project among tagged chunks — (path, start line, text, project) each. Lines
    shared by overlapping chunks count once: each project's lines of a file are put back
    together and counted run by run (a run of consecutive lines)."""
    books: dict[tuple[str, str], dict[int, str]] = {}
    for path, start, text, project in chunks:
        book = books.setdefault((project, path), {})
        book.update((start + i, line) for i, line in enumerate(text.split("\n")))
    counts: dict[str, int] = {}
    for (project, _path), book in books.items():
        numbers = sorted(book)
        run: list[str] = []
        for n, number in enumerate(numbers):
            run.append(book[number])
            if n + 1 == len(numbers) or numbers[n + 1] != number + 1:
                counts[project] = counts.get(project, 0) + len(entry_starts(run))
                run = []
    return {name: c for name, c in sorted(counts.items()) if c}


def tag_section(text: str, name: str) -> str:
    """`text` (a whole note) tagged with `name`: on its first line when that is a heading (the
    section is the whole note), else entry by entry (`tag_entries`)."""
    first, newline, rest = text.partition("\n")
    if _heading_level(first):
        if has_project_marker(first):
            return text
        return f"{first.rstrip()} {project_marker(name)}{newline}{rest}"
    return tag_entries(text, name)
