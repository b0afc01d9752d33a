"""Untrusted text → safe HTML for the page: Markdown with raw HTML off, every character of the
source escaped (memory files, transcripts, fetched pages and strangers' messages are all
untrusted). Use `markdown_html` in templates as `{{ text | markdown }}`.

Rendering Markdown costs ~25 µs a character here, more for text made to be slow (a megabyte of
`[`); a text longer than MAX_MARKDOWN_CHARS is shown as escaped plain text instead, so no stored
text can keep a page (and the worker thread rendering it) busy for minutes.

`close_bidi` is the templates' `finalize`: a stored text with an unclosed right-to-left override
(U+202E) would turn the page's own words after it around ("to telegram 111" read backwards), so
every shown value ends with the controls that close what it opened. A value the browser sends
back verbatim (the editor's text, a hidden field) is written `{{ value|e }}`: already Markup,
it is left exact.
"""

from __future__ import annotations

from functools import lru_cache

from markdown_it import MarkdownIt
from markupsafe import Markup, escape

MAX_MARKDOWN_CHARS = 100_000
# Embeddings and overrides (LRE, RLE, LRO, RLO) end at PDF; isolates (LRI, RLI, FSI) at PDI.
_EMBEDDINGS = ("\u202a", "\u202b", "\u202d", "\u202e")
_ISOLATES = ("\u2066", "\u2067", "\u2068")
PDF, PDI = "\u202c", "\u2069"


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False})
    md.enable(["strikethrough", "table"])
    # markdown-it's validateLink refuses javascript:, vbscript:, file: and data: links (data:
    # only for gif/png/jpeg/webp images); the page's CSP loads no image from elsewhere.
    return md


def markdown_html(text: str) -> Markup:
    """Render `text` as Markdown with raw HTML shown as text, never interpreted; a text longer
    than MAX_MARKDOWN_CHARS as plain preformatted text, escaped."""
    text = text or ""
    if len(text) > MAX_MARKDOWN_CHARS:
        note = (
            f'<p class="muted">{len(text):,} characters: too long to render as Markdown, shown '
            "as plain text.</p>"
        )
        return Markup(note) + Markup('<pre class="raw">') + escape(text) + Markup("</pre>")
    return Markup(_parser().render(text))


def closed_bidi(text: str) -> str:
    """`text` followed by a PDI for each isolate and a PDF for each embedding or override it
    opens (surplus closers are ignored by the browser), so none reaches past it. Use it on an
    untrusted part of a text the page composes ("NAME (ID)")."""
    isolates = sum(text.count(c) for c in _ISOLATES)
    embeddings = sum(text.count(c) for c in _EMBEDDINGS)
    if not isolates and not embeddings:
        return text
    return text + PDI * isolates + PDF * embeddings  # a PDI also ends what opened inside it


def close_bidi(value: object) -> object:
    """The templates' `finalize`: a text value `closed_bidi`; Markup (already escaped, or sent
    back verbatim) and other values as they are."""
    if not isinstance(value, str) or isinstance(value, Markup):
        return value
    return closed_bidi(value)
