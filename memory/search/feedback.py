"""Pseudo-relevance feedback: words of the best hits, to search for what they are about.

A question in other words than the note shares no keyword with it; the note's own words are in
the hits the meaning found. `feedback_terms` picks the words the best hits share and the rest of
the candidates rarely hold — what the best hits are about, not the words of every note. Used by
the search (`SearchPreset.feedback_terms`: added to the keyword query) and by deep recall's
follow-up search (agent/active_memory.py: a second query built from the first hits).
"""

from __future__ import annotations

import math
import re

from common.text import strip_comments
from memory.text import CJK_CHAR, query_terms, stem_term

# A transcript line's speaker and turn number say nothing about what it is about.
_SPEAKER = re.compile(r"^\s*(?:\[\d+\]\s*)?(?:\*\*)?(?:user|assistant|owner)\b(?:\*\*)?", re.I)


def _terms(text: str) -> set[str]:
    lines = (_SPEAKER.sub("", line) for line in strip_comments(text).split("\n"))
    return {
        t
        for t in query_terms("\n".join(lines))
        if not t.isdigit() and (CJK_CHAR.match(t) or len(t) >= 3)
    }


def feedback_terms(best: list[str], pool: list[str], query: list[str], n: int) -> list[str]:
    """Up to `n` terms of the `best` texts, not in `query` (stems compared), best first: each
    scored by how many of the best texts hold it × its IDF over `pool` (the search's candidate
    texts, the best ones among them). A term in one text only counts when one text is given."""
    if n <= 0 or not best:
        return []
    asked = {stem_term(t) for t in query}
    pool_terms = [_terms(text) for text in pool] or [set()]
    counts: dict[str, int] = {}
    for text in best:
        for t in _terms(text):
            if stem_term(t) not in asked:
                counts[t] = counts.get(t, 0) + 1
    need = 2 if len(best) > 1 else 1
    size = len(pool_terms)
    scored = []
    for t, held in counts.items():
        if held < need:
            continue
        df = sum(1 for terms in pool_terms if t in terms)
        idf = math.log(1 + (size - df + 0.5) / (df + 0.5))
        scored.append((held * idf, t))
    scored.sort(key=lambda x: (-x[0], x[1]))
    return [t for score, t in scored[:n] if score > 0]
