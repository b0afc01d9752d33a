"""Markdown → Slack mrkdwn, splitting long replies, and Slack's inbound markup → plain text."""

from __future__ import annotations

import pytest

from channels.slack.format import markdown_to_mrkdwn, slack_to_text, split_markdown, split_mrkdwn


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold**", "*bold*"),
        ("__bold__", "*bold*"),
        ("*italic* and _italic_", "_italic_ and _italic_"),
        ("~~gone~~", "~gone~"),
        ("`a < b`", "`a &lt; b`"),
        ("[docs](https://example.com/a?x=1&y=2)", "<https://example.com/a?x=1&amp;y=2|docs>"),
        ("<https://example.com>", "<https://example.com>"),
        ("Tom & Jerry <3 > 2", "Tom &amp; Jerry &lt;3 &gt; 2"),
        ("# Title", "*Title*"),
        ("## A **bold** heading", "*A bold heading*"),
        ("**bold _and italic_**", "*bold _and italic_*"),
        ("line one\nline two", "line one\nline two"),
    ],
)
def test_inline_markdown_becomes_mrkdwn(markdown: str, mrkdwn: str) -> None:
    assert markdown_to_mrkdwn(markdown) == mrkdwn


def test_lists_become_bullets_and_numbers() -> None:
    markdown = "- apples\n- pears\n  - green\n\n1. first\n2. second"
    assert markdown_to_mrkdwn(markdown) == "• apples\n• pears\n    ◦ green\n\n1. first\n2. second"


def test_code_blocks_keep_their_text_escaped_and_drop_the_language() -> None:
    markdown = "```python\nif a < b and c:\n    print('**not bold**')\n```"
    assert markdown_to_mrkdwn(markdown) == (
        "```\nif a &lt; b and c:\n    print('**not bold**')\n```"
    )


def test_a_table_becomes_an_aligned_code_block() -> None:
    markdown = "| Name | Qty |\n|---|---|\n| **apples** | 3 |\n| kiwi | 12 |"
    assert markdown_to_mrkdwn(markdown) == (
        "```\nName   | Qty\n-------+----\napples | 3\nkiwi   | 12\n```"
    )


def test_quotes_keep_the_quote_marker_unescaped() -> None:
    assert markdown_to_mrkdwn("> wise words\n> here") == "> wise words\n> here"


def test_a_model_cannot_ping_the_whole_channel() -> None:
    assert markdown_to_mrkdwn("<!channel> hello <@U123>") == "&lt;!channel&gt; hello &lt;@U123&gt;"


def test_links_with_unsafe_schemes_stay_text() -> None:
    assert "<javascript" not in markdown_to_mrkdwn("[x](javascript:alert(1))")


def test_a_short_text_is_one_chunk() -> None:
    assert split_mrkdwn("hello", 100) == ["hello"]


def test_splitting_prefers_paragraph_breaks() -> None:
    text = ("a" * 60) + "\n\n" + ("b" * 60)
    assert split_mrkdwn(text, 100) == ["a" * 60, "b" * 60]


def test_a_split_code_block_is_closed_and_reopened() -> None:
    text = "```\n" + "\n".join(f"line {i}" for i in range(60)) + "\n```"
    chunks = split_mrkdwn(text, 120)
    assert len(chunks) > 2
    for chunk in chunks:
        assert len(chunk) <= 120
        assert chunk.startswith("```") and chunk.endswith("```")
    body = [line for c in chunks for line in c.split("\n") if line != "```"]
    assert body == [f"line {i}" for i in range(60)]


def test_a_split_never_cuts_an_entity_or_a_link() -> None:
    text = "x" * 95 + "&amp; <https://example.com/very/long|link>" + " y" * 50
    chunks = split_mrkdwn(text, 100)
    assert "".join(chunks).replace(" ", "") == text.replace(" ", "")
    for chunk in chunks:
        assert chunk.count("<") == chunk.count(">")
        assert not chunk.endswith("&amp") and not chunk.startswith("amp;")


def test_one_enormous_word_is_cut_hard() -> None:
    chunks = split_mrkdwn("z" * 250, 100)
    assert [len(c) for c in chunks] == [96, 96, 58]


def test_inbound_markup_becomes_plain_text() -> None:
    text = "<@U0BOT> ask <@U2|ann> in <#C1|general> about <https://x.y|docs> &amp; <!here> &lt;3"
    assert slack_to_text(text, bot_user_id="U0BOT") == (
        "ask @ann in #general about docs (https://x.y) & @here <3"
    )


def test_inbound_bare_links_and_user_ids_are_kept() -> None:
    assert slack_to_text("see <https://x.y> with <@U9>") == "see https://x.y with @U9"


def test_splitting_always_makes_progress_inside_a_reopened_code_block() -> None:
    text = "```\n" + "a" * 300 + "\n```"
    chunks = split_mrkdwn(text, 100)
    assert all(len(c) <= 100 for c in chunks)
    assert "".join(c.replace("```", "").replace("\n", "") for c in chunks) == "a" * 300


def test_markdown_source_is_split_with_code_fences_reopened() -> None:
    text = "Intro a < b.\n\n```python\n" + "\n".join(f"x = {i}" for i in range(40)) + "\n```"
    chunks = split_markdown(text, 100)
    assert all(len(c) <= 100 for c in chunks)
    assert all(markdown_to_mrkdwn(c).count("```") % 2 == 0 for c in chunks)
    assert chunks[0].startswith("Intro a < b.")
