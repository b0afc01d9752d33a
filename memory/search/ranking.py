"""Ranking a search's candidates: fusing the keyword and vector scores, re-scoring by the
lines that match, decay by age, and picking diverse results (MMR)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import date, datetime
from functools import lru_cache

from memory.search.presets import SearchPreset
from memory.store.transcripts import EVENT_LABELS
from memory.text import line_terms, stem_term


@dataclass
class Candidate:
    """One chunk found for a query, with the scores the pipeline gives it."""

    id: int
    path: str
    source: str
    origin: str
    start_line: int
    end_line: int
    text: str
    importance: int | None
    day: str | None
    vector_score: float = 0.0
    keyword_score: float = 0.0
    score: float = 0.0
    line_scores: tuple[float, ...] = ()  # how well each line of the chunk matches the query
    passages: tuple[tuple[int, int, float], ...] = ()  # (start, end, vector score) of its passages
    project: str | None = None  # its project tag (memory/project_tags.py); None: untagged


def merge_hybrid(
    vector: list[tuple[int, float]], keyword: list[tuple[int, float]], preset: SearchPreset
) -> dict[int, tuple[float, float]]:
    """chunk_id → (vector score, keyword score), each in [0, 1], per the preset's fusion."""
    out: dict[int, tuple[float, float]] = {}
    if preset.fusion == "rrf":
        kw = {i: 61 / (60 + rank) for rank, (i, _) in enumerate(keyword, start=1)}
        vec = {i: 61 / (60 + rank) for rank, (i, _) in enumerate(vector, start=1)}
    elif preset.fusion == "weighted":
        kw = {i: (-r) / (1 - r) if r < 0 else 1 / (1 + r) for i, r in keyword}
        vec = {i: max(0.0, s) for i, s in vector}
    else:
        best_kw = max((-r for _, r in keyword), default=0.0)
        kw = {i: (-r) / best_kw if best_kw > 0 else 0.0 for i, r in keyword}
        # Cosine scales differ by model: map the candidates' range onto [0, 1] relative to the
        # best, keeping absolute gaps (e5's cosines crowd into 0.7–0.9).
        best_v = max((s for _, s in vector), default=0.0)
        worst_v = min((s for _, s in vector), default=0.0)
        span = best_v - worst_v
        vec = {i: (s - worst_v) / span if span > 1e-6 else 1.0 for i, s in vector}
    for i in set(kw) | set(vec):
        out[i] = (vec.get(i, 0.0), kw.get(i, 0.0))
    return out


_NONE: frozenset[str] = frozenset()


def stems_by_line(lines: list[str], stems: list[str]) -> list[frozenset[str]]:
    """For each of `lines`, the `stems` (query terms as `stem_term` gives them) among its
    `line_terms` — all the ranking asks of a line — without computing the terms of a line that
    cannot hold any: a stem is a prefix of one of the line's lowercased words, or a CJK piece of
    it, so a line without one as a substring of its lowercased text holds none. (≈ 10 µs a line
    for `line_terms`, ≈ 0.5 µs for the test; most candidate lines hold no word of the question.)
    Python lowercases a capital sigma by its neighbours: such a line is always computed."""
    out: list[frozenset[str]] = []
    for line in lines:
        lowered = line.lower()
        maybe = stems if "Σ" in line else [t for t in stems if t in lowered]
        if not maybe:
            out.append(_NONE)
            continue
        held = line_terms(line)
        out.append(frozenset(t for t in maybe if t in held))
    return out


@lru_cache(maxsize=512)
def text_stems(text: str, stems: tuple[str, ...]) -> tuple[frozenset[str], ...]:
    """`stems_by_line` of `text`'s lines, remembered: one search asks it of the same keyword
    hits three times (their coverages, the question's coverage, the line rerank)."""
    return tuple(stems_by_line(text.split("\n"), list(stems)))


def line_stems_of(texts: list[str], terms: list[str]) -> None:
    """Compute (and remember, `text_stems`) the stems of `terms` in each line of `texts`: a
    search does it for its keyword hits while its vector side is still running."""
    key = tuple(dict.fromkeys(stem_term(t) for t in terms))
    for text in texts:
        text_stems(text, key)


def _line_weights(lines_terms: list[list[frozenset[str]]], terms: list[str]) -> dict[str, float]:
    """IDF of each query term over the candidate chunks' lines (rare terms weigh more)."""
    n = sum(len(lt) for lt in lines_terms) or 1
    weights: dict[str, float] = {}
    for t in terms:
        df = sum(1 for lt in lines_terms for line in lt if t in line)
        weights[t] = math.log(1 + (n - df + 0.5) / (df + 0.5)) if df else 0.0
    return weights


def query_coverage(texts: list[str], terms: list[str]) -> float:
    """The IDF-weighted share of the query's terms found in any of `texts` (the keyword
    candidates): 1.0 when every word of the question is somewhere, near 0 when only its common
    words are — a question asked in other words than the notes it is about. A term in no line
    weighs the most (its IDF over the lines with a document frequency of 0)."""
    stems = list(dict.fromkeys(stem_term(t) for t in terms))
    if not stems:
        return 1.0
    key = tuple(stems)
    lines = [line for text in texts for line in text_stems(text, key)]
    df = {t: sum(1 for line in lines if t in line) for t in stems}
    weights = {t: math.log(1 + (len(lines) - d + 0.5) / (d + 0.5)) for t, d in df.items()}
    total = sum(weights.values())
    return sum(w for t, w in weights.items() if df[t]) / total if total > 0 else 1.0


def chunk_coverages(texts: list[str], terms: list[str]) -> list[float]:
    """How much of the query each of `texts` (the keyword candidates) holds: the IDF-weighted
    share of the query's terms in it, IDF over all their lines as in `query_coverage` (a term in
    no line weighs the most). Near 1 for a note that says what the question asks; low for one
    that shares a single incidental word with it (a reworded question, or a long chatty one
    whose common words — in Chinese, bigrams across word boundaries — are in every note)."""
    stems = list(dict.fromkeys(stem_term(t) for t in terms))
    key = tuple(stems)
    return _coverages([list(text_stems(text, key)) for text in texts], stems)


def _coverages(per_text: list[list[frozenset[str]]], stems: list[str]) -> list[float]:
    """`chunk_coverages` of chunks given as their lines' terms."""
    if not stems:
        return [1.0] * len(per_text)
    lines = [lt for chunk in per_text for lt in chunk]
    df = {t: sum(1 for line in lines if t in line) for t in stems}
    weights = {t: math.log(1 + (len(lines) - d + 0.5) / (d + 0.5)) for t, d in df.items()}
    total = sum(weights.values())
    if total <= 0:
        return [1.0] * len(per_text)
    out = []
    for chunk in per_text:
        held = frozenset().union(*chunk)
        out.append(sum(w for t, w in weights.items() if t in held) / total)
    return out


def calibrate_keyword_hits(
    merged: dict[int, tuple[float, float]], shares: dict[int, float], power: float
) -> dict[int, tuple[float, float]]:
    """Each keyword hit's keyword score × (the share of the question it holds) ** `power`.

    The keyword side is normalised by its best candidate, so when every keyword hit shares just
    one incidental word with the question (asked in other words than the note), the best of
    them scores 1 and filler outranks the chunk the vectors found. Weighed by what it holds, a
    hit with one common word of a long question weighs little, and one holding the question's
    rarer words keeps its score. A hit stays a keyword hit (score > 0)."""
    out = dict(merged)
    for cid, share in shares.items():
        if cid in out:
            v, kw = out[cid]
            if kw > 0:
                out[cid] = (v, kw * max(share, 1e-3) ** power)
    return out


def best_chunk_coverage(texts: list[str], terms: list[str]) -> float:
    """How much of the query the best single one of `texts` holds (`chunk_coverages`)."""
    if not texts:
        return 0.0 if terms else 1.0
    return max(chunk_coverages(texts, terms))


def rerank_by_lines(
    candidates: list[Candidate],
    terms: list[str],
    weight: float,
    semantic_weight: float = 1.0,
    follow_weight: float = 0.0,
    coverage_power: float = 0.0,
) -> None:
    """Add `weight` × how much of the query's weight the best 1–2 adjacent lines cover.

    `coverage_power`: that bonus × (the IDF-weighted share of the whole question the chunk
    holds, terms in no candidate weighing the most) ** power. Line coverage counts only the
    terms some candidate has, so for a question asked in other words a line sharing one
    incidental word with it "covers" it all; weighed by the whole question, it covers little."""
    stems = list(dict.fromkeys(stem_term(t) for t in terms))
    key = tuple(stems)
    per_line = [list(text_stems(c.text, key)) for c in candidates]
    weights = _line_weights(per_line, stems)
    total = sum(weights.values())
    shares = _coverages(per_line, stems) if coverage_power and weight else [1.0] * len(candidates)
    for cand, lts, share in zip(candidates, per_line, shares, strict=True):
        if not lts:
            continue
        scores = [sum(w for t, w in weights.items() if t in lt) for lt in lts]
        best = max(scores)
        # A pair of neighbouring lines (a question and its answer) may cover more together.
        pair_best = max(
            [best]
            + [
                sum(w for t, w in weights.items() if t in lts[j] or t in lts[j + 1])
                for j in range(len(lts) - 1)
            ]
        )
        lexical = [x / total for x in scores] if total > 0 else [0.0] * len(scores)
        semantic = [0.0] * len(lts)
        for start, end, v in cand.passages:
            for n in range(start, end + 1):
                i = n - cand.start_line
                if 0 <= i < len(semantic):
                    semantic[i] = max(semantic[i], v)
        # A line right after a matching one is often its answer: it inherits some of its score.
        carried = [0.0, *lexical[:-1]]
        cand.line_scores = tuple(
            a + follow_weight * f + semantic_weight * b
            for a, f, b in zip(lexical, carried, semantic, strict=True)
        )
        if total > 0 and weight:
            coverage = 0.5 * best / total + 0.5 * pair_best / total
            cand.score += weight * coverage * share**coverage_power


def temporal_multiplier(day: str | None, now: datetime, preset: SearchPreset) -> float:
    """Decay factor for dated logs; evergreen (undated) chunks never decay."""
    if day is None or not preset.decay_half_life_days:
        return 1.0
    try:
        age = (now.date() - date.fromisoformat(day)).days
    except ValueError:
        return 1.0
    age = max(0, age)
    decay = 0.5 ** (age / preset.decay_half_life_days)
    return preset.decay_floor + (1 - preset.decay_floor) * decay


def project_multiplier(tag: str | None, active: str | None, preset: SearchPreset) -> float:
    """1 + the preset's `project_boost` for a chunk tagged with the active project, else 1:
    untagged chunks are neutral and other projects' are kept, never pushed down."""
    if active is None or tag != active:
        return 1.0
    return 1.0 + preset.project_boost


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def mmr_select(
    candidates: list[Candidate],
    k: int,
    lam: float,
    same_source: float = 0.0,
    same_day: float = 0.0,
) -> list[Candidate]:
    """Maximal marginal relevance on word sets: relevant, and not repeating each other.

    `same_source`: a candidate from the same file (one day's log, one session) as a chosen one
    counts as at least this similar to it — evidence spread over several days or sessions
    (a multi-hop question's) is preferred to more of the same conversation. `same_day`: the
    same for a candidate of the same date (a dated log, session or transcript of that day),
    whichever file it is in."""
    pool = list(candidates)
    sets = {c.id: line_terms(c.text) for c in pool}
    redundancy = {c.id: 0.0 for c in pool}  # max similarity to anything chosen so far
    chosen: list[Candidate] = []
    top = max((c.score for c in pool), default=1.0) or 1.0
    while pool and len(chosen) < k:
        best = max(pool, key=lambda c: lam * c.score / top - (1 - lam) * redundancy[c.id])
        chosen.append(best)
        pool.remove(best)
        for c in pool:
            similar = _jaccard(sets[c.id], sets[best.id])
            if same_source and c.path == best.path:
                similar = max(similar, same_source)
            if same_day and c.day is not None and c.day == best.day:
                similar = max(similar, same_day)
            redundancy[c.id] = max(redundancy[c.id], similar)
    return chosen


def tied_slots(vector: list[tuple[int, float]], slots: int, ties: float, most: int) -> int:
    """`slots`, and one more for each further chunk of `vector` (best first) whose cosine is
    within `ties` of the best one's, up to `most` in all (never fewer than `slots`)."""
    if ties <= 0 or not vector:
        return slots
    n = slots
    while n < min(most, len(vector)) and vector[n][1] >= vector[0][1] - ties:
        n += 1
    return n


def weak_keyword_hits(
    ranked: list[Candidate],
    raw: dict[int, float],
    share_of: dict[int, float],
    vector_floor: float,
    preset: SearchPreset,
) -> set[int]:
    """The keyword hits that are no evidence on their own: they hold less than
    `preset.keyword_evidence_share` of the question's (IDF-weighted) words and their best
    passage is below `vector_floor`, where meaning alone would be evidence — one incidental
    word ("plan", "system") shared with a question about something else. Without vectors
    (`raw` empty) every keyword hit is evidence: there is no meaning to weigh it against."""
    if not preset.keyword_evidence_share or not raw:
        return set()
    return {
        c.id
        for c in ranked
        if c.keyword_score > 0
        and share_of.get(c.id, 0.0) < preset.keyword_evidence_share
        and raw.get(c.id, -1.0) < vector_floor
    }


# A line that starts one of the assistant's turns: a transcript's ("[12] Assistant: …", or any
# id in the brackets, as a log written in that shape has) or a session note's ("**Assistant**
# (14:05): …").
_ASSISTANT_TURN = re.compile(
    rf"^\s*(?:(?:\[[^\]]*\]\s*)?{EVENT_LABELS['assistant']}:|\*\*{EVENT_LABELS['assistant']}\*\*)"
)


# The start of anyone's turn: "[12] User:", "[D3:4] Sam:", "**Owner** (14:05):".
_TURN = re.compile(r"^\s*(?:\[[^\]]*\]\s*[^\s:][^:]{0,40}:|\*\*[^*]{1,40}\*\*)")


def _assistant_only(lines: list[str]) -> bool:
    """Whether every turn a passage holds is the assistant's (short turns are grouped into one
    passage: "Noted." before the owner's fact makes that passage the owner's too)."""
    turns = [x for x in lines if _TURN.match(x)]
    return bool(turns) and all(_ASSISTANT_TURN.match(x) for x in turns)


def weigh_assistant_turns(
    vector: list[tuple[int, float]],
    passages: dict[int, list[tuple[int, int, float]]],
    chunks: dict[int, Candidate],
    penalty: float,
) -> list[tuple[int, float]]:
    """`vector` (chunk id, best passage cosine) with each passage that holds only the
    assistant's turns counted `penalty` lower, best first: at equal meaning, what the owner
    said outranks what the assistant answered — a reply of general advice is close by meaning
    to many questions, the owner's own words are where facts about them are. Only the passages
    the vector side returned are weighed; a chunk whose passages or text are not at hand keeps
    its cosine."""
    out = []
    for cid, sim in vector:
        c, spans = chunks.get(cid), passages.get(cid)
        if c is None or not spans:
            out.append((cid, sim))
            continue
        lines = c.text.split("\n")
        best = -2.0
        for start, end, cosine in spans:
            held = lines[max(0, start - c.start_line) : end - c.start_line + 1]
            best = max(best, cosine - penalty if _assistant_only(held) else cosine)
        out.append((cid, best))
    return sorted(out, key=lambda t: -t[1])  # (stable: a tie keeps the store's order)


def keep_vector_best(
    ranked: list[Candidate],
    k: int,
    vector: list[tuple[int, float]],
    candidates: dict[int, Candidate],
    slots: int,
    relevance_floor: float | None,
) -> list[Candidate]:
    """The top `k` of `ranked` with the best `slots` chunks of `vector` (chunk id, best passage
    cosine; best first) among them: each one missing, and at or above `relevance_floor`, takes
    the place of the lowest-ranked hit and comes after the hits kept."""
    top = ranked[:k]
    kept = {c.id for c in top}
    missing = [
        candidates[cid]
        for cid, sim in vector[:slots]
        if cid not in kept
        and cid in candidates
        and (relevance_floor is None or sim >= relevance_floor)
    ]
    if not missing:
        return top
    return top[: max(0, k - len(missing))] + missing[:k]
