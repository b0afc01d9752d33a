"""Markdown → Telegram HTML, the plain-text twin, and splitting at 4,096 characters."""

from __future__ import annotations

import re

import pytest

from channels.telegram.format import (
    markdown_to_html,
    markdown_to_plain,
    split_for_telegram,
    utf16_len,
)
from tests.fakes.telegram_server import ApiError, parse_telegram_html

TAG = re.compile(r"</?(b|i|s|u|code|pre|a|blockquote)\b")


def test_angle_brackets_and_ampersands_are_escaped():
    assert markdown_to_html("if a < b && c > d") == "if a &lt; b &amp;&amp; c &gt; d"


def test_raw_html_in_the_source_is_shown_not_interpreted():
    assert markdown_to_html("<b>not bold</b> <script>x</script>") == (
        "&lt;b&gt;not bold&lt;/b&gt; &lt;script&gt;x&lt;/script&gt;"
    )


@pytest.mark.parametrize(
    ("markdown", "html"),
    [
        ("**bold** and *it*", "<b>bold</b> and <i>it</i>"),
        ("~~gone~~", "<s>gone</s>"),
        ("use `a<b>`", "use <code>a&lt;b&gt;</code>"),
        ("[docs](https://x.y/?a=1&b=2)", '<a href="https://x.y/?a=1&amp;b=2">docs</a>'),
        ("# Plan", "<b>Plan</b>"),
        ("> quoted", "<blockquote>quoted</blockquote>"),
        ("```py\nx = 1 < 2\n```", '<pre><code class="language-py">x = 1 &lt; 2</code></pre>'),
        ("    indented code", "<pre>indented code</pre>"),
    ],
)
def test_markdown_becomes_telegram_html(markdown, html):
    assert markdown_to_html(markdown) == html


def test_lists_become_text_lines_with_bullets_and_numbers():
    markdown = "- apples\n- pears\n  - green\n\n1. first\n2. second"
    assert markdown_to_html(markdown) == "• apples\n• pears\n   • green\n\n1. first\n2. second"


def test_line_breaks_and_paragraphs_are_kept():
    assert markdown_to_html("line one\nline two\n\nnext paragraph") == (
        "line one\nline two\n\nnext paragraph"
    )


def test_a_link_with_an_unsafe_scheme_is_not_a_link():
    assert "<a" not in markdown_to_html("[x](javascript:alert(1))")


def test_tables_are_shown_preformatted():
    html = markdown_to_html("| a | b |\n|---|---|\n| 1 | 2 |")
    assert html == "<pre>| a | b |\n|---|---|\n| 1 | 2 |</pre>"


def test_plain_text_is_made_from_the_source_and_carries_no_markup():
    markdown = "# Title\n\n**bold** *it* `code` [link](https://x.y)\n\n```\nx < y\n```"
    plain = markdown_to_plain(markdown)
    assert plain == "Title\n\nbold it code link (https://x.y)\n\nx < y"
    assert not TAG.search(plain)
    assert "&lt;" not in plain


def test_every_rendering_is_html_telegram_accepts():
    markdown = (
        "# H\n\n**b *i* b** `c` ~~s~~ [l](https://x.y) <raw> & \n\n> q **b**\n\n"
        "- a\n- **b**\n\n```\n<code>\n```\n\n| t |\n|---|\n| <x> |"
    )
    try:
        parse_telegram_html(markdown_to_html(markdown))
    except ApiError as error:  # pragma: no cover - the assertion message is the point
        pytest.fail(error.description)


def test_blank_text_gives_no_chunks():
    assert split_for_telegram("") == []
    assert split_for_telegram("  \n\n ") == []


def test_a_short_reply_is_one_chunk():
    [chunk] = split_for_telegram("**hi**")
    assert (chunk.source, chunk.html, chunk.plain) == ("**hi**", "<b>hi</b>", "hi")


def test_paragraphs_are_kept_whole_when_a_reply_is_split():
    paragraphs = [f"Paragraph {n}: " + "words " * 150 for n in range(12)]
    chunks = split_for_telegram("\n\n".join(paragraphs))
    assert len(chunks) > 1
    assert all(utf16_len(c.html) <= 4096 for c in chunks)
    pieces = [p for c in chunks for p in c.source.split("\n\n")]
    assert [p.strip() for p in pieces] == [p.strip() for p in paragraphs]


def test_a_split_never_falls_inside_a_code_fence():
    fence = "```python\n" + "\n".join(f"print({n})" for n in range(100)) + "\n```"
    markdown = "Before.\n\n" + "x " * 1900 + "\n\n" + fence + "\n\nAfter."
    chunks = split_for_telegram(markdown)
    for chunk in chunks:
        assert chunk.source.count("```") % 2 == 0  # every fence opened is closed
    assert any(fence in c.source for c in chunks)  # it fitted, so it stayed whole


def test_a_code_block_longer_than_a_message_is_cut_between_lines_and_fenced_again():
    lines = [f"value_{n} = {n} * 2  # <&>" for n in range(500)]
    chunks = split_for_telegram("```python\n" + "\n".join(lines) + "\n```")
    assert len(chunks) >= 4
    for chunk in chunks:
        assert utf16_len(chunk.html) <= 4096
        assert chunk.source.startswith("```python\n") and chunk.source.endswith("\n```")
        assert chunk.html.startswith('<pre><code class="language-python">')
        parse_telegram_html(chunk.html)
    shown = [line for c in chunks for line in c.plain.split("\n")]
    assert shown == lines


def test_the_limit_is_checked_on_the_rendered_html_not_the_source():
    markdown = "<>&" * 1200  # 3,600 source characters, 10,800 once escaped
    chunks = split_for_telegram(markdown)
    assert len(chunks) >= 3
    assert all(utf16_len(c.html) <= 4096 for c in chunks)
    assert "".join(c.source for c in chunks) == markdown


def test_the_limit_counts_utf16_like_telegram():
    chunks = split_for_telegram("😀" * 3000)  # 6,000 UTF-16 code units
    assert [utf16_len(c.html) for c in chunks] == [4096, 1904]


def test_a_huge_word_is_cut_without_losing_characters():
    markdown = "x" * 10_000
    chunks = split_for_telegram(markdown)
    assert "".join(c.source for c in chunks) == markdown
    assert all(utf16_len(c.html) <= 4096 for c in chunks)
