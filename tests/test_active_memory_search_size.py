"""Deep recall's search size (`ActiveMemory.search_results`, issue 20): a memory_search the
sub-call makes without max_results gets it; one that names it, or another tool, is left alone."""

from __future__ import annotations

from types import SimpleNamespace

from agent.active_memory import ActiveMemory
from agent.types import ToolCall


def test_deep_recall_sizes_only_a_search_that_names_no_max_results() -> None:
    sized = SimpleNamespace(search_results=10)
    bare = ToolCall("a", "memory_search", {"query": "q"})
    named = ToolCall("b", "memory_search", {"query": "q", "max_results": 3})
    other = ToolCall("c", "memory_get", {"path": "MEMORY.md"})

    assert ActiveMemory._sized(sized, bare).input["max_results"] == 10  # type: ignore[arg-type]
    assert ActiveMemory._sized(sized, named).input["max_results"] == 3  # type: ignore[arg-type]
    assert ActiveMemory._sized(sized, other) is other  # type: ignore[arg-type]
    off = SimpleNamespace(search_results=None)
    assert ActiveMemory._sized(off, bare) is bare  # type: ignore[arg-type]
