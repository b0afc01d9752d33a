"""Untrusted text → safe HTML for the page: Markdown with raw HTML off, every character of the
source escaped (memory files, transcripts, fetched pages and strangers' messages are all
untrusted). Use `markdown_html` in templates as `{{ text | markdown }}`."""

from __future__ import annotations

from functools import lru_cache

from markdown_it import MarkdownIt
from markupsafe import Markup


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False})
    md.enable(["strikethrough", "table"])
    # Links keep only http(s)/mailto targets (markdown-it's validateLink already refuses
    # javascript:, vbscript:, file: and data: other than images).
    return md


def markdown_html(text: str) -> Markup:
    """Render `text` as Markdown with raw HTML shown as text, never interpreted."""
    return Markup(_parser().render(text or ""))
