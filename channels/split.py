"""Cutting a long reply into messages: the one cut-point rule every adapter uses.

    split_text(text, 4000)                       # paragraphs, then lines, then words
    split_text(markdown, 3900, fences=True)      # a code block cut in two is closed and reopened

A piece ends at the last paragraph break in its second half, else the last line break there,
else the last space, else exactly at the limit. Telegram measures its pieces in rendered HTML
(channels/telegram/format.py) but cuts a too-long line with the same rule (`break_before`).
"""

from __future__ import annotations

from collections.abc import Callable

FENCE = "```"
BREAKS = ("\n\n", "\n", " ")


def break_before(
    text: str, budget: int, *, breaks: tuple[str, ...] = BREAKS, earliest: int | None = None
) -> int | None:
    """Where to cut `text` so the head holds at most `budget` characters: just after the last
    of the first kind in `breaks` found whole within `text[:budget]` at or after `earliest`
    (default: half the budget), else of the next kind; None when there is none."""
    window = text[:budget]
    floor = budget // 2 if earliest is None else earliest
    for sep in breaks:
        at = window.rfind(sep)
        if at >= floor:
            return at + len(sep)
    return None


def split_text(
    text: str,
    limit: int,
    *,
    fences: bool = False,
    adjust: Callable[[str, int], int] | None = None,
) -> list[str]:
    """`text` in pieces of at most `limit` characters (blank pieces left out; [] for blank
    text), cut by `break_before`. Line breaks at a cut are dropped, other whitespace kept.

    `fences`: a cut inside a ``` code block closes it at the end of the piece and reopens it
    at the start of the next, so both halves render as code. `adjust(text, cut)` may move a
    cut back (out of a platform's markup, say)."""
    if limit < 40:
        raise ValueError("limit too small to split messages sensibly")
    reserve = len(FENCE) + 1 if fences else 0  # room for a closing fence
    chunks: list[str] = []
    rest = text
    reopen = False
    while rest:
        if reopen:
            rest = f"{FENCE}\n{rest}"
        if len(rest) <= limit:
            chunks.append(rest)
            break
        budget = limit - reserve
        cut = break_before(rest, budget) or budget
        if adjust is not None:
            cut = adjust(rest, cut)
        if cut <= reserve:  # only a reopened fence fits before the cut: cut hard
            cut = budget
        head, rest = rest[:cut].rstrip("\n"), rest[cut:].lstrip("\n")
        reopen = fences and _inside_fence(head)
        if reopen:
            head = f"{head}\n{FENCE}"
        chunks.append(head)
    return [c for c in chunks if c.strip()]


def _inside_fence(text: str) -> bool:
    return sum(1 for line in text.split("\n") if line.strip().startswith(FENCE)) % 2 == 1
