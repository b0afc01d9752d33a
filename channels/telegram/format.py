"""Markdown → Telegram HTML, the plain-text twin of the same source, and splitting at 4,096.

    for chunk in split_for_telegram(reply_markdown):
        send(chunk.html, parse_mode="HTML")   # and, if Telegram refuses the HTML: send(chunk.plain)

Telegram's HTML knows only a few tags (b, i, s, u, code, pre, a, blockquote), so headings
become bold lines, lists become "•"/"1." text lines and tables a preformatted block. The
source's own `<`, `>` and `&` are always escaped: raw HTML in a model's reply is shown, never
interpreted. `plain` is rendered from the *source* Markdown, not by stripping tags from the
HTML, so a plain-text retry never shows a tag. Splitting keeps each chunk's rendered HTML within
the limit (measured in UTF-16 code units, as Telegram counts), breaks between paragraphs and
blocks first, and never inside a code fence: a code block longer than a message is cut between
lines and each part is fenced again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.token import Token

from channels.split import break_before

TELEGRAM_MAX_CHARS = 4096
_SAFE_SCHEMES = ("http://", "https://", "tg://", "mailto:")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class TelegramPiece:
    """One message's worth of a reply: its Markdown source, HTML rendering and plain twin."""

    source: str
    html: str
    plain: str


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    # html=False: raw HTML in the source is text (escaped), never passed through.
    return MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])


def utf16_len(text: str) -> int:
    """Length as Telegram counts it (UTF-16 code units: an emoji outside the BMP counts 2)."""
    return len(text.encode("utf-16-le")) // 2


def escape_html(text: str, *, quote: bool = False) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace('"', "&quot;") if quote else text


def markdown_to_html(markdown: str) -> str:
    """The Telegram-HTML rendering of `markdown` (no length limit; see `split_for_telegram`)."""
    return _Renderer(markdown, html=True).render()


def markdown_to_plain(markdown: str) -> str:
    """The same text without any markup: for the plain-text retry. Links read "text (url)"."""
    return _Renderer(markdown, html=False).render()


def split_for_telegram(markdown: str, limit: int = TELEGRAM_MAX_CHARS) -> list[TelegramPiece]:
    """Cut a Markdown reply into chunks whose rendered HTML fits `limit`; [] for blank text."""
    if not markdown.strip():
        return []
    return list(_split_cached(markdown, limit))


@lru_cache(maxsize=256)
def _split_cached(markdown: str, limit: int) -> tuple[TelegramPiece, ...]:
    """The same text is cut three times a reply (the stream's split, the send, the final
    check), and markdown-it parses it four times a cut: ≈ 1/4 of a reply's CPU in the gateway
    (bench/scale.py's profile). The pieces are immutable."""
    return tuple(_split(markdown, limit))


def _split(markdown: str, limit: int) -> list[TelegramPiece]:
    units: list[_Unit] = []
    for block in _top_level_blocks(markdown):
        unit = _Unit(block, "\n\n")
        if unit.size <= limit:
            units.append(unit)
        else:
            units.extend(_split_block(block, limit))
    chunks: list[TelegramPiece] = []
    for group in _pack(units, limit):
        chunks.extend(_verified(group, limit))
    return chunks


class _Unit:
    """A piece of source that must stay whole, with the separator that precedes it."""

    def __init__(self, source: str, sep: str) -> None:
        self.source = source
        self.sep = sep
        self.size = utf16_len(markdown_to_html(source))


def _join(units: list[_Unit]) -> str:
    return "".join((u.sep if i else "") + u.source for i, u in enumerate(units))


def _pack(units: list[_Unit], limit: int) -> list[list[_Unit]]:
    """Greedy packing on the per-unit rendered sizes (the whole chunk is re-checked later)."""
    groups: list[list[_Unit]] = []
    current: list[_Unit] = []
    size = 0
    for unit in units:
        extra = unit.size + (len(unit.sep) if current else 0)
        if current and size + extra > limit:
            groups.append(current)
            current, size, extra = [], 0, unit.size
        current.append(unit)
        size += extra
    if current:
        groups.append(current)
    return groups


def _verified(group: list[_Unit], limit: int) -> list[TelegramPiece]:
    """Render the joined group; if context made it longer than the estimate, split it in half."""
    source = _join(group)
    html = markdown_to_html(source)
    if utf16_len(html) <= limit or len(group) == 1:
        if utf16_len(html) > limit:  # one unit rendered alone fitted, so this cannot happen
            html = escape_html(source)[:limit]
        return [TelegramPiece(source, html, markdown_to_plain(source))] if html.strip() else []
    half = len(group) // 2
    return _verified(group[:half], limit) + _verified(group[half:], limit)


def _top_level_blocks(markdown: str) -> list[str]:
    """The source of each top-level block (paragraph, list, fence, table, quote, heading)."""
    lines = markdown.split("\n")
    blocks: list[str] = []
    for token in _parser().parse(markdown):
        if token.level == 0 and token.nesting >= 0 and token.map:
            start, end = token.map
            blocks.append("\n".join(lines[start:end]).strip("\n"))
    return [b for b in blocks if b.strip()]


def _split_block(block: str, limit: int) -> list[_Unit]:
    """Cut one block longer than a message: a code fence between lines (each part re-fenced),
    anything else between lines, then sentences, then words."""
    first = block.split("\n", 1)[0]
    match = _FENCE.match(first)
    if match:
        return _split_fence(block, match.group(1), limit)
    units: list[_Unit] = []
    for line in block.split("\n"):
        unit = _Unit(line, "\n")
        if unit.size <= limit:
            units.append(unit)
            continue
        for n, (sep, piece) in enumerate(_split_words(line, limit)):
            units.append(_Unit(piece, sep if n else "\n"))
    return units


def _split_words(line: str, limit: int) -> list[tuple[str, str]]:
    """A line longer than a message, as (separator, piece) pairs: cut at the last space, else
    anywhere. Each piece's escaped text is at most half the limit, which leaves room for the
    markup of its spans."""
    budget = max(limit // 2, 1)
    pieces: list[tuple[str, str]] = []
    sep, rest = "", line
    while utf16_len(escape_html(rest)) > budget:
        window = _prefix_within(rest, budget)
        cut = break_before(window, len(window), breaks=(" ",), earliest=1)
        if cut is not None:
            pieces.append((sep, rest[:cut].rstrip()))
            sep, rest = " ", rest[cut:].lstrip()
        else:
            pieces.append((sep, window))
            sep, rest = "", rest[len(window) :]
    if rest:
        pieces.append((sep, rest))
    return pieces


def _prefix_within(text: str, budget: int) -> str:
    """The longest prefix of `text` whose escaped UTF-16 length is within `budget`."""
    used = 0
    for i, char in enumerate(text):
        used += utf16_len(escape_html(char))
        if used > budget:
            return text[:i]
    return text


def _split_fence(block: str, marker: str, limit: int) -> list[_Unit]:
    lines = block.split("\n")
    opening, body = lines[0], lines[1:]
    if body and body[-1].strip().startswith(marker[0] * len(marker)):
        body = body[:-1]
    closing = marker
    wrapper = utf16_len(markdown_to_html(f"{opening}\nx\n{closing}")) - 1
    budget = max(limit - wrapper, 1)
    parts: list[list[str]] = [[]]
    used = 0
    for line in body:
        for piece in _hard_wrap(line, budget):
            size = utf16_len(escape_html(piece)) + 1
            if parts[-1] and used + size > budget:
                parts.append([])
                used = 0
            parts[-1].append(piece)
            used += size
    return [_Unit(f"{opening}\n" + "\n".join(part) + f"\n{closing}", "\n\n") for part in parts]


def _hard_wrap(line: str, budget: int) -> list[str]:
    pieces: list[str] = []
    while utf16_len(escape_html(line)) + 1 > budget:
        head = _prefix_within(line, budget - 1) or line[:1]
        pieces.append(head)
        line = line[len(head) :]
    pieces.append(line)
    return pieces


class _Renderer:
    """Walks markdown-it's token stream once, writing Telegram HTML or plain text."""

    def __init__(self, source: str, *, html: bool) -> None:
        self.source_lines = source.split("\n")
        self.tokens = _parser().parse(source)
        self.html = html
        self.out: list[str] = []
        self.pending = 0  # newlines owed before the next content
        self.fresh = False  # right after a list bullet or an opening tag: no separator
        self.lists: list[list[int]] = []  # per open list: [ordered?, next number]

    def render(self) -> str:
        i = 0
        tokens = self.tokens
        while i < len(tokens):
            i = self._block(tokens, i)
        return "".join(self.out).strip("\n")

    # -- output helpers
    def _want(self, newlines: int) -> None:
        if not self.fresh:
            self.pending = max(self.pending, newlines)

    def _emit(self, text: str, *, opener: bool = False) -> None:
        if not text:
            return
        if self.out and self.pending:
            self.out.append("\n" * self.pending)
        self.pending = 0
        self.out.append(text)
        self.fresh = opener

    def _tag(self, tag: str) -> str:
        return tag if self.html else ""

    def _text(self, text: str) -> str:
        return escape_html(text) if self.html else text

    def _gap(self) -> int:
        return 1 if self.lists else 2

    # -- blocks
    def _block(self, tokens: list[Token], i: int) -> int:
        token = tokens[i]
        kind = token.type
        if kind == "paragraph_open":
            self._want(1 if token.hidden else self._gap())
        elif kind == "heading_open":
            self._want(self._gap())
            self._emit(self._tag("<b>"), opener=True)
        elif kind == "heading_close":
            self._emit(self._tag("</b>"))
        elif kind == "inline":
            self._emit(self._inline(token.children or []))
        elif kind in ("bullet_list_open", "ordered_list_open"):
            self._want(self._gap())
            start = int(token.attrGet("start") or 1)
            self.lists.append([kind == "ordered_list_open", start])
        elif kind in ("bullet_list_close", "ordered_list_close"):
            self.lists.pop()
            self._want(self._gap())
        elif kind == "list_item_open":
            ordered, number = self.lists[-1]
            self.lists[-1][1] = number + 1
            self._want(1)
            indent = "   " * (len(self.lists) - 1)
            self._emit(f"{indent}{number}. " if ordered else f"{indent}• ", opener=True)
        elif kind in ("fence", "code_block"):
            self._want(self._gap())
            self._emit(self._code(token))
        elif kind == "hr":
            self._want(self._gap())
            self._emit("──────────")
        elif kind == "blockquote_open":
            self._want(self._gap())
            self._emit(self._tag("<blockquote>"), opener=self.html)
        elif kind == "blockquote_close":
            self._emit(self._tag("</blockquote>"))
        elif kind == "table_open":
            return self._table(tokens, i)
        elif kind == "html_block":  # unreachable with html=False; kept as escaped text
            self._want(self._gap())
            self._emit(self._text(token.content.rstrip("\n")))
        return i + 1

    def _code(self, token: Token) -> str:
        code = token.content.rstrip("\n")
        if not self.html:
            return code
        language = token.info.strip().split(" ")[0] if token.type == "fence" else ""
        if language:
            attr = escape_html(language, quote=True)
            return f'<pre><code class="language-{attr}">{escape_html(code)}</code></pre>'
        return f"<pre>{escape_html(code)}</pre>"

    def _table(self, tokens: list[Token], i: int) -> int:
        """A table as its source lines in a preformatted block (Telegram has no tables)."""
        start, end = tokens[i].map or (0, 0)
        text = "\n".join(line.strip() for line in self.source_lines[start:end])
        self._want(self._gap())
        self._emit(f"<pre>{escape_html(text)}</pre>" if self.html else text)
        while i < len(tokens) and tokens[i].type != "table_close":
            i += 1
        return i + 1

    # -- inline
    def _inline(self, children: list[Token]) -> str:
        parts: list[str] = []
        links: list[str | None] = []  # href of each open link (None: rendered as text)
        for child in children:
            kind = child.type
            if kind == "text":
                parts.append(self._text(child.content))
            elif kind in ("softbreak", "hardbreak"):
                parts.append("\n")
            elif kind == "code_inline":
                content = self._text(child.content)
                parts.append(f"<code>{content}</code>" if self.html else content)
            elif kind in ("strong_open", "strong_close"):
                parts.append(self._tag("<b>" if kind.endswith("open") else "</b>"))
            elif kind in ("em_open", "em_close"):
                parts.append(self._tag("<i>" if kind.endswith("open") else "</i>"))
            elif kind in ("s_open", "s_close"):
                parts.append(self._tag("<s>" if kind.endswith("open") else "</s>"))
            elif kind == "link_open":
                href = str(child.attrGet("href") or "")
                safe = href if href.lower().startswith(_SAFE_SCHEMES) else None
                links.append(href)
                if self.html and safe:
                    parts.append(f'<a href="{escape_html(safe, quote=True)}">')
                elif self.html:
                    links[-1] = None
            elif kind == "link_close":
                target = links.pop() if links else None
                if self.html and target:
                    parts.append("</a>")
                elif not self.html and target and child.markup != "autolink":
                    parts.append(f" ({target})")
            elif kind == "image":
                alt = "".join(c.content for c in child.children or []) or "image"
                src = str(child.attrGet("src") or "")
                parts.append(self._text(f"{alt} ({src})" if src else alt))
            elif kind == "html_inline":
                parts.append(self._text(child.content))
        return "".join(parts)
