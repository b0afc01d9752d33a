"""What the model reads of a search hit: the matched lines and their neighbours, without the
HTML comments (markers, template guidance), the markers it needs kept as short tags."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from memory.search.ranking import Candidate
from memory.search.snippets import focused_snippet, head_snippet, readable_lines
from tests.conftest import IndexFactory, WorkspaceFactory, keyword_config, use_config

TEMPLATE = Path(__file__).resolve().parents[1] / "workspace_template" / "MEMORY.md"
NOW = datetime(2026, 11, 20, 12, 0)
FACTS = (
    "- 2026-11-02: The boiler service is due every March.\n"
    "- 2026-11-03: Lena prefers oat milk in her coffee.\n"
    "- 2026-11-04: The spare key is under the blue flowerpot. "
    "<!-- observed: 2026-11-04 | status: superseded -->\n"
)


def cand(text: str, scores: tuple[float, ...] = ()) -> Candidate:
    end = len(text.split("\n"))
    c = Candidate(1, "MEMORY.md", "memory", "owner", 1, end, text, None, None)
    c.line_scores = scores
    return c


def test_comments_become_nothing_and_markers_short_tags() -> None:
    text = (
        "# Notes\n"
        "<!-- Guidance for the owner,\nover two lines. -->\n"
        "- Pasted text <!-- origin: untrusted · session: s1 -->\n"
        "- Old address <!-- observed: 2026-01-01 | status: superseded -->\n"
        "<!-- project: Garden -->\n"
        "- Sow the beans <!-- trigger: beans --> <!-- importance: 4 -->"
    )

    assert readable_lines(text) == [
        "# Notes",
        None,
        None,
        "- Pasted text [untrusted]",
        "- Old address [superseded]",
        "[project: Garden]",
        "- Sow the beans",
    ]


def test_a_chunk_cut_inside_a_comment_shows_none_of_it() -> None:
    text = "the end of a comment -->\n- A fact.\n<!-- the start of another"

    assert readable_lines(text) == [None, "- A fact.", None]
    assert head_snippet(text, 700) == "- A fact."


def test_the_last_line_of_a_small_memory_file_is_shown_without_the_template_comments() -> None:
    text = TEMPLATE.read_text(encoding="utf-8") + FACTS
    n = len(text.split("\n"))
    # Passage similarity gives every line some score; the asked-about line scores most.
    scores = tuple(1.0 if "spare key" in line else 0.3 for line in text.split("\n"))
    assert n <= 20

    snippet = focused_snippet(cand(text, scores), 1000, line_share=0.5)

    assert "<!--" not in snippet and "-->" not in snippet
    assert "The spare key is under the blue flowerpot. [superseded]" in snippet
    assert snippet.index("spare key") < 200  # the matched line, not the file's head
    assert "long-term memory" not in snippet  # far from the match: left out
    assert "Lena prefers oat milk" in snippet  # its neighbour, for context


def test_line_share_zero_keeps_todays_fill_but_never_shows_comment_lines() -> None:
    text = TEMPLATE.read_text(encoding="utf-8") + FACTS
    scores = tuple(1.0 if "spare key" in line else 0.3 for line in text.split("\n"))

    snippet = focused_snippet(cand(text, scores), 1000)

    assert "<!--" not in snippet and "Curated, durable memory" not in snippet
    assert "The spare key is under the blue flowerpot. [superseded]" in snippet


def test_a_gap_of_comment_lines_only_is_not_marked_as_skipped_text() -> None:
    text = "- First fact.\n<!-- a note to self -->\n- Second fact."
    snippet = focused_snippet(cand(text, (1.0, 0.0, 1.0)), 700)

    assert snippet == "- First fact.\n- Second fact."


@pytest.mark.usefixtures("use_model")
@pytest.mark.parametrize("embedding", ["none", "use"])
def test_search_shows_the_matched_line_of_a_memory_file_built_from_the_template(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, embedding: str
) -> None:
    ws = make_workspace({"MEMORY.md": TEMPLATE.read_text(encoding="utf-8") + FACTS})
    idx = make_index(ws, keyword_config() if embedding == "none" else use_config())
    idx.sync()

    hits = idx.search("Where is the spare key?", now=NOW)

    assert hits and hits[0].path == "MEMORY.md"
    snippet = hits[0].snippet
    assert "<!--" not in snippet and "Curated, durable memory" not in snippet
    assert "- 2026-11-04: The spare key is under the blue flowerpot. [superseded]" in snippet
    assert len(snippet) <= 1000
