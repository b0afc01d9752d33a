"""Slack text both ways: Markdown replies → Slack mrkdwn (split to fit one message), and Slack's
inbound markup (`<@U1>`, `<url|label>`, `&amp;`) → plain text for the agent.

    chunks = split_mrkdwn(markdown_to_mrkdwn("**Hi** [docs](https://x.y)"), 3900)
    text = slack_to_text("<@UBOT> see <https://x.y|docs> &amp; more", bot_user_id="UBOT")

mrkdwn is not Markdown: bold is `*b*`, italics `_i_`, strike `~s~`, links `<url|text>`, no
headings or tables, and `&`, `<`, `>` must be escaped everywhere (even in code) or Slack reads
them as its own markup — which also keeps a model from pinging `<!channel>`.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from channels.split import FENCE as _FENCE
from channels.split import split_text

_MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")
_SAFE_LINK = re.compile(r"^(https?|mailto):", re.IGNORECASE)


def escape(text: str) -> str:
    """Escape the three characters Slack treats as markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown_to_mrkdwn(markdown: str) -> str:
    """Convert Markdown (what the model writes) to Slack mrkdwn."""
    root = SyntaxTreeNode(_MD.parse(markdown))
    return _blocks(root.children, depth=0).strip("\n")


def _blocks(nodes: list[SyntaxTreeNode], depth: int, tight: bool = False) -> str:
    parts = [_block(node, depth) for node in nodes]
    return ("\n" if tight else "\n\n").join(p for p in parts if p != "")


def _block(node: SyntaxTreeNode, depth: int) -> str:
    kind = node.type
    if kind == "paragraph":
        return _inline(node.children[0]) if node.children else ""
    if kind == "heading":
        text = _inline(node.children[0], bold=True) if node.children else ""
        return f"*{text}*" if text.strip() else ""
    if kind in ("bullet_list", "ordered_list"):
        return _list(node, depth)
    if kind == "blockquote":
        inner = _blocks(node.children, depth)
        return "\n".join("> " + line if line else ">" for line in inner.split("\n"))
    if kind in ("fence", "code_block"):
        return f"{_FENCE}\n{escape(node.content.rstrip(chr(10)))}\n{_FENCE}"
    if kind == "hr":
        return "──────────"
    if kind == "table":
        return _table(node)
    if kind == "html_block":
        return escape(node.content.rstrip("\n"))
    if node.children:
        return _blocks(node.children, depth)
    return escape(node.content)


def _list(node: SyntaxTreeNode, depth: int) -> str:
    ordered = node.type == "ordered_list"
    number = int(str(node.attrs.get("start", 1))) if ordered else 0
    indent = "    " * depth
    lines: list[str] = []
    for item in node.children:
        marker = f"{number}." if ordered else ("•" if depth == 0 else "◦")
        number += 1
        body = _blocks(item.children, depth + 1, tight=True)
        first, *rest = body.split("\n") if body else [""]
        lines.append(f"{indent}{marker} {first.lstrip()}")
        for line in rest:
            nested = line.startswith("    " * (depth + 1)) or line.startswith(_FENCE)
            lines.append(line if nested or not line else f"{indent}  {line}")
    return "\n".join(lines)


def _table(node: SyntaxTreeNode) -> str:
    rows: list[list[str]] = []
    for section in node.children:
        for tr in section.children:
            rows.append([_plain(cell) for cell in tr.children])
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    sizes = [max(len(r[i]) for r in rows) for i in range(width)]
    lines = [" | ".join(c.ljust(sizes[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    lines.insert(1, "-+-".join("-" * s for s in sizes))
    return f"{_FENCE}\n{escape(chr(10).join(lines))}\n{_FENCE}"


def _plain(node: SyntaxTreeNode) -> str:
    """The text of a node without any formatting (table cells, link labels)."""
    if node.type in ("text", "code_inline", "html_inline"):
        return node.content
    if node.type in ("softbreak", "hardbreak"):
        return " "
    return "".join(_plain(child) for child in node.children)


def _inline(node: SyntaxTreeNode, bold: bool = False) -> str:
    out: list[str] = []
    for child in node.children:
        kind = child.type
        if kind == "text":
            out.append(escape(child.content))
        elif kind in ("softbreak", "hardbreak"):
            out.append("\n")
        elif kind == "strong":
            inner = _inline(child, bold=True)
            out.append(inner if bold else f"*{inner}*")
        elif kind == "em":
            out.append(f"_{_inline(child, bold)}_")
        elif kind == "s":
            out.append(f"~{_inline(child, bold)}~")
        elif kind == "code_inline":
            out.append(f"`{escape(child.content)}`")
        elif kind in ("link", "image"):
            out.append(_link(child))
        elif child.children:
            out.append(_inline(child, bold))
        else:
            out.append(escape(child.content))
    return "".join(out)


def _link(node: SyntaxTreeNode) -> str:
    url = str(node.attrs.get("href") or node.attrs.get("src") or "")
    label = _plain(node) if node.type == "link" else str(node.attrs.get("alt") or "")
    label = label or node.content
    if not _SAFE_LINK.match(url):
        return escape(label or url)
    # `|` and `>` end a Slack link early: keep them out of the label.
    label = escape(label).replace("|", "¦")
    if not label or label == escape(url):
        return f"<{escape(url)}>"
    return f"<{escape(url)}|{label}>"


def split_mrkdwn(text: str, limit: int) -> list[str]:
    """Split mrkdwn into messages of at most `limit` characters.

    Cuts at a paragraph break when one is in the second half of a chunk, else at a line break,
    else at a space; a code block cut in two is closed and reopened so both halves render as
    code. Never cuts inside an `&amp;` entity or a `<url|link>`.
    """
    return split_text(text, limit, fences=True, adjust=_outside_markup)


def split_markdown(text: str, limit: int) -> list[str]:
    """Split Markdown source the same way (paragraphs first, code fences closed and reopened)."""
    return split_text(text, limit, fences=True)


def _outside_markup(text: str, cut: int) -> int:
    """Move a cut back so it falls outside `&…;` entities and `<…>` links."""
    amp = text.rfind("&", max(0, cut - 6), cut)
    if amp != -1 and ";" not in text[amp:cut]:
        cut = amp
    lt = text.rfind("<", max(0, cut - 2000), cut)
    if lt != -1 and ">" not in text[lt:cut] and lt > 0:
        cut = lt
    return max(cut, 1)


_SLACK_MARKUP = re.compile(r"<([^<>\n]+)>")


def slack_to_text(text: str, *, bot_user_id: str | None = None) -> str:
    """Slack's inbound markup as plain text, with the bot's own mention removed.

    `<@U1>` → `@U1` (or `@name` when Slack sent a label), `<#C1|general>` → `#general`,
    `<https://x|docs>` → `docs (https://x)`, `<!here>` → `@here`, entities unescaped.
    """

    def replace(match: re.Match[str]) -> str:
        inner = match.group(1)
        target, _, label = inner.partition("|")
        if target.startswith("@"):
            if bot_user_id and target[1:] == bot_user_id:
                return ""
            return f"@{label.lstrip('@')}" if label else target
        if target.startswith("#"):
            return f"#{label}" if label else target
        if target.startswith("!"):
            return label or f"@{target[1:].split('^')[0]}"
        if label and label != target:
            return f"{label} ({target})"
        return target

    plain = _SLACK_MARKUP.sub(replace, text)
    plain = plain.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return re.sub(r"[ \t]{2,}", " ", plain).strip()
