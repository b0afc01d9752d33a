"""Per-query retrieval metrics, and their means over a set of queries.

LoCoMo (evidence turns are single lines): a turn is *located* when its line lies inside a hit's
[start_line, end_line] in the same file, and *seen* when its whole line (whitespace-normalised)
is inside the hit's snippet — a hit can locate a turn its snippet cut off.
MADial (memories are line blocks): a hit finds a memory when its range overlaps the block.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol


class HitLike(Protocol):
    """What scoring needs of a search hit (`memory.index.index.SearchHit` has these and more)."""

    path: str
    start_line: int
    end_line: int
    snippet: str


@dataclass(frozen=True)
class Hit:
    """A search hit with its path made workspace-relative."""

    path: str
    start_line: int
    end_line: int
    snippet: str


@dataclass(frozen=True)
class Line:
    """One line of a memory file: where a LoCoMo turn was written."""

    path: str
    line: int
    text: str


@dataclass(frozen=True)
class Span:
    """A 1-based inclusive line range of a memory file: where a MADial memory was written."""

    path: str
    start_line: int
    end_line: int


LOCOMO_METRICS = (
    "seen_any@6",
    "located_any@6",
    "located_any@10",
    "located_all@10",
    "mrr",
    "snippet_chars@6",
)
MADIAL_METRICS = ("hit@1", "any@5")


def normalise(text: str) -> str:
    return " ".join(text.split())


def locates(hit: HitLike, line: Line) -> bool:
    return hit.path == line.path and hit.start_line <= line.line <= hit.end_line


def overlaps(hit: HitLike, span: Span) -> bool:
    return (
        hit.path == span.path
        and hit.start_line <= span.end_line
        and span.start_line <= hit.end_line
    )


def score_locomo(
    hits: Sequence[HitLike], evidence: Sequence[Line], hits6: Sequence[HitLike] | None = None
) -> dict[str, float]:
    """The LOCOMO_METRICS of one question, given its ranked hits (up to 10 are used). The @6
    figures come from `hits6` when given: the hits of a search asked for 6 results, which is
    what the agent's memory_search returns (MMR and the vector slots choose among fewer)."""
    top6, top10 = (hits6 if hits6 is not None else hits)[:6], hits[:10]
    snippets6 = [normalise(h.snippet) for h in top6]
    wanted = [normalise(e.text) for e in evidence]
    first = next(
        (rank for rank, h in enumerate(top10, 1) if any(locates(h, e) for e in evidence)), None
    )
    return {
        "seen_any@6": float(any(w in s for w in wanted for s in snippets6)),
        "located_any@6": float(any(locates(h, e) for h in top6 for e in evidence)),
        "located_any@10": float(first is not None),
        "located_all@10": float(all(any(locates(h, e) for h in top10) for e in evidence)),
        "mrr": 1.0 / first if first else 0.0,
        "snippet_chars@6": float(sum(len(h.snippet) for h in top6)),
    }


def score_madial(hits: Sequence[HitLike], relevant: Sequence[Span]) -> dict[str, float]:
    """hit@1: the top hit overlaps the primary memory (relevant[0]); any@5: a top-5 hit overlaps
    any relevant memory."""
    return {
        "hit@1": float(bool(hits) and overlaps(hits[0], relevant[0])),
        "any@5": float(any(overlaps(h, r) for h in hits[:5] for r in relevant)),
    }


def mean_scores(rows: Iterable[dict[str, float]], names: Sequence[str]) -> dict[str, float]:
    """Per-metric means (0.0 for no rows) plus `n`, the number of rows."""
    rows = list(rows)
    means = {name: sum(r[name] for r in rows) / len(rows) if rows else 0.0 for name in names}
    return {**means, "n": float(len(rows))}
