"""Split Markdown into overlapping chunks that keep their 1-based line ranges."""

from __future__ import annotations

import re
from dataclasses import dataclass

from common.text import strip_comments
from memory.project_tags import line_projects
from memory.store.content_hash import hash_text
from memory.text import estimate_tokens

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
__all__ = ["Chunk", "Unit", "chunk_markdown", "hash_text", "is_heading", "split_units"]

_IMPORTANCE = re.compile(r"<!--\s*importance:\s*([0-9])\s*-->", re.IGNORECASE)


@dataclass(frozen=True)
class Chunk:
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    text: str
    hash: str
    importance: int | None  # highest <!-- importance: N --> marker inside, if any
    project: str | None = None  # the project its lines are tagged with (memory/project_tags.py)


def is_heading(line: str) -> bool:
    return bool(_HEADING.match(line))


def _split_long_line(line: str, max_tokens: int) -> list[str]:
    """Cut one over-long line into pieces of at most ~max_tokens, at spaces where possible.

    Linear in the line's length: a piece within budget is at most `window` characters long
    (4 characters per token at best), so each cut looks only at that window, never the rest.
    """
    window = 4 * max_tokens + 3
    pieces: list[str] = []
    start = 0
    while True:
        left = len(line) - start
        if left <= window and estimate_tokens(line[start:]) <= max_tokens:
            break
        # Binary-search the longest prefix within budget (CJK makes chars/token vary).
        lo, hi = 1, min(left, window)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if estimate_tokens(line[start : start + mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        space = line.rfind(" ", start + lo // 2, start + lo)
        cut = space - start if space - start > 0 else lo
        pieces.append(line[start : start + cut])
        start += cut
    pieces.append(line[start:])
    return pieces


def _make_chunk(entries: list[tuple[int, str]], projects: list[str | None]) -> Chunk:
    text = "\n".join(line for _, line in entries)
    marks = [int(m) for m in _IMPORTANCE.findall(text)]
    tagged = {projects[n - 1] for n, line in entries if not _neutral(line)}
    return Chunk(
        start_line=entries[0][0],
        end_line=entries[-1][0],
        text=text,
        hash=hash_text(text),
        importance=max(marks) if marks else None,
        project=tagged.pop() if len(tagged) == 1 else None,
    )


def _neutral(line: str) -> bool:
    """Headings and blank lines join a chunk of any project (they are its context)."""
    return not line.strip() or is_heading(line)


def _only_headings(entries: list[tuple[int, str]]) -> bool:
    return all(is_heading(line) or not line.strip() for _, line in entries)


def chunk_markdown(content: str, *, tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    """Chunks of about `tokens` tokens, consecutive chunks sharing about `overlap` tokens.

    Breaks early at a Markdown heading once a chunk is half full, never ends a chunk on a bare
    heading, and merges heading-only chunks into the content that follows. A leading byte-order
    mark is dropped. Linear in the text's length, however long its lines.
    """
    overlap = min(overlap, tokens // 2)
    content = content.removeprefix("\ufeff")  # a byte-order mark is not text
    groups: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str, int]] = []  # (line_no, text, tokens)
    current_tokens = 0

    def flush() -> None:
        nonlocal current, current_tokens
        if not current:
            return
        # A trailing heading belongs with what follows it.
        keep: list[tuple[int, str, int]] = []
        while current and (is_heading(current[-1][1]) or not current[-1][1].strip()):
            keep.insert(0, current.pop())
        if current and any(line.strip() for _, line, _ in current):
            groups.append([(n, line) for n, line, _ in current])
            carried: list[tuple[int, str, int]] = []
            carried_tokens = 0
            for entry in reversed(current):
                if carried_tokens + entry[2] > overlap or not keep_overlap:
                    break
                carried.insert(0, entry)
                carried_tokens += entry[2]
            current = carried + keep
        else:
            current = current + keep
        current_tokens = sum(t for _, _, t in current)

    keep_overlap = True
    all_lines = content.split("\n")
    if all_lines and all_lines[-1] == "":
        all_lines.pop()  # the newline that ends the file is not a line of its own
    projects = line_projects([raw.rstrip("\r") for raw in all_lines])
    tagged = any(p is not None for p in projects)
    for line_no, raw in enumerate(all_lines, start=1):
        line = raw.rstrip("\r")
        for piece in _split_long_line(line, tokens) if line else [line]:
            size = estimate_tokens(piece) + 1  # +1 for the newline
            heading_break = is_heading(piece) and current_tokens >= tokens // 2
            # A tag stays with its lines: lines of another project start a new chunk (without
            # overlap), so a chunk holds one project's lines (or untagged ones) only.
            if tagged and current and not _neutral(piece):
                before = next((n for n, x, _ in current if not _neutral(x)), None)
                other = before is not None and projects[before - 1] != projects[line_no - 1]
                heading_break = heading_break or other
            if current and (current_tokens + size > tokens or heading_break):
                keep_overlap = not heading_break  # a new section needs no overlap
                flush()
                keep_overlap = True
                # Overlap must leave room for the new line.
                while current and current_tokens + size > tokens:
                    current_tokens -= current.pop(0)[2]
            current.append((line_no, piece, size))
            current_tokens += size
    if current and any(line.strip() for _, line, _ in current):
        if _only_headings([(n, line) for n, line, _ in current]) and groups:
            groups[-1] = groups[-1] + [(n, line) for n, line, _ in current]
        else:
            groups.append([(n, line) for n, line, _ in current])

    # Merge heading-only groups forward (or backward when last).
    merged: list[list[tuple[int, str]]] = []
    pending: list[tuple[int, str]] = []
    for group in groups:
        if _only_headings(group):
            pending.extend(e for e in group if e not in pending)
            continue
        if pending:
            group = [e for e in pending if e[0] < group[0][0]] + group
            pending = []
        merged.append(group)
    if pending:
        if merged:
            merged[-1] = merged[-1] + [e for e in pending if e[0] > merged[-1][-1][0]]
        else:
            merged.append(pending)
    return [_make_chunk(g, projects) for g in map(_trim_blank_edges, merged) if g]


def _trim_blank_edges(group: list[tuple[int, str]]) -> list[tuple[int, str]]:
    lo, hi = 0, len(group)
    while lo < hi and not group[lo][1].strip():
        lo += 1
    while hi > lo and not group[hi - 1][1].strip():
        hi -= 1
    return group[lo:hi]


@dataclass(frozen=True)
class Unit:
    """A passage inside a chunk that gets its own vector: a paragraph, list item or line.

    Embedding passages instead of whole chunks lets a short fact inside a long chunk match a
    query on its own, and costs no more: the model runs over each line of text once (passages
    shared by overlapping chunks hit the embedding cache).
    """

    start_line: int
    end_line: int
    text: str  # what the model embeds (passage_text)
    hash: str
    # The hash of the text earlier versions embedded for these lines, when it differs: its
    # cached vector serves this passage too (an upgrade re-embeds nothing).
    legacy: str = ""


UNIT_MAX_CHARS = 600
UNIT_MIN_CHARS = 80
_LIST_ITEM = re.compile(r"^\s{0,3}(?:[-*+]|\d{1,3}[.)])\s")


def split_units(chunk: Chunk) -> list[Unit]:
    """The chunk's passages: a heading goes with the paragraph after it; paragraphs longer than
    UNIT_MAX_CHARS are cut at lines, short neighbouring lines grouped up to UNIT_MIN_CHARS. A
    passage's text leaves out comments (`strip_comments`); one that was only comments has none."""
    lines = chunk.text.split("\n")
    paragraphs: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] = []
    for offset, line in enumerate(lines):
        n = chunk.start_line + offset
        if not line.strip():
            if current:
                paragraphs.append(current)
                current = []
            continue
        starts_block = is_heading(line) or bool(_LIST_ITEM.match(line))
        if starts_block and current and not all(is_heading(x) for _, x in current):
            paragraphs.append(current)
            current = []
        current.append((n, line))
    if current:
        paragraphs.append(current)
    # A heading on its own belongs to the paragraph after it.
    merged: list[list[tuple[int, str]]] = []
    carry: list[tuple[int, str]] = []
    for para in paragraphs:
        if all(is_heading(x) for _, x in para):
            carry += para
            continue
        merged.append(carry + para)
        carry = []
    if carry:
        merged.append(carry)
    paragraphs = merged

    groups: list[list[tuple[int, str]]] = []
    for para in paragraphs:
        if sum(len(x) + 1 for _, x in para) <= UNIT_MAX_CHARS:
            groups.append(para)
            continue
        group: list[tuple[int, str]] = []
        for entry in para:
            size = sum(len(x) + 1 for _, x in group)
            if group and (size >= UNIT_MIN_CHARS or size + len(entry[1]) > UNIT_MAX_CHARS):
                groups.append(group)
                group = []
            group.append(entry)
        if group:
            groups.append(group)
    units = []
    for g in groups:
        # What the model embeds: the passage without its comments (markers, template guidance).
        plain = strip_comments("\n".join(x for _, x in g)).strip()
        text = passage_text(plain)
        if text:
            key = hash_text(text)
            legacy = hash_text(plain) if plain != text else ""
            units.append(Unit(g[0][0], g[-1][0], text, key, legacy))
    return units


# What the model may be spared of a passage (the keyword index and snippets keep the lines):
# "markers" (list markers, heading hashes), "emphasis", "stamps" (turn numbers and times),
# "speaker" (User/Assistant/Owner labels). Each cost recall on a data set (bench/RESULTS.md,
# h-passage: stamps on LoCoMo and the reworded set, heading hashes on MADial English), so none is
# on; kept to measure again, with the upgrade path (Unit.legacy) ready.
STYLE: frozenset[str] = frozenset()
_MARKER = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+")
_HASHES = re.compile(r"^\s{0,3}#{1,6}\s+")
_STAMP = re.compile(  # "[12] ", "[D1:3] ", "09:30 ", "03 " before a speaker's "Name:"
    r"^(?:\[(?=[^\]]*\d)[\w:.-]{1,12}\]|\d{1,2}:\d{2}(?::\d{2})?"
    r"|\d{1,2}(?=\s+[A-Z][\w ]{0,20}:))\s+"
)
_DATE_TIME = re.compile(r"\b(?:\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}(?::\d{2})?)\b")
_SPEAKER = re.compile(r"^(?:User|Assistant|Owner)(?: \(cont\.\))?:\s+")
_STRONG = re.compile(r"(\*\*|__|`+)(?=\S)(.+?)(?<=\S)\1")
_EM = re.compile(r"(?<![\w*])([*_])(?=\S)([^*_\n]+?)(?<=\S)\1(?![\w*])")


def passage_text(text: str) -> str:
    """What the model embeds of a passage's lines: without list markers, heading marks,
    emphasis, turn stamps or the speaker label, as STYLE says (measured in bench/RESULTS.md)."""
    if not STYLE:
        return text.strip()
    out = []
    for line in text.split("\n"):
        heading = is_heading(line)
        if "markers" in STYLE:
            line = _HASHES.sub("", line) if heading else _MARKER.sub("", line)
        if "emphasis" in STYLE:
            line = _EM.sub(r"\2", _STRONG.sub(r"\2", line))
        if "stamps" in STYLE:
            line = _STAMP.sub("", line.lstrip())
            if heading:
                line = _DATE_TIME.sub("", line)
                if not any(ch.isalpha() for ch in line):
                    continue
                line = " ".join(line.split()).strip(" —-")
        if "speaker" in STYLE:
            line = _SPEAKER.sub("", line.lstrip())
        out.append(line.strip())
    return "\n".join(x for x in out if x).strip()
