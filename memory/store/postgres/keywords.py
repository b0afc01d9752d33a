"""The keyword side on PostgreSQL, made to rank the terms SQLite's FTS5 ranks: no PostgreSQL
text-search parser (it knows no Chinese), but the same tokens and FTS5's own bm25.

- Tokens: Pinch's keyword body (memory/text.py `fts_body`: CJK characters already spaced) split
  as FTS5's `unicode61 remove_diacritics 2` does — letters and digits, diacritics removed, lower
  case — then stemmed. FTS5 uses the Porter stemmer; PostgreSQL ships Snowball's English
  stemmer (`english_stem`, Porter's own successor), applied in SQL (`STEMMED`); a few words stem
  differently, which bench/retrieval.py measures.
- Expressions: the FTS5 subset Pinch writes (memory/text.py `fts_match_expression`): quoted
  phrases, or bare words, joined by one operator, AND or OR; anything else is a
  `MalformedQuery`, as FTS5 would refuse it.
- Ranking: FTS5's bm25 (k1 = 1.2, b = 0.75, idf = ln((N - n + 0.5) / (n + 0.5)), 1e-6 when not
  positive, a phrase's frequency = its occurrences), over every keyword row of the schema, as
  a negative rank (lower is better), so equal data gives equal ranks on both backends.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from memory.store.search_queries import MalformedQuery

K1, B = 1.2, 0.75
# The stemmed form of the text[] parameter, in order (a stop word keeps its own form, as FTS5).
STEMMED = (
    "SELECT coalesce(array_agg(coalesce((ts_lexize('english_stem', t))[1], t) ORDER BY n), "
    "'{}') FROM unnest(%s::text[]) WITH ORDINALITY AS u(t, n)"
)
_TOKEN = re.compile(r"[^\W_]+")
_EXPRESSION = re.compile(r'\s*(?:"((?:[^"]|"")*)"|([^\W_]+))\s*')


def keyword_tokens(text: str) -> list[str]:
    """The tokens FTS5's unicode61 tokenizer (remove_diacritics 2) makes of `text`, unstemmed."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return _TOKEN.findall(plain.lower())


@dataclass(frozen=True)
class KeywordQuery:
    """A parsed expression: phrases (each a list of unstemmed tokens) joined by `operator`."""

    phrases: list[list[str]]
    operator: str  # "AND" | "OR"


def parse_match(expression: str) -> KeywordQuery:
    """The phrases and operator of an FTS5 expression of the form Pinch writes; MalformedQuery
    for anything else (an unclosed quote, a bracket, an operator without a phrase)."""
    phrases: list[list[str]] = []
    operators: set[str] = set()
    rest = expression
    while True:
        m = _EXPRESSION.match(rest)
        if m is None or m.group(2) in ("AND", "OR", "NOT", "NEAR"):
            raise MalformedQuery(f"fts5: syntax error near {rest[:20]!r}")
        text = m.group(1).replace('""', '"') if m.group(1) is not None else m.group(2)
        tokens = keyword_tokens(text)
        if tokens:
            phrases.append(tokens)
        rest = rest[m.end() :]
        if not rest.strip():
            break
        op = re.match(r"(AND|OR)\s+", rest)
        if op is None:
            raise MalformedQuery(f"fts5: syntax error near {rest[:20]!r}")
        operators.add(op.group(1))
        rest = rest[op.end() :]
    if len(operators) > 1:
        raise MalformedQuery("mixing AND and OR is not an expression Pinch writes")
    return KeywordQuery(phrases, operators.pop() if operators else "AND")


def occurrences(tokens: Sequence[str], phrase: Sequence[str]) -> int:
    """How often `phrase` (consecutive tokens) occurs in `tokens`."""
    n = len(phrase)
    if n == 1:
        return sum(1 for t in tokens if t == phrase[0])
    first = phrase[0]
    return sum(
        1
        for i in range(len(tokens) - n + 1)
        if tokens[i] == first and list(tokens[i : i + n]) == list(phrase)
    )


def _idf(total_rows: int, hits: int) -> float:
    value = math.log((total_rows - hits + 0.5) / (hits + 0.5))
    return value if value > 0 else 1e-6


def bm25_ranks(
    candidates: Sequence[tuple[int, Sequence[str]]],
    phrases: Sequence[Sequence[str]],
    operator: str,
    total_rows: int,
    average_length: float,
) -> dict[int, float]:
    """chunk id -> FTS5 bm25 rank (negative) of the candidates that match, given every row that
    holds any token of the phrases among `candidates`, and the whole index's row count and
    average length."""
    freqs = {cid: [occurrences(tokens, p) for p in phrases] for cid, tokens in candidates}
    lengths = {cid: len(tokens) for cid, tokens in candidates}
    hits = [sum(1 for f in freqs.values() if f[i]) for i in range(len(phrases))]
    idf = [_idf(total_rows, n) for n in hits]
    average = average_length or 1.0
    ranks: dict[int, float] = {}
    for cid, f in freqs.items():
        matched = any(f) if operator == "OR" else all(f)
        if not matched or not phrases:
            continue
        norm = K1 * (1 - B + B * lengths[cid] / average)
        score = sum(idf[i] * f[i] * (K1 + 1) / (f[i] + norm) for i in range(len(phrases)))
        ranks[cid] = -score
    return ranks
