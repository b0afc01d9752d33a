"""bench/retrieval.py --conversations: LoCoMo conversations by position, one run each."""

from __future__ import annotations

import pytest

from bench.retrieval import pick_conversations


def test_positions_are_one_based_and_limit_comes_first() -> None:
    convs = ["c1", "c2", "c3", "c4", "c5"]
    assert pick_conversations(convs, None, "3,4,5") == ["c3", "c4", "c5"]
    assert pick_conversations(convs, None, " 1 ,") == ["c1"]
    assert pick_conversations(convs, 2, "2,3") == ["c2"]
    assert pick_conversations(convs, None, None) == convs
    assert pick_conversations(convs, 3, "") == ["c1", "c2", "c3"]


def test_a_bad_position_is_a_one_line_error() -> None:
    with pytest.raises(SystemExit, match="positions like 3,4,5"):
        pick_conversations(["c1"], None, "three")
