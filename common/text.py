"""Plain-text helpers every package needs: shortening for display, and the text inside Pinch's
Markdown without its HTML comments (markers and template guidance)."""

from __future__ import annotations

import re

_COMMENT = re.compile(r"<!--(.*?)-->", re.DOTALL)
_TRIGGER_TERMS = re.compile(r"\s*trigger:\s*(.*?)\s*", re.IGNORECASE | re.DOTALL)


def shorten(text: str, limit: int, *, at_space: bool = False) -> str:
    """`text`, or its first `limit` - 1 characters and "…" when it is longer.

    `at_space`: cut at the last space in the second half of that span instead, when there is
    one, so no word is cut in two. Whitespace before the "…" is dropped either way."""
    if len(text) <= limit:
        return text
    cut = limit - 1
    if at_space:
        space = text.rfind(" ", limit // 2, limit - 1)
        cut = space if space > 0 else cut
    return text[:cut].rstrip() + "…"


def strip_comments(text: str) -> str:
    """`text` as search reads it, without its HTML comments: Pinch's markers (origin and session,
    source, importance, observed) and the templates' guidance are about the text, not in it, and
    their words and ids would match queries and blur the passage's embedding. A trigger marker
    keeps its terms: they are the owner's own words for when the entry matters."""
    if "<!--" not in text:
        return text

    def keep(m: re.Match[str]) -> str:  # spaced, so the words on either side stay two words
        trigger = _TRIGGER_TERMS.fullmatch(m.group(1))
        return f" {trigger.group(1)} " if trigger else " "

    return _COMMENT.sub(keep, text)


def unclosed_comment_line(text: str) -> int | None:
    """The 1-based line of an `<!--` that no `-->` closes, else None. Search indexes the text
    after it (`strip_comments` needs both ends), but a snippet, which may be cut from the middle
    of a comment, hides it, and so does every Markdown viewer."""
    last_close = text.rfind("-->")
    opened = text.find("<!--", last_close + 3 if last_close >= 0 else 0)
    return None if opened < 0 else text.count("\n", 0, opened) + 1
