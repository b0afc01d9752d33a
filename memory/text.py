"""Text helpers shared by chunking, indexing and search: token estimates and query terms.

CJK text has no spaces, so the keyword index stores each Han/Kana/Hangul run as its overlapping
bigrams followed by its last character ("妈妈说" → "妈妈 妈说 说"): a query's bigram is one index
token (its document frequency and postings those of one term, not a two-token phrase checked
position by position), and every occurrence of a character begins exactly one token, so a
one-character query is the prefix `"猫"*` with the same counts a token per character gave. That
makes one- and two-character words such as 猫 or 蓝色 searchable, which FTS5's trigram
tokenizer cannot do; a run keeps as many tokens as it has characters, so bm25's document
lengths are those of one token per character.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from common.text import strip_comments

# Han (incl. extension A and compatibility), Hiragana, Katakana, Hangul syllables and Jamo.
_CJK_CLASS = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"
)
CJK_CHAR = re.compile(f"[{_CJK_CLASS}]")
_CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")

# Small and deliberately conservative: question words and glue that match nearly every chunk.
ENGLISH_STOPWORDS = frozenset(
    """
    a about above after again all am an and any are as at be been before being below between
    both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me
    more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then
    there these they this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours yourself yourselves ever also
    maybe much many s t d ll m re ve
    """.split()  # noqa: SIM905
)
CJK_STOP_BIGRAMS = frozenset(
    ["什么", "怎么", "哪些", "哪个", "是否", "我们", "你们", "他们", "这个", "那个", "一个", "的是"]
)


def estimate_tokens(text: str) -> int:
    """Rough token count weighing CJK properly: ~1 token per CJK character, ~4 chars otherwise."""
    if not text:
        return 0
    cjk = len(CJK_CHAR.findall(text))
    return cjk + (len(text) - cjk + 3) // 4


def head_tokens(text: str, tokens: int) -> str:
    """The start of `text` holding about `tokens` tokens as `estimate_tokens` counts them, cut
    at a space where there is one near the end."""
    if estimate_tokens(text) <= tokens:
        return text
    budget = 4 * tokens  # quarter tokens: a CJK character costs 4, any other character 1
    end = 0
    for end, ch in enumerate(text):  # noqa: B007 (end is used after the loop)
        budget -= 4 if CJK_CHAR.match(ch) else 1
        if budget < 0:
            break
    head = text[:end]
    space = head.rfind(" ")
    return head[:space] if space > len(head) * 3 // 4 else head


def _cjk_index_tokens(run: str) -> str:
    # Overlapping bigrams, then the last character: n tokens for n characters, each character
    # beginning one of them.
    return " " + " ".join([run[i : i + 2] for i in range(len(run) - 1)] + [run[-1]]) + " "


def fts_body(text: str) -> str:
    """The text as stored in the FTS5 column (and PostgreSQL's keyword rows): comments stripped
    (`strip_comments`), each CJK run written as its overlapping bigrams and its last character,
    between spaces. Insert and delete must hand the index the same body (contentless FTS5)."""
    return _CJK_RUN.sub(lambda m: _cjk_index_tokens(m.group(0)), strip_comments(text))


def query_terms(query: str, *, drop_stopwords: bool = True) -> list[str]:
    """Distinct search terms of a query, in order: lowercase words and CJK bigrams/unigrams."""
    terms: list[str] = []
    seen: set[str] = set()

    def add(term: str) -> None:
        if term not in seen:
            seen.add(term)
            terms.append(term)

    for m in re.finditer(rf"[^\W{_CJK_CLASS}]+|[{_CJK_CLASS}]+", query):
        token = m.group(0)
        if CJK_CHAR.match(token):
            if len(token) == 1:
                add(token)
            for i in range(len(token) - 1):
                bigram = token[i : i + 2]
                if not (drop_stopwords and bigram in CJK_STOP_BIGRAMS):
                    add(bigram)
        else:
            word = token.lower()
            if drop_stopwords and (word in ENGLISH_STOPWORDS or (len(word) < 2 and word.isalpha())):
                continue
            add(word)
    return terms


def _cjk_query_tokens(run: str) -> str:
    # A run of two or more characters occurs in an indexed run as its consecutive bigrams (the
    # indexed run may go on past its end: no trailing character is asked for).
    if len(run) == 1:
        return run
    return " " + " ".join(run[i : i + 2] for i in range(len(run) - 1)) + " "


def _fts_phrase(term: str) -> str:
    """A quoted FTS5 phrase for `term`: a CJK bigram is one index token; a single CJK character
    is the prefix of the one token each of its occurrences begins (`"猫"*`); a longer CJK term
    (OpenClaw's whole runs) the phrase of its bigrams."""
    if len(term) == 1 and CJK_CHAR.match(term):
        return f'"{term}"*'
    term = _CJK_RUN.sub(lambda m: _cjk_query_tokens(m.group(0)), term).strip()
    return '"' + term.replace('"', '""') + '"'


def fts_match_expression(terms: list[str], *, operator: str = "OR") -> str | None:
    """An FTS5 MATCH expression joining quoted terms with AND or OR; None when nothing to match."""
    if not terms:
        return None
    return f" {operator} ".join(_fts_phrase(t) for t in terms)


def openclaw_query_terms(query: str) -> list[str]:
    """OpenClaw's keyword tokenisation: `[\\p{L}\\p{N}_]+` runs, as they are (no stopwords)."""
    return [m.group(0).lower() for m in re.finditer(r"[^\W]+", query, re.UNICODE)]


@lru_cache(maxsize=4096)
def _stem(word: str) -> str:
    # A light suffix stripper for in-chunk line scoring; FTS5's porter does the index side.
    for suffix in ("ingly", "edly", "ings", "ing", "ies", "ied", "ed", "es", "s", "ly"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


_TOKEN = re.compile(rf"[^\W{_CJK_CLASS}]+|[{_CJK_CLASS}]+")


def normalised_runs(text: str) -> list[str]:
    """`text` after NFKC and case folding, as its word runs and CJK runs (the tokens trigger and
    intent matching start from)."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


_WORD_RUN = re.compile(rf"[^\W{_CJK_CLASS}]+")


@lru_cache(maxsize=65536)
def line_terms(text: str) -> frozenset[str]:
    """Stemmed words and CJK bigrams/unigrams of a line, for scoring lines against a query
    (its comments left out, as `strip_comments`)."""
    # The runs `_TOKEN` finds, by kind: word runs and CJK runs never touch (a character is one
    # or the other), so two passes find the same runs (≈ 12 µs a line in one pass, by token).
    text = strip_comments(text)
    out = {_stem(word.lower()) for word in _WORD_RUN.findall(text)}
    for run in _CJK_RUN.findall(text):
        out.update(run)
        out.update(run[i : i + 2] for i in range(len(run) - 1))
    return frozenset(out)


def stem_term(term: str) -> str:
    return term if CJK_CHAR.match(term) else _stem(term)
