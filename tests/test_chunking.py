"""chunk_markdown: overlapping chunks of about N tokens that keep their 1-based line ranges."""

from __future__ import annotations

import itertools
import random
import time

from common.text import strip_comments
from memory.index.chunking import chunk_markdown, hash_text, is_heading, split_units
from memory.text import estimate_tokens

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def prose(lines: int, *, seed: int = 1, heading_every: int | None = None) -> str:
    """Deterministic Markdown: lines of 3–15 words, with a heading every `heading_every` lines."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        if heading_every and i % heading_every == 0:
            out.append(f"## Section {i}")
        else:
            out.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 15))))
    return "\n".join(out) + "\n"


def test_chunks_stay_within_the_token_budget_and_are_not_tiny() -> None:
    chunks = chunk_markdown(prose(300), tokens=100, overlap=20)

    sizes = [estimate_tokens(c.text) for c in chunks]
    assert len(chunks) > 10
    assert max(sizes) <= 100
    # Every chunk but the last is filled to at least half the budget.
    assert min(sizes[:-1]) >= 50


def test_default_chunks_are_about_400_tokens() -> None:
    chunks = chunk_markdown(prose(600))

    sizes = [estimate_tokens(c.text) for c in chunks[:-1]]
    assert all(300 <= s <= 400 for s in sizes), sizes


def test_line_ranges_are_1_based_and_match_the_text() -> None:
    text = prose(200, heading_every=30)
    lines = text.split("\n")

    chunks = chunk_markdown(text, tokens=100, overlap=20)

    assert chunks[0].start_line == 1
    for c in chunks:
        assert 1 <= c.start_line <= c.end_line
        assert c.text == "\n".join(lines[c.start_line - 1 : c.end_line])
    assert chunks[-1].end_line == 200


def test_consecutive_chunks_share_lines_about_the_overlap() -> None:
    text = prose(200)
    lines = text.split("\n")

    chunks = chunk_markdown(text, tokens=100, overlap=30)

    for before, after in itertools.pairwise(chunks):
        assert after.start_line <= before.end_line, "no overlap"
        shared = "\n".join(lines[after.start_line - 1 : before.end_line])
        assert 0 < estimate_tokens(shared) <= 30


def test_zero_overlap_gives_adjacent_chunks() -> None:
    chunks = chunk_markdown(prose(200), tokens=100, overlap=0)

    for before, after in itertools.pairwise(chunks):
        assert after.start_line == before.end_line + 1


def test_every_line_is_in_some_chunk() -> None:
    chunks = chunk_markdown(prose(150), tokens=64, overlap=16)

    covered = {n for c in chunks for n in range(c.start_line, c.end_line + 1)}
    assert covered == set(range(1, 151))


def test_a_heading_starts_a_new_chunk_once_the_chunk_is_half_full() -> None:
    line = "alpha beta gamma delta epsilon"  # 8 tokens, 9 with its newline
    text = "# One\n" + f"{line}\n" * 7 + "## Two\n" + f"{line}\n" * 3

    # 98 tokens in all would fit one chunk of 100; the heading breaks it at over half full.
    chunks = chunk_markdown(text, tokens=100, overlap=20)

    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 8), (9, 12)]
    assert chunks[1].text.startswith("## Two")  # a new section carries no overlap


def test_a_heading_does_not_break_a_chunk_under_half_full() -> None:
    line = "alpha beta gamma delta epsilon"
    text = "# One\n" + f"{line}\n" * 3 + "## Two\n" + f"{line}\n" * 3

    chunks = chunk_markdown(text, tokens=100, overlap=20)

    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 8)]


def test_no_chunk_ends_on_a_bare_heading() -> None:
    chunks = chunk_markdown(prose(300, heading_every=7), tokens=64, overlap=16)

    for c in chunks:
        assert not is_heading(c.text.split("\n")[-1]), c


def test_heading_only_chunks_merge_into_the_content_that_follows() -> None:
    text = "# Title\n\n## Subtitle\n\n### Deeper\n\nThe only body line.\n"

    chunks = chunk_markdown(text, tokens=32, overlap=0)

    assert len(chunks) == 1
    assert (chunks[0].start_line, chunks[0].end_line) == (1, 7)
    assert chunks[0].text.startswith("# Title")
    assert chunks[0].text.endswith("The only body line.")


def test_trailing_headings_join_the_last_chunk() -> None:
    text = "Some content about gardens.\n\n## Later\n"

    chunks = chunk_markdown(text, tokens=100)

    assert len(chunks) == 1
    assert chunks[0].end_line == 3


def test_a_file_of_only_headings_is_one_chunk() -> None:
    chunks = chunk_markdown("# A\n## B\n", tokens=100)

    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 2)]


def test_cjk_counts_about_one_token_per_character() -> None:
    assert estimate_tokens("猫" * 100) == 100
    assert estimate_tokens("我喜欢蓝色") == 5
    assert estimate_tokens("abcd" * 100) == 100  # ~4 characters per token otherwise
    assert estimate_tokens("") == 0


def test_chinese_text_is_chunked_by_its_token_weight() -> None:
    line = "我最喜欢的颜色是蓝色因为它让我想起大海。"  # 20 characters, 20 tokens
    text = "\n".join([line] * 40) + "\n"

    chunks = chunk_markdown(text, tokens=100, overlap=0)

    # ~21 tokens per line with its newline: 4 lines per chunk, not the ~20 a 4-chars rule gives.
    assert len(chunks) == 10
    assert all(estimate_tokens(c.text) <= 100 for c in chunks)


def test_a_single_huge_line_is_split_into_budget_sized_pieces() -> None:
    text = " ".join(f"word{i}" for i in range(3000))

    chunks = chunk_markdown(text, tokens=100, overlap=20)

    assert len(chunks) > 20
    assert all(c.start_line == c.end_line == 1 for c in chunks)
    assert all(estimate_tokens(c.text) <= 100 for c in chunks)
    # Nothing lost: the pieces hold every word, in order.
    words = " ".join(c.text for c in chunks).split()
    assert words == text.split()


def test_a_huge_line_without_spaces_is_split_too() -> None:
    chunks = chunk_markdown("猫" * 1000, tokens=100, overlap=0)

    assert [len(c.text) for c in chunks] == [100] * 10


def test_empty_and_blank_input_give_no_chunks() -> None:
    assert chunk_markdown("") == []
    assert chunk_markdown("\n\n   \n\t\n") == []


def test_blank_lines_at_chunk_edges_are_trimmed() -> None:
    chunks = chunk_markdown("\n\n\nHello there.\n\n\n", tokens=100)

    assert [(c.start_line, c.end_line, c.text) for c in chunks] == [(4, 4, "Hello there.")]


def test_windows_line_endings_do_not_end_up_in_chunks() -> None:
    chunks = chunk_markdown("first line\r\nsecond line\r\n", tokens=100)

    assert chunks[0].text == "first line\nsecond line"


def test_chunk_hash_is_the_sha256_of_its_text() -> None:
    (chunk,) = chunk_markdown("A fact worth keeping.\n")

    assert chunk.hash == hash_text("A fact worth keeping.")
    assert len(chunk.hash) == 64


def test_importance_marker_is_recorded_on_its_chunk() -> None:
    text = "Routine note.\n<!-- importance: 2 -->\nKey fact. <!-- Importance: 5 -->\n"

    (chunk,) = chunk_markdown(text)

    assert chunk.importance == 5  # the highest marker inside wins
    assert chunk_markdown("No marker here.\n")[0].importance is None


def test_a_leading_byte_order_mark_is_dropped() -> None:
    (chunk,) = chunk_markdown("\ufeff# Notes\nA fact.\n")

    assert chunk.text == "# Notes\nA fact."
    assert chunk.hash == hash_text("# Notes\nA fact.")


def test_a_one_megabyte_line_chunks_in_linear_time() -> None:
    # The old cutter re-measured the whole rest of the line for every piece: 1 MB took ~4-14 s.
    line = " ".join(itertools.islice(itertools.cycle(WORDS), 200_000))
    assert len(line) > 1_000_000

    started = time.perf_counter()
    chunks = chunk_markdown(line + "\n")
    elapsed = time.perf_counter() - started

    assert elapsed < 2.0, f"{elapsed:.1f} s"
    assert all(estimate_tokens(c.text) <= 400 for c in chunks)


def test_pieces_of_a_long_line_cover_it_once_without_overlap_inside_a_chunk() -> None:
    line = " ".join(f"w{i}" for i in range(3000))

    chunks = chunk_markdown(line + "\n", tokens=100, overlap=0)

    assert "".join(c.text.replace("\n", "") for c in chunks) == line


def test_passages_leave_out_comments_but_keep_trigger_terms() -> None:
    text = (
        "# Session 2026-12-01 06:25 – 06:40\n"
        "<!-- session: 58bf5655f06143af | key: main:cli:direct:owner | messages: 15 -->\n"
        "\n"
        "- Booked the ferry for Friday. <!-- origin: agent · session: 3f2a9c -->\n"
        "- Anna is allergic to peanuts. <!-- trigger: Anna, allergy --> <!-- importance: 4 -->\n"
        "\n"
        "<!-- Communication style, formats, likes and dislikes. -->\n"
    )
    chunk = chunk_markdown(text)[0]
    units = split_units(chunk)
    embedded = "\n".join(u.text for u in units)

    assert "<!--" not in embedded and "3f2a9c" not in embedded and "likes" not in embedded
    assert "Booked the ferry for Friday." in embedded
    assert "Anna is allergic to peanuts." in embedded and "Anna, allergy" in embedded
    # The comment-only paragraph is no passage at all; each list item is one.
    assert [(u.start_line, u.end_line) for u in units] == [(1, 2), (4, 4), (5, 5)]
    assert all(u.hash == hash_text(u.text) for u in units)


def test_strip_comments_leaves_text_without_a_whole_comment_alone() -> None:
    assert strip_comments("a --> b and <!-- unclosed") == "a --> b and <!-- unclosed"
    assert strip_comments("x <!--\nmulti\nline\n--> y").split() == ["x", "y"]
    assert strip_comments("one<!-- importance: 3 -->two").split() == ["one", "two"]
    assert strip_comments("kiwi<!-- trigger: fruit -->").split() == ["kiwi", "fruit"]
