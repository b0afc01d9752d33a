"""The keyword side on PostgreSQL, made to rank the terms SQLite's FTS5 ranks: no PostgreSQL
text-search parser (it knows no Chinese), but the same tokens and FTS5's own bm25.

- Tokens: Pinch's keyword body (memory/text.py `fts_body`: CJK characters already spaced) split
  as FTS5's `unicode61 remove_diacritics 2` does — letters and digits, diacritics removed, lower
  case — then stemmed as FTS5's `porter` tokenizer does: Porter's 1980 algorithm
  (common/porter.py) on ASCII words of 3 to 64 letters, other tokens as they are. (PostgreSQL's
  own Snowball `english_stem` was used first: it stems 130 of MADial's 2,011 English words
  otherwise than FTS5 — and leaves its stop words unstemmed —, the Python Porter 1, so the keyword
  preset differed by a question in 40; bench/RESULTS.md.)
  A CJK run arrives as its bigrams and its last character (`fts_body`), each one token here
  too: a Chinese bigram has one `memory_keyword_df` row and one GIN `@>` lookup, like a word.
- Expressions: the FTS5 subset Pinch writes (memory/text.py `fts_match_expression`): quoted
  phrases, or bare words, joined by one operator, AND or OR; a one-token prefix (`"猫"*`, what
  a one-character CJK query becomes: every token its occurrences begin) is matched through the
  tokens of `memory_keyword_df` it begins; anything else is a `MalformedQuery`, as FTS5 would
  refuse it.
- Ranking: FTS5's bm25 (k1 = 1.2, b = 0.75, idf = ln((N - n + 0.5) / (n + 0.5)), 1e-6 when not
  positive, a phrase's frequency = its occurrences), over every keyword row of the schema, as
  a negative rank (lower is better), so equal data gives equal ranks on both backends. It is
  computed by PostgreSQL in one statement (`bm25_statement`) over the rows the GIN index finds,
  N and the total length read from `memory_keyword_stats` (kept with the keyword rows);
  bench/pg_store.py measured it against the same formula in Python (bench/RESULTS.md).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from common.porter import porter_stem
from memory.store.search_queries import MalformedQuery

K1, B = 1.2, 0.75
_TOKEN = re.compile(r"[^\W_]+")
_STEMMABLE = re.compile(r"[a-z]{3,64}")  # what FTS5's porter tokenizer stems; the rest passes


def stemmed(tokens: Sequence[str]) -> list[str]:
    """`tokens` as FTS5's porter tokenizer leaves them (Porter's algorithm on ASCII words)."""
    return [porter_stem(t) if _STEMMABLE.fullmatch(t) else t for t in tokens]


_EXPRESSION = re.compile(r'\s*(?:"((?:[^"]|"")*)"|([^\W_]+))(\s*\*)?\s*')
PREFIX = "*"  # ends a phrase's one token when it is a prefix (no token holds it: `_TOKEN`)


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
        if tokens and m.group(3):
            if len(tokens) > 1:
                raise MalformedQuery("a prefix of several tokens is not an expression Pinch writes")
            tokens = [tokens[0] + PREFIX]
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


def is_prefix(phrase: Sequence[str]) -> bool:
    """Whether `phrase` is one prefix token (`parse_match` marks it with PREFIX)."""
    return len(phrase) == 1 and phrase[0].endswith(PREFIX)


def _expansion(phrase: Sequence[str], params: list[Any]) -> str:
    """SQL for the array of indexed tokens a prefix phrase matches (those it begins), from the
    frequency table's tokens: one scan of the distinct tokens, not of the keyword rows."""
    params.append(phrase[0][: -len(PREFIX)])
    return (
        "(SELECT coalesce(array_agg(token), '{}') FROM memory_keyword_df "
        "WHERE starts_with(token, %s))"
    )


def _frequency(phrase: Sequence[str], params: list[Any]) -> str:
    """SQL for how often `phrase` (consecutive stemmed tokens) occurs in a row's `tokens`."""
    if is_prefix(phrase):
        params.append(phrase[0][: -len(PREFIX)])
        return "(SELECT count(*) FROM unnest(tokens) AS t WHERE starts_with(t, %s))"
    params.append(phrase[0])
    if len(phrase) == 1:
        return "coalesce(cardinality(array_positions(tokens, %s)), 0)"
    rest = []
    for offset, token in enumerate(phrase[1:], start=1):
        rest.append(f"tokens[p + {offset}] = %s")
        params.append(token)
    return (
        "(SELECT count(*) FROM unnest(array_positions(tokens, %s)) AS p "
        f"WHERE {' AND '.join(rest)})"
    )


# A row's tokens as one string, each token between two unit separators (chr 31, never inside a
# token): a phrase occurs where its tokens, wrapped alike, occur as a substring — found by
# `strpos`, counted by `replace`, both in C, instead of a subquery over the first token's
# positions.
JOINED = "(chr(31) || array_to_string(tokens, chr(31) || chr(31)) || chr(31))"


def _wrapped(phrase: Sequence[str]) -> str:
    return "".join(f"\x1f{t}\x1f" for t in phrase)


def _phrase_found(phrase: Sequence[str], params: list[Any]) -> str:
    """SQL true where the row's tokens hold `phrase` (several tokens) consecutively."""
    params.append(_wrapped(phrase))
    return f"strpos({JOINED}, %s) > 0"


def _occurrences(phrase: Sequence[str], params: list[Any], joined: str) -> str:
    """SQL for how often `phrase` occurs in the row whose wrapped tokens are `joined`. Counting
    by `replace` finds non-overlapping occurrences: exact unless the phrase can overlap itself
    (a token sequence whose start repeats its end, as "ha ha"), which is counted position by
    position as before."""
    if len(phrase) == 1 or any(
        list(phrase[:k]) == list(phrase[-k:]) for k in range(1, len(phrase))
    ):
        return _frequency(phrase, params)
    params += [_wrapped(phrase), _wrapped(phrase)]
    return (
        f"((octet_length({joined}) - octet_length(replace({joined}, %s, ''))) / octet_length(%s))"
    )


def _df(phrase: Sequence[str], params: list[Any]) -> str:
    """SQL for how many keyword rows hold `phrase`: a single token's count is read from
    `memory_keyword_df` (kept with the keyword rows), a phrase's counted over the rows holding
    all its tokens (the GIN index's `@>`) where they are consecutive."""
    if is_prefix(phrase):
        inner = _expansion(phrase, params)
        return f"(SELECT count(*) FROM memory_keywords WHERE tokens && {inner})::float8"
    if len(phrase) == 1:
        params.append(phrase[0])
        return "coalesce((SELECT rows FROM memory_keyword_df WHERE token = %s), 0)::float8"
    params.append(sorted(set(phrase)))
    inner = _frequency(phrase, params)
    return (
        f"(SELECT count(*) FROM memory_keywords WHERE tokens @> %s::text[] AND {inner} > 0)::float8"
    )


def matching(phrases: Sequence[Sequence[str]], operator: str, params: list[Any]) -> str:
    """The WHERE condition of the keyword rows matching `phrases` joined by `operator`, written
    for the GIN index: each phrase is a `tokens @> its tokens` lookup (OR: the index's bitmaps
    united; AND: all the tokens at once), and a phrase of several tokens has its order checked
    only on the rows holding all of them."""
    if operator == "AND":
        checks = []
        whole = sorted({t for p in phrases if not is_prefix(p) for t in p})
        if whole:
            params.append(whole)
            checks.append("tokens @> %s::text[]")
        checks += [f"tokens && {_expansion(p, params)}" for p in phrases if is_prefix(p)]
        checks += [_phrase_found(p, params) for p in phrases if len(p) > 1]
        return " AND ".join(checks)
    alternatives = []
    for phrase in phrases:
        if is_prefix(phrase):
            alternatives.append(f"tokens && {_expansion(phrase, params)}")
            continue
        params.append(sorted(set(phrase)))
        if len(phrase) == 1:
            alternatives.append("tokens @> %s::text[]")
        else:
            alternatives.append(f"(tokens @> %s::text[] AND {_phrase_found(phrase, params)})")
    return "(" + " OR ".join(alternatives) + ")"


def bm25_statement(
    phrases: Sequence[Sequence[str]],
    operator: str,
    newest: int | None = None,
    since: int | None = None,
) -> tuple[str, list[Any]]:
    """A SELECT of (chunk_id, rank) for the keyword rows matching the stemmed `phrases` joined
    by `operator` — every one, or with `newest` only the `newest` highest chunk ids among them,
    as SQLite's capped path ranks them — rank = FTS5's bm25 (negative) over the whole table;
    the caller orders and limits it.

    Bounded work: the candidates come from the GIN index (`&&` / `@>`), cut to `newest` before
    any frequency is computed; N and the average length come from `memory_keyword_stats` and a
    token's document frequency from `memory_keyword_df`, so idf reads no posting (a phrase of
    several tokens is counted over the rows holding all of them). `since`: only the rows from
    that chunk id on."""
    cand_params: list[Any] = []
    where = _since(matching(phrases, operator, cand_params), since, cand_params)
    joined = f", {JOINED} AS joined" if any(len(p) > 1 for p in phrases) else ""
    candidates = f"SELECT chunk_id, tokens{joined} FROM memory_keywords WHERE {where}"
    if newest is not None:
        # The newest ids first, their token arrays read only for those kept: a word held by
        # many rows costs their ids (from the heap pages the GIN lookup names), not their arrays.
        candidates = (
            f"SELECT k.chunk_id, k.tokens{joined} FROM (SELECT chunk_id FROM memory_keywords WHERE "
            f"{where} ORDER BY chunk_id DESC LIMIT %s) AS n JOIN memory_keywords AS k "
            "USING (chunk_id)"
        )
        cand_params.append(newest)
    freq_params: list[Any] = []
    freqs = [f"{_occurrences(p, freq_params, 'joined')} AS f{i}" for i, p in enumerate(phrases)]
    df_params: list[Any] = []
    statement = _bm25(
        f"m AS MATERIALIZED ({candidates}), "
        "c AS MATERIALIZED (SELECT chunk_id, cardinality(tokens)::float8 AS dl, "
        f"{', '.join(freqs)} FROM m)",
        [_df(p, df_params) for p in phrases],
    )
    return statement, cand_params + freq_params + df_params


def _since(where: str, since: int | None, params: list[Any]) -> str:
    """`where`, and with `since` only the rows from that chunk id on."""
    if since is None:
        return where
    params.append(since)
    return f"({where}) AND chunk_id >= %s"


def _bm25(rows: str, hits: Sequence[str]) -> str:
    """FTS5's bm25 (negative) of the rows of CTE `c` (chunk_id, dl as float8, f0 … the count of
    each phrase), defined by `rows` (CTEs, the last one `c`); `hits`: SQL for each phrase's
    document frequency. Every step MATERIALIZED: each frequency and each document count is
    computed once (an inlined CTE repeats a subquery wherever the score formula names its
    column). One formula for every statement, so equal data gives equal floats."""
    n = range(len(hits))
    idfs = ", ".join(
        f"CASE WHEN ln((s.n - h.h{i} + 0.5) / (h.h{i} + 0.5)) > 0 "
        f"THEN ln((s.n - h.h{i} + 0.5) / (h.h{i} + 0.5)) ELSE 1e-6 END AS i{i}"
        for i in n
    )
    score = " + ".join(
        f"i.i{i} * c.f{i} * {K1 + 1} / (c.f{i} + {K1} * ({1 - B} + {B} * c.dl / s.avgdl))"
        for i in n
    )
    return (
        "WITH s AS MATERIALIZED (SELECT rows::float8 AS n, CASE WHEN rows > 0 THEN "
        "tokens::float8 / rows ELSE 1 END AS avgdl FROM memory_keyword_stats WHERE id = 1), "
        f"{rows}, "
        f"h AS MATERIALIZED (SELECT {', '.join(f'{h} AS h{i}' for i, h in enumerate(hits))}), "
        f"i AS MATERIALIZED (SELECT {idfs} FROM s, h) "
        f"SELECT c.chunk_id, -({score}) AS rank FROM c, i, s"
    )


def reads_postings(phrases: Sequence[Sequence[str]]) -> bool:
    """Whether `postings_statement` ranks this expression: words (or CJK bigrams) alone, each
    one token — what the presets' keyword side writes, joined by OR or AND. Phrases of several
    tokens and prefixes go to `bm25_statement`."""
    return bool(phrases) and all(len(p) == 1 and not is_prefix(p) for p in phrases)


_POSTINGS = "memory_keyword_postings"


def postings_statement(
    tokens: Sequence[str],
    operator: str,
    newest: int | None = None,
    join_order: Sequence[int] | None = None,
    since: int | None = None,
) -> tuple[str, list[Any]]:
    """`bm25_statement` for single stemmed `tokens` joined by `operator`, read from
    `memory_keyword_postings` alone (its primary key holds each token's rows in id order, with
    the counts and lengths bm25 needs): the same ids and ranks, without reading a token array.

    - OR: each distinct token's entries newest first — with `newest`, only its first `newest`
      (a backward range of the index) —, the `newest` highest ids among them kept. A row among
      the newest `newest` of the union holding token t has fewer than `newest` newer rows in
      the union, so fewer in t's list: nothing is missed.
    - AND: the first token's entries newest first, joined on the id to each other token's
      (index lookups or a merge of the ranges, as the planner finds cheaper), the first
      `newest` rows that hold them all kept. `join_order`: the tokens' positions in the order
      to join them (the rarest first, for a caller that fixes the planner's join order).
    - `since`: only the entries from that chunk id on, in every token's range (a bounded
      range the planner can merge)."""
    params: list[Any] = []
    n = len(tokens)
    limit = " LIMIT %s" if newest is not None else ""
    lower = " AND chunk_id >= %s" if since is not None else ""
    at_least = [since] if since is not None else []
    if operator == "OR" or n == 1:
        distinct = list(dict.fromkeys(tokens))
        lists = []
        for token in distinct:
            lists.append(
                f"(SELECT token, chunk_id, tf, dl FROM {_POSTINGS} WHERE token = %s{lower} "
                f"ORDER BY chunk_id DESC{limit})"
            )
            params += [token, *at_least] + ([newest] if newest is not None else [])
        # One row per kept id, a count column per phrase (0 where the row lacks it).
        counts = ", ".join(
            f"coalesce(max(u.tf) FILTER (WHERE u.token = %s), 0) AS f{i}" for i in range(n)
        )
        params += list(tokens)
        kept = ""
        if newest is not None:
            kept = f"(SELECT DISTINCT chunk_id FROM u ORDER BY chunk_id DESC{limit})"
            params.append(newest)
        rows = (
            f"WITH u AS MATERIALIZED ({' UNION ALL '.join(lists)}) "
            f"SELECT u.chunk_id, max(u.dl) AS dl, {counts} FROM u "
            + (f"WHERE u.chunk_id IN {kept} " if newest is not None else "")
            + "GROUP BY u.chunk_id"
        )
    else:
        order = list(join_order) if join_order is not None else list(range(n))
        first = order[0]
        joins = " ".join(
            f"JOIN {_POSTINGS} AS p{i} ON p{i}.token = %s AND p{i}.chunk_id = p{first}.chunk_id"
            + lower.replace("chunk_id", f"p{i}.chunk_id")
            for i in order[1:]
        )
        for i in order[1:]:
            params += [tokens[i], *at_least]
        params += [tokens[first], *at_least]
        counts = ", ".join(f"p{i}.tf AS f{i}" for i in range(n))
        rows = (
            f"SELECT p{first}.chunk_id, p{first}.dl, {counts} FROM {_POSTINGS} AS p{first} "
            f"{joins} WHERE p{first}.token = %s{lower.replace('chunk_id', f'p{first}.chunk_id')} "
            f"ORDER BY p{first}.chunk_id DESC{limit}"
        )
        if newest is not None:
            params.append(newest)
    df_params: list[Any] = []
    counts_of = ", ".join(f"r.f{i}" for i in range(n))
    statement = _bm25(
        f"r AS MATERIALIZED ({rows}), "
        f"c AS MATERIALIZED (SELECT r.chunk_id, r.dl::float8 AS dl, {counts_of} FROM r)",
        [_df([t], df_params) for t in tokens],
    )
    return statement, params + df_params


def count_statement(
    phrases: Sequence[Sequence[str]], operator: str, limit: int | None, since: int | None = None
) -> tuple[str, list[Any]]:
    """A SELECT of how many keyword rows match the stemmed `phrases` joined by `operator`,
    counting stops at `limit`: no bm25, no row leaves PostgreSQL, and the GIN lookup ends at the
    limit (a common term's count costs what its first `limit` rows do)."""
    params: list[Any] = []
    where = _since(matching(phrases, operator, params), since, params)
    statement = f"SELECT 1 FROM memory_keywords WHERE {where}"
    if limit is not None:
        statement += " LIMIT %s"
        params.append(limit)
    return f"SELECT count(*) FROM ({statement}) AS m", params
