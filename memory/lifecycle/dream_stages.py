"""Dreaming's three stages, the program's side: which entries are candidates, how often they
were recalled, and which pass the gate.

- **Light** (`stage_candidates`): entries (bullets or paragraphs) of daily logs and session notes
  (`memory/YYYY-MM-DD*.md`), deduplicated, minus what MEMORY.md already holds. Never transcripts,
  never a file holding an untrusted line (a file counts as its lowest origin), never an entry
  marked untrusted or system.
- **REM** (`reinforce`): per candidate, the recall signals that overlap its lines — how many,
  how many distinct queries and days, their mean score — and a theme word shared with others.
- **Deep** (`gate`): score, recalls, queries, days and size thresholds; each failure is named.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from memory.files.atomic import read_workspace_text
from memory.files.discovery import file_day
from memory.project_tags import line_projects
from memory.store.backends import store_for
from memory.store.db import Database
from memory.store.dreams_store import staging_lookups_for
from memory.store.lineage import file_origin
from memory.store.recall_signals import signals_for
from memory.text import estimate_tokens

MEMORY_FILE = "MEMORY.md"
PREIMAGE_DIR = "memory/.dreams"
TRUSTED_FOR_DREAMING = frozenset({"owner", "agent"})
_UNTRUSTED_MARK = re.compile(r"<!--\s*origin:\s*(untrusted|system)\b")
_SESSION_MARK = re.compile(r"<!--\s*origin:\s*\w+\s*·\s*session:\s*([0-9A-Za-z_-]{1,64})\s*-->")
_COMMENT = re.compile(r"\s*<!--.*?-->", re.DOTALL)  # markers: source, origin, observed
_WORD = re.compile(r"[^\W_]{4,}", re.UNICODE)
_STOP = frozenset(
    [
        "that",
        "this",
        "with",
        "from",
        "have",
        "were",
        "will",
        "would",
        "there",
        "their",
        "about",
        "which",
        "when",
        "what",
        "them",
        "then",
        "they",
        "been",
        "into",
        "also",
        "than",
        "more",
        "some",
        "just",
        "like",
        "only",
        "over",
        "such",
        "your",
        "ours",
    ]
)


class DreamingConfig(BaseModel):
    """`[dreaming]`: nightly consolidation of recalled notes into MEMORY.md."""

    enabled: bool = True
    hour: int = Field(default=3, ge=0, le=23)  # owner's local time of the nightly run
    minute: int = Field(default=0, ge=0, le=59)
    min_score: float = Field(default=0.75, ge=0, le=1)
    min_recalls: int = Field(default=3, ge=1)
    min_queries: int = Field(default=3, ge=1)
    min_days: int = Field(default=2, ge=1)
    max_entry_tokens: int = Field(default=160, ge=10)
    max_model_calls: int = Field(default=10, ge=0)
    max_tokens: int = Field(default=20_000, ge=100)  # prompt + answer tokens of one run
    max_drop_fraction: float = Field(default=0.25, ge=0, le=1)
    lookback_days: int = Field(default=30, ge=1)  # daily logs older than this are not staged
    lease_s: float = Field(default=1800.0, gt=0)


@dataclass(frozen=True)
class Candidate:
    key: str  # hash of the normalised text
    path: str
    start_line: int
    end_line: int
    text: str
    day: str | None
    project: str | None = None  # the entry's project tag: kept on what is promoted

    @property
    def source(self) -> str:
        return f"{self.path}#L{self.start_line}"


@dataclass
class Reinforced:
    candidate: Candidate
    recalls: int = 0
    queries: int = 0
    days: int = 0
    score: float = 0.0
    theme: str = ""
    failed: list[str] = field(default_factory=list)  # why the gate refused it, if it did

    @property
    def passed(self) -> bool:
        return not self.failed


# ---- Light ------------------------------------------------------------------------------------


def _normalise(text: str) -> str:
    return " ".join(_COMMENT.sub("", text).lower().lstrip("-*+ ").split())


def log_entries(text: str) -> list[tuple[int, int, str]]:
    """(first line, last line, text) of each bullet or paragraph; blanks and headings split."""
    out: list[tuple[int, int, str]] = []
    start, buf = 0, list[str]()
    for n, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        bullet = bool(re.match(r"^([-*+]|\d+\.)\s", s))
        if not s or s.startswith("#") or bullet or (s.startswith("<!--") and s.endswith("-->")):
            if buf:
                out.append((start, start + len(buf) - 1, "\n".join(buf)))
            buf = []
            if not bullet:
                continue
        if not buf:
            start = n
        buf.append(line)
    if buf:
        out.append((start, start + len(buf) - 1, "\n".join(buf)))
    return out


def stage_candidates(
    db: Database, workspace: Path, *, today: str, lookback_days: int = 30
) -> list[Candidate]:
    """Light: the candidate entries of recent daily logs and session notes, deduplicated."""
    mem_dir = workspace / "memory"
    memory_now = read_workspace_text(workspace, MEMORY_FILE) or ""
    known = {_normalise(line) for line in memory_now.splitlines() if line.strip()}
    seen: set[str] = set()
    out: list[Candidate] = []
    if not mem_dir.is_dir():
        return out
    oldest = _days_before(today, lookback_days)
    tombstones = store_for("LineageRepository", db).tombstones()
    lookups = staging_lookups_for(db)
    for p in sorted(mem_dir.glob("*.md")):
        if p.is_symlink() or not p.is_file():
            continue
        rel = f"memory/{p.name}"
        day = file_day(rel)
        if day is None or day < oldest or day > today:
            continue
        if lookups.indexed_origin(rel) == "untrusted":
            continue  # the index says something in the file is untrusted: none of it is staged
        text = read_workspace_text(workspace, rel)
        if text is None:
            continue
        text = tombstones.redact(rel, text)  # a restored backup cannot bring them back
        if file_origin(text, "agent") == "untrusted":
            continue  # the file as it is now (the index may lag): it counts as its lowest
        automated = lookups.automated_sessions(set(_SESSION_MARK.findall(text)))
        projects = line_projects(text.splitlines())
        for start, end, body in log_entries(text):
            if _UNTRUSTED_MARK.search(body):
                continue
            if automated and automated & set(_SESSION_MARK.findall(body)):
                continue  # appended during a scheduled job, heartbeat or sub-agent turn
            norm = _normalise(body)
            if len(norm) < 12 or norm in known:
                continue
            key = hashlib.sha256(norm.encode("utf-8")).hexdigest()[:16]
            if key in seen:
                continue
            seen.add(key)
            project = next((p for p in projects[start - 1 : end] if p is not None), None)
            out.append(Candidate(key, rel, start, end, body.strip(), day, project))
    return out


def _days_before(day: str, n: int) -> str:
    from datetime import date, timedelta

    return (date.fromisoformat(day) - timedelta(days=n)).isoformat()


# ---- REM --------------------------------------------------------------------------------------


def reinforce(db: Database, candidates: Sequence[Candidate]) -> list[Reinforced]:
    """REM: each candidate with its recall figures (signals overlapping its lines) and theme."""
    signals = signals_for(db)
    signals.flush()
    out: list[Reinforced] = []
    words: dict[str, set[str]] = {}
    for c in candidates:
        found = signals.overlapping(c.path, c.start_line, c.end_line)
        trusted = [s for s in found if s.origin in TRUSTED_FOR_DREAMING]
        r = Reinforced(c)
        r.recalls = len(trusted)
        r.queries = len({s.query_hash for s in trusted})
        r.days = len({s.day for s in trusted})
        r.score = sum(float(s.score) for s in trusted) / len(trusted) if trusted else 0.0
        out.append(r)
        words[c.key] = {w for w in _WORD.findall(c.text.lower()) if w not in _STOP}
    counts = Counter(w for ws in words.values() for w in ws)
    for r in out:
        shared = sorted(
            (w for w in words[r.candidate.key] if counts[w] > 1), key=lambda w: (-counts[w], w)
        )
        r.theme = shared[0] if shared else ""
    return out


# ---- Deep: the gate ---------------------------------------------------------------------------


def gate(items: Sequence[Reinforced], config: DreamingConfig) -> list[Reinforced]:
    """Fill each item's `failed` with the thresholds it misses; return those that pass."""
    for r in items:
        r.failed = []
        if r.score < config.min_score:
            r.failed.append(f"score {r.score:.2f} < {config.min_score:.2f}")
        if r.recalls < config.min_recalls:
            r.failed.append(f"recalls {r.recalls} < {config.min_recalls}")
        if r.queries < config.min_queries:
            r.failed.append(f"distinct queries {r.queries} < {config.min_queries}")
        if r.days < config.min_days:
            r.failed.append(f"days {r.days} < {config.min_days}")
        tokens = estimate_tokens(r.candidate.text)
        if tokens > config.max_entry_tokens:
            r.failed.append(f"tokens {tokens} > {config.max_entry_tokens}")
    ranked = sorted(items, key=lambda r: (-r.score, -r.recalls, r.candidate.key))
    return [r for r in ranked if r.passed]
