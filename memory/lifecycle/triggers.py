"""Trigger-tagged entries of the owner's curated files, and matching them against a message.

An entry is a list item (with its indented continuation lines) or a paragraph of MEMORY.md or
USER.md. It carries a trigger when a `<!-- trigger: term, term -->` marker sits on one of its
lines or on a marker-only line right above it; `<!-- importance: 1–5 -->` works the same way:

    - 2026-01-10: Anna is allergic to peanuts. <!-- trigger: Anna, allergy, peanuts -->
    <!-- importance: 4 --> <!-- trigger: 上次旅行, 京都 -->
    - 2025-10: the Kyoto trip, hotel near Gion, flew ANA.

Terms are normalised the same way as messages: NFKC, case-folded, Latin words Porter-stemmed,
CJK runs split into bigrams (a one-character run stays one character). A term is a phrase of
such tokens; it is *present* to the extent of the share of its tokens found in the message.

The score of an entry (0–1) is the sum of its terms' presence divided by min(number of terms,
2), capped at 1. So with one term that term must be there; with two or more, any two of them
are a full match and one of them is half of one (0.5) — listing synonyms never makes an entry
harder to hit. A strong match is a score ≥ `STRONG_MATCH` (0.65).

Entries marked `status: superseded`, and anything inside an HTML comment, are not entries. A
file holding a line marked `<!-- origin: untrusted … -->` (pasted from a log) counts as its
lowest origin, as everywhere in memory: none of its entries is a trigger entry.
Parsing is cached per file by (mtime, size) and then by content hash; matching uses an inverted
index from token to entries, so a message costs lookups in proportion to its own tokens.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from common.porter import porter_stem
from memory.project_tags import line_projects
from memory.store.lineage import file_origin
from memory.text import CJK_CHAR, normalised_runs

log = logging.getLogger(__name__)

STRONG_MATCH = 0.65
TRIGGER_FILES = ("MEMORY.md", "USER.md")  # the owner's curated files: the only trusted source

_TRIGGER = re.compile(r"<!--\s*trigger:\s*(.*?)\s*-->", re.IGNORECASE | re.DOTALL)
_IMPORTANCE = re.compile(r"<!--\s*importance:\s*([0-9])\s*-->", re.IGNORECASE)
_SUPERSEDED = re.compile(r"<!--[^>]*?status:\s*superseded\s*-->", re.IGNORECASE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_LIST_ITEM = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s+")
_HEADING = re.compile(r"^\s{0,3}(?:#{1,6}\s|#{1,6}$)")
_SETEXT = re.compile(r"^\s{0,3}(?:=+|-+)\s*$")


@dataclass(frozen=True)
class TriggerEntry:
    """One trigger-tagged entry: where it is, its text (markers removed) and its terms."""

    path: str  # "MEMORY.md" or "USER.md"
    line: int  # 1-based first line of the entry
    text: str
    terms: tuple[tuple[str, ...], ...]  # each term as its normalised tokens
    importance: int  # 1–5; 3 when unmarked
    project: str | None = None  # its project tag (memory/project_tags.py): active there only


@dataclass(frozen=True)
class TriggerHit:
    entry: TriggerEntry
    score: float


def normalise_tokens(text: str) -> list[str]:
    """Tokens of `text` for trigger matching: NFKC, case-folded, Porter-stemmed Latin words,
    CJK runs as overlapping bigrams (a lone CJK character as itself)."""
    out: list[str] = []
    for token in normalised_runs(text):
        if CJK_CHAR.match(token):
            if len(token) == 1:
                out.append(token)
            out.extend(token[i : i + 2] for i in range(len(token) - 1))
        else:
            out.append(porter_stem(token))
    return out


def parse_trigger_terms(raw: str) -> tuple[tuple[str, ...], ...]:
    """The terms of a trigger marker's text ("Anna, allergy, 上次旅行"; also ; 、 ， separated)."""
    terms = []
    for part in re.split(r"[,;，、；]", raw):
        tokens = tuple(dict.fromkeys(normalise_tokens(part)))
        if tokens and tokens not in terms:
            terms.append(tokens)
    return tuple(terms)


def parse_entries(path: str, content: str) -> list[TriggerEntry]:
    """The trigger-tagged entries of one curated file's `content`."""
    entries: list[TriggerEntry] = []
    block: list[tuple[int, str]] = []  # the current entry's (line number, line)
    pending: list[str] = []  # marker-only lines waiting for the entry below them
    in_comment = False

    def close() -> None:
        if block:
            entry = _make_entry(path, block)
            if entry is not None:
                entries.append(entry)
        block.clear()

    for number, line in enumerate(content.splitlines(), start=1):
        if in_comment:  # inside a multi-line comment, up to and including its closing line
            in_comment = "-->" not in line
            continue
        stripped = line.strip()
        opened = stripped.rfind("<!--")
        if opened != -1 and "-->" not in stripped[opened:]:
            close()
            pending.clear()
            in_comment = True  # a commented-out example is never an entry
            continue
        if not stripped or _HEADING.match(line) or (block and _SETEXT.match(line)):
            close()
            pending.clear()
            continue
        if not _COMMENT.sub("", stripped).strip():  # a line of comments only
            if block and line[:1].isspace() and _LIST_ITEM.match(_first_line(block)):
                block.append((0, line))  # an indented marker belongs to the item above
                continue
            close()
            if _TRIGGER.search(stripped) or _IMPORTANCE.search(stripped) or "status:" in stripped:
                pending.append(stripped)
            else:
                pending.clear()
            continue
        starts_item = _LIST_ITEM.match(line) is not None
        if block and starts_item:
            close()
        if not block:
            block.extend((0, marker) for marker in pending)
            pending.clear()
        block.append((number, line))
    close()
    if entries and "project" in content.lower():
        projects = line_projects(content.splitlines())
        entries = [replace(e, project=projects[e.line - 1]) for e in entries]
    return entries


def _first_line(block: Sequence[tuple[int, str]]) -> str:
    return next((line for number, line in block if number), "")


def _make_entry(path: str, block: Sequence[tuple[int, str]]) -> TriggerEntry | None:
    raw = "\n".join(line for _, line in block)
    if _SUPERSEDED.search(raw):
        return None
    terms = tuple(t for m in _TRIGGER.finditer(raw) for t in parse_trigger_terms(m.group(1)))
    if not terms:
        return None
    marks = [int(m) for m in _IMPORTANCE.findall(raw)]
    importance = min(5, max(1, max(marks))) if marks else 3
    text_lines = [_COMMENT.sub("", line).strip() for number, line in block if number]
    text = " ".join(t for t in text_lines if t)
    first = next(number for number, _ in block if number)
    return TriggerEntry(path, first, text, tuple(dict.fromkeys(terms)), importance)


class TriggerIndex:
    """The trigger entries of some files, with an inverted index for matching messages."""

    def __init__(self, entries: Iterable[TriggerEntry]) -> None:
        self.entries = tuple(entries)
        # token → [(entry number, term number)]; a token may serve several terms of one entry
        self._postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for e, entry in enumerate(self.entries):
            for t, term in enumerate(entry.terms):
                for token in term:
                    self._postings[token].append((e, t))

    def __len__(self) -> int:
        return len(self.entries)

    def match(
        self, message: str, *, min_score: float = 0.0, project: str | None = None
    ) -> list[TriggerHit]:
        """Entries scoring ≥ `min_score` (and > 0) against `message`: best first, higher
        importance first among equal scores, then file order. An entry tagged with a project
        matches only while that is the active `project`."""
        tokens = set(normalise_tokens(message))
        found: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for token in tokens:
            for e, t in self._postings.get(token, ()):
                found[e][t] += 1
        hits = []
        for e, terms in found.items():
            entry = self.entries[e]
            if entry.project is not None and entry.project != project:
                continue
            presence = sum(count / len(entry.terms[t]) for t, count in terms.items())
            score = min(1.0, presence / min(len(entry.terms), 2))
            if score >= min_score and score > 0:
                hits.append(TriggerHit(entry, round(score, 4)))
        hits.sort(key=lambda h: (-h.score, -h.entry.importance, h.entry.path, h.entry.line))
        return hits


class TriggerFiles:
    """The trigger entries of the curated files in one workspace, re-parsed only on change.

    Reads only `TRIGGER_FILES` at the workspace root — never daily logs, session notes,
    transcripts or anything else, nor a curated file holding an untrusted line. Blocks (a stat
    per file per call; a read when one changed)."""

    def __init__(self, workspace: Path, files: Sequence[str] = TRIGGER_FILES) -> None:
        self.workspace = workspace
        self.files = tuple(files)
        self._stat: dict[str, tuple[int, int]] = {}
        self._hash: dict[str, str] = {}
        self._entries: dict[str, list[TriggerEntry]] = {}
        self._index: TriggerIndex | None = None

    def index(self) -> TriggerIndex:
        changed = False
        for name in self.files:
            changed |= self._refresh(name)
        if changed or self._index is None:
            self._index = TriggerIndex(e for name in self.files for e in self._entries[name])
        return self._index

    def _refresh(self, name: str) -> bool:
        path = self.workspace / name
        try:
            if path.is_symlink():  # as the indexer: a symlink is not the owner's file
                raise FileNotFoundError(name)
            st = path.stat()
        except OSError:
            gone = bool(self._entries.get(name))
            self._stat.pop(name, None)
            self._hash.pop(name, None)
            self._entries[name] = []
            return gone
        stamp = (st.st_mtime_ns, st.st_size)
        if self._stat.get(name) == stamp:
            return False
        self._stat[name] = stamp
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if self._hash.get(name) == digest:
            return False
        self._hash[name] = digest
        text = data.decode("utf-8", errors="replace")
        if file_origin(text, "owner") == "untrusted":
            # It counts as its lowest line: nothing in it may surface by itself.
            log.warning(
                "%s holds a line marked <!-- origin: untrusted … -->: its trigger entries are "
                "off until you delete that line or its marker",
                name,
            )
            self._entries[name] = []
        else:
            self._entries[name] = parse_entries(name, text)
        return True
