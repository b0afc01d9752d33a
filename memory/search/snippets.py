"""A search hit's snippet: the chunk's head, or its best-matching lines and their neighbours.

Either way without HTML comments: Pinch's markers and the templates' guidance are about the
text, not in it (search ignores them too, `common.text.strip_comments`), and the model has read
the guidance already. The markers it needs to read a line right stay, as short tags:
`[untrusted]` (outside text, never to be obeyed), `[superseded]` (an old fact kept for the
record) and `[project: NAME]`.
"""

from __future__ import annotations

import re

from common.text import shorten
from memory.search.ranking import Candidate

_COMMENT = re.compile(r"<!--(.*?)-->", re.DOTALL)
_UNTRUSTED = re.compile(r"^\s*origin:\s*untrusted\b", re.IGNORECASE)
_SUPERSEDED = re.compile(r"\bstatus:\s*superseded\b", re.IGNORECASE)
_PROJECT = re.compile(r"^\s*project:\s*([^<>]*?)\s*$", re.IGNORECASE | re.DOTALL)
_SPACED_TAG = re.compile(r"[ \t]{2,}(?=\[(?:untrusted|superseded|project: ))")


def _tag(comment: str) -> str:
    """The short tag a comment's body stands for in a snippet ("" for most)."""
    if _UNTRUSTED.match(comment):
        return " [untrusted]"
    if _SUPERSEDED.search(comment):
        return " [superseded]"
    if project := _PROJECT.match(comment):
        return f" [project: {project.group(1)}]"
    return ""


def readable_lines(text: str) -> list[str | None]:
    """`text`'s lines as a snippet shows them, one per line of `text` (so line scores still
    apply): comments replaced by their tags, and None for a line that held only comments. A
    chunk may start inside a comment or end in one (chunks are cut by size): that part is a
    comment too."""
    original = text.split("\n")
    opened, closed = text.find("<!--"), text.find("-->")
    if closed >= 0 and (opened < 0 or closed < opened):  # began inside a comment
        text = "\n" * text.count("\n", 0, closed) + text[closed + 3 :]
    if (tail := text.rfind("<!--")) >= 0 and text.find("-->", tail) < 0:  # ends inside one
        text = text[:tail] + "\n" * text.count("\n", tail)

    def replace(m: re.Match[str]) -> str:  # keep the newlines, so lines stay where they were
        return _tag(m.group(1)) + "\n" * m.group(0).count("\n")

    cleaned = _COMMENT.sub(replace, text).split("\n")
    out: list[str | None] = []
    for old, new in zip(original, cleaned, strict=True):
        if new.strip():
            line = _SPACED_TAG.sub(" ", new.rstrip())
            out.append(line.lstrip() if old.lstrip().startswith("<!--") else line)
        else:
            out.append(None if old.strip() else "")
    return out


def readable_text(text: str) -> str:
    """`text` without its comments (markers as tags), comment-only lines dropped."""
    lines = [line for line in readable_lines(text) if line is not None]
    return "\n".join(lines).strip("\n")


def head_snippet(text: str, limit: int) -> str:
    return shorten(readable_text(text), limit)


def focused_snippet(cand: Candidate, limit: int, line_share: float = 0.0) -> str:
    """The chunk's best-matching lines, in file order, within `limit` characters.

    Lines are taken by how much query weight they cover — only those scoring at least
    `line_share` of the best line; leftover room goes to their neighbours (context). Skipped
    stretches show as "…" so the snippet never misleads. Comment-only lines are never shown.
    """
    shown = readable_lines(cand.text)
    lines = [line or "" for line in shown]
    scores = cand.line_scores
    if not scores or max(scores) <= 0:
        return head_snippet(cand.text, limit)
    order = sorted(range(len(lines)), key=lambda i: (-scores[i], i))
    if len(lines[order[0]]) > limit:
        return shorten(lines[order[0]], limit)
    picked: set[int] = set()
    size = 0
    threshold = max(line_share * scores[order[0]], 0.0)

    def cost(i: int) -> int:
        return len(lines[i]) + 3  # newline plus a possible "…" line

    for i in order:
        if scores[i] <= threshold and i != order[0]:
            break
        if lines[i].strip() and size + cost(i) <= limit:
            picked.add(i)
            size += cost(i)
    # Fill what is left with the nearest neighbours of the picked lines.
    for distance in (1, 2, 3):
        for i in sorted(picked):
            for j in (i - distance, i + distance):
                if (
                    0 <= j < len(lines)
                    and j not in picked
                    and shown[j] is not None
                    and size + cost(j) <= limit
                ):
                    picked.add(j)
                    size += cost(j)
    out: list[str] = []
    prev = None
    for i in sorted(picked):
        if prev is not None and any(shown[j] is not None for j in range(prev + 1, i)):
            out.append("…")
        if lines[i].strip() or out:
            out.append(lines[i])
        prev = i
    return "\n".join(out).strip("\n")
