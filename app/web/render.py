"""Untrusted text → safe HTML for the page: Markdown with raw HTML off, every character of the
source escaped (memory files, transcripts, fetched pages and strangers' messages are all
untrusted). Use `markdown_html` in templates as `{{ text | markdown }}`.

Rendering Markdown costs ~25 µs a character here, more for text made to be slow (a megabyte of
`[`); a text longer than MAX_MARKDOWN_CHARS is shown as escaped plain text instead, so no stored
text can keep a page (and the worker thread rendering it) busy for minutes.
"""

from __future__ import annotations

from functools import lru_cache

from markdown_it import MarkdownIt
from markupsafe import Markup, escape

MAX_MARKDOWN_CHARS = 100_000


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
