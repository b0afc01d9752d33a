"""A search hit's snippet: the chunk's head, or its best-matching lines."""

from __future__ import annotations

from common.text import shorten
from memory.search.ranking import Candidate


def head_snippet(text: str, limit: int) -> str:
    return shorten(text, limit)


def focused_snippet(cand: Candidate, limit: int) -> str:
    """The chunk's best-matching lines, in file order, within `limit` characters.

    Lines are taken by how much query weight they cover; leftover room goes to their
    neighbours (context). Skipped stretches show as "…" so the snippet never misleads.
    """
    lines = cand.text.split("\n")
    scores = cand.line_scores
    if not scores or max(scores) <= 0:
        return head_snippet(cand.text, limit)
    order = sorted(range(len(lines)), key=lambda i: (-scores[i], i))
    if len(lines[order[0]]) > limit:
        return head_snippet(lines[order[0]], limit)
    picked: set[int] = set()
    size = 0

    def cost(i: int) -> int:
        return len(lines[i]) + 3  # newline plus a possible "…" line

    for i in order:
        if scores[i] <= 0:
            break
        if lines[i].strip() and size + cost(i) <= limit:
            picked.add(i)
            size += cost(i)
    # Fill what is left with the nearest neighbours of the picked lines.
    for distance in (1, 2, 3):
        for i in sorted(picked):
            for j in (i - distance, i + distance):
                if 0 <= j < len(lines) and j not in picked and size + cost(j) <= limit:
                    picked.add(j)
                    size += cost(j)
    out: list[str] = []
    prev = None
    for i in sorted(picked):
        if prev is not None and i != prev + 1:
            out.append("…")
        if lines[i].strip() or out:
            out.append(lines[i])
        prev = i
    return "\n".join(out).strip("\n")
