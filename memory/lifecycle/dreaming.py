"""Dreaming's program side: candidates, reinforcement, the gate, and safe writes of MEMORY.md.

- **Light** (`stage_candidates`): entries (bullets or paragraphs) of daily logs and session notes
  (`memory/YYYY-MM-DD*.md`), deduplicated, minus what MEMORY.md already holds. Never transcripts,
  never a file holding an untrusted line (a file counts as its lowest origin), never an entry
  marked untrusted or system.
- **REM** (`reinforce`): per candidate, the recall signals that overlap its lines — how many,
  how many distinct queries and days, their mean score — and a theme word shared with others.
- **Deep** (`gate`): score, recalls, queries, days and size thresholds; each failure is named.
- Writes (`write_memory`): compare-and-swap on MEMORY.md's content, atomic replace, the
  preimage kept in memory/.dreams/ (a hidden folder: never indexed), a rewrite that would drop
  more than `max_drop_fraction` of prior entries refused (appended instead). `undo_last` puts
  the preimage back, CAS-checked. DREAMS.md (workspace root) is the human-readable diary: it is
  not a memory file (not discovered, not indexed, not a bootstrap file).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from memory.errors import WorkspaceError
from memory.files.atomic import (
    locked_target,
    pinned_target,
    read_workspace_text,
    replace_atomically,
)
from memory.files.workspace import DREAMS_FILE, file_day
from memory.files.writes import escape_markup
from memory.lifecycle.signals import apply_dreaming_migrations, flush_signals
from memory.store.db import Database
from memory.store.lineage import LineageStore, file_origin
from memory.text import estimate_tokens

MEMORY_FILE = "MEMORY.md"
PREIMAGE_DIR = "memory/.dreams"
LEASE_NAME = "dream"
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


def _file_origin(db: Database, path: str) -> str | None:
    rows = db.execute(
        "SELECT s.origin FROM memory_sources s JOIN memory_generations g ON g.id = s.generation "
        "WHERE g.state = 'active' AND s.path = ?",
        (path,),
    )
    return str(rows[0][0]) if rows else None


def _entries(text: str) -> list[tuple[int, int, str]]:
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
    tombstones = LineageStore(db).tombstones()
    for p in sorted(mem_dir.glob("*.md")):
        if p.is_symlink() or not p.is_file():
            continue
        rel = f"memory/{p.name}"
        day = file_day(rel)
        if day is None or day < oldest or day > today:
            continue
        if _file_origin(db, rel) == "untrusted":
            continue  # the index says something in the file is untrusted: none of it is staged
        text = read_workspace_text(workspace, rel)
        if text is None:
            continue
        text = tombstones.redact(rel, text)  # a restored backup cannot bring them back
        if file_origin(text, "agent") == "untrusted":
            continue  # the file as it is now (the index may lag): it counts as its lowest
        automated = _automated_sessions(db, set(_SESSION_MARK.findall(text)))
        for start, end, body in _entries(text):
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
            out.append(Candidate(key, rel, start, end, body.strip(), day))
    return out


def _automated_sessions(db: Database, ids: set[str]) -> set[str]:
    """Those of `ids` that are sessions of scheduled jobs, heartbeats or sub-agents."""
    if not ids:
        return set()
    marks = ",".join("?" for _ in ids)
    rows = db.execute(
        f"SELECT id FROM sessions WHERE id IN ({marks}) AND (channel IN ('automation', "
        "'heartbeat', 'subagent') OR thread_id LIKE 'job:%' OR thread_id LIKE 'subagent:%')",
        tuple(ids),
    )
    return {str(r[0]) for r in rows}


def _days_before(day: str, n: int) -> str:
    from datetime import date, timedelta

    return (date.fromisoformat(day) - timedelta(days=n)).isoformat()


# ---- REM --------------------------------------------------------------------------------------


def reinforce(db: Database, candidates: Sequence[Candidate]) -> list[Reinforced]:
    """REM: each candidate with its recall figures (signals overlapping its lines) and theme."""
    flush_signals(db)
    out: list[Reinforced] = []
    words: dict[str, set[str]] = {}
    for c in candidates:
        rows = db.execute(
            "SELECT query_hash, day, score, origin FROM recall_signals "
            "WHERE path = ? AND start_line <= ? AND end_line >= ?",
            (c.path, c.end_line, c.start_line),
        )
        trusted = [r for r in rows if r[3] in TRUSTED_FOR_DREAMING]
        r = Reinforced(c)
        r.recalls = len(trusted)
        r.queries = len({q for q, *_ in trusted})
        r.days = len({d for _, d, *_ in trusted})
        r.score = sum(float(x[2]) for x in trusted) / len(trusted) if trusted else 0.0
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


# ---- MEMORY.md entries and the new text -------------------------------------------------------

Action = Literal["added", "merged", "superseded"]


@dataclass(frozen=True)
class Decision:
    item: Reinforced
    action: Action
    target: int | None = None  # index into `memory_entries(...)` for merged / superseded


def memory_entries(text: str) -> list[tuple[int, str]]:
    """(line index, line) of each entry of MEMORY.md: its bullet lines."""
    return [
        (i, line)
        for i, line in enumerate(text.splitlines())
        if re.match(r"^\s*([-*+]|\d+\.)\s", line)
    ]


def entry_line(c: Candidate) -> str:
    """The one line the program writes for a candidate, citing where it came from."""
    body = " ".join(escape_markup(c.text).split()).lstrip("-*+ ")
    return f"- {body} <!-- source: {c.source} -->"


def build_rewrite(before: str, decisions: Sequence[Decision]) -> tuple[str, int]:
    """MEMORY.md after `decisions`; returns (text, prior entries dropped)."""
    lines = before.splitlines()
    entries = memory_entries(before)
    added: list[str] = []
    dropped = 0
    for d in decisions:
        new = entry_line(d.item.candidate)
        if d.action == "added" or d.target is None or not 0 <= d.target < len(entries):
            added.append(new)
            continue
        at = entries[d.target][0]
        if d.action == "merged":
            lines[at] = f"{lines[at]} <!-- source: {d.item.candidate.source} -->"
        else:
            lines[at] = new
            dropped += 1
    return _with_appended("\n".join(lines) + ("\n" if lines else ""), added), dropped


def build_append(before: str, decisions: Sequence[Decision]) -> str:
    """MEMORY.md with every decided candidate appended and nothing else changed."""
    return _with_appended(before, [entry_line(d.item.candidate) for d in decisions])


def _with_appended(text: str, new_lines: Sequence[str]) -> str:
    if not new_lines:
        return text
    if not text.strip():
        text = "# MEMORY.md\n"
    if not text.endswith("\n"):
        text += "\n"
    heading = "## Consolidated by dreaming"
    if heading not in text:
        text += f"\n{heading}\n\n"
    return text + "".join(f"{line}\n" for line in new_lines)


# ---- safe writes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteResult:
    mode: Literal["rewrite", "append", "none"]
    preimage: str | None
    pre_hash: str
    post_hash: str
    note: str = ""  # why a rewrite became an append
    preimage_text: str = ""


def content_hash(text: str | None) -> str:
    return hashlib.sha256((text or "").encode("utf-8")).hexdigest()


def write_memory(
    workspace: Path,
    decisions: Sequence[Decision],
    *,
    before: str | None,
    config: DreamingConfig,
    budget_chars: int,
    now: datetime,
    before_write: Callable[[], None] | None = None,
) -> WriteResult:
    """Write `decisions` into MEMORY.md read as `before`: a rewrite when it keeps ≥ 75 % of the
    prior entries and the file has not changed since it was read, else an append to what is on
    disk now. The preimage is saved first. `before_write` runs just before the swap (tests)."""
    pre = before or ""
    note = ""
    text, dropped = build_rewrite(pre, decisions)
    prior = len(memory_entries(pre))
    mode: Literal["rewrite", "append"] = "rewrite"
    if prior and dropped / prior > config.max_drop_fraction:
        note = f"a rewrite would drop {dropped} of {prior} entries: appended instead"
        mode, text = "append", build_append(pre, decisions)
    elif not any(d.action != "added" for d in decisions):
        mode = "append"
    if len(text) > budget_chars:
        raise WorkspaceError(f"MEMORY.md would exceed its budget of {budget_chars} characters.")
    preimage = _save_preimage(workspace, pre, now)
    target = workspace / MEMORY_FILE
    with locked_target(workspace, target) as pinned:
        if before_write is not None:
            before_write()
        if replace_atomically(pinned, text.encode("utf-8"), check=True, expect=before):
            return WriteResult(mode, preimage, content_hash(pre), content_hash(text), note, pre)
        # Someone edited MEMORY.md since we read it: keep their text, add ours at the end.
        for _ in range(5):
            current = read_workspace_text(workspace, MEMORY_FILE)
            preimage = _save_preimage(workspace, current or "", now)
            appended = build_append(current or "", decisions)
            if replace_atomically(pinned, appended.encode("utf-8"), check=True, expect=current):
                note = "MEMORY.md changed during the dream: appended instead of rewriting"
                return WriteResult(
                    "append",
                    preimage,
                    content_hash(current),
                    content_hash(appended),
                    note,
                    current or "",
                )
    raise WorkspaceError("MEMORY.md kept changing during the dream; nothing was written.")


def check_writable(workspace: Path) -> None:
    """Raise WorkspaceError unless a dream can write everything it writes: MEMORY.md and
    DREAMS.md readable as UTF-8 (each is rewritten from what it holds) and their folders, and
    that of the preimages, writable (an atomic replace writes beside the file). Checked before
    MEMORY.md changes, so a run never stops half-way: rewritten, but no report."""
    try:
        for rel in (MEMORY_FILE, DREAMS_FILE):
            read_workspace_text(workspace, rel)
        for folder in (workspace, _nearest_existing(workspace / PREIMAGE_DIR)):
            if not os.access(folder, os.W_OK | os.X_OK):
                raise WorkspaceError(
                    f"{folder} is not writable for this user: let Pinch write there (chmod u+w)."
                )
    except WorkspaceError as exc:
        raise WorkspaceError(f"{exc} Nothing was written: MEMORY.md is unchanged.") from exc


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _save_preimage(workspace: Path, text: str, now: datetime) -> str:
    stamp = now.strftime("%Y%m%dT%H%M%S") + f"-{uuid.uuid4().hex[:6]}"
    rel = f"{PREIMAGE_DIR}/MEMORY-{stamp}.md"
    target = workspace / rel
    with pinned_target(workspace, target) as pinned:
        replace_atomically(pinned, text.encode("utf-8"))
    return rel


def append_diary(workspace: Path, text: str) -> None:
    """Append a report to DREAMS.md (a diary for the owner; never indexed nor loaded)."""
    target = workspace / DREAMS_FILE
    with locked_target(workspace, target) as pinned:
        for _ in range(5):
            current = read_workspace_text(workspace, DREAMS_FILE)
            head = current if current else "# DREAMS.md\n\nWhat dreaming did, night by night.\n"
            new = head.rstrip("\n") + "\n\n" + text.strip("\n") + "\n"
            if replace_atomically(pinned, new.encode("utf-8"), check=True, expect=current):
                return


# ---- runs, the lease, undo --------------------------------------------------------------------


class DreamBusyError(WorkspaceError):
    """Another dream is running."""


def acquire_lease(db: Database, *, lease_s: float, now: float | None = None) -> str:
    """Take the dream lease or raise DreamBusyError; returns the holder id to release with."""
    apply_dreaming_migrations(db)
    holder = uuid.uuid4().hex
    at = time.time() if now is None else now
    with db.transaction() as conn:
        row = conn.execute(
            "SELECT expires_at FROM dream_lease WHERE name = ?", (LEASE_NAME,)
        ).fetchone()
        if row and float(row[0]) > at:
            raise DreamBusyError(
                "A dream is already running (started by another process or the nightly job); "
                "wait for it to finish."
            )
        conn.execute(
            "INSERT OR REPLACE INTO dream_lease(name, holder, expires_at) VALUES (?, ?, ?)",
            (LEASE_NAME, holder, at + lease_s),
        )
    return holder


def release_lease(db: Database, holder: str) -> None:
    with db.transaction() as conn:
        conn.execute("DELETE FROM dream_lease WHERE name = ? AND holder = ?", (LEASE_NAME, holder))


def start_run(db: Database, phase: str, *, started_at: float | None = None) -> int:
    at = time.time() if started_at is None else started_at
    with db.transaction() as conn:
        cur = conn.execute("INSERT INTO dream_runs(started_at, phase) VALUES (?, ?)", (at, phase))
        return int(cur.lastrowid)


def finish_run(
    db: Database,
    run_id: int,
    *,
    promoted: int,
    model_calls: int,
    tokens: int,
    write: WriteResult | None,
    outcome: str = "",
) -> None:
    with db.transaction() as conn:
        conn.execute(
            "UPDATE dream_runs SET finished_at = ?, promoted = ?, model_calls = ?, tokens = ?, "
            "mode = ?, preimage = ?, preimage_text = ?, pre_hash = ?, post_hash = ?, "
            "outcome = ? WHERE id = ?",
            (
                time.time(),
                promoted,
                model_calls,
                tokens,
                write.mode if write else None,
                write.preimage if write else None,
                write.preimage_text if write else None,
                write.pre_hash if write else None,
                write.post_hash if write else None,
                outcome,
                run_id,
            ),
        )


def record_failed_run(db: Database, phase: str, reason: str) -> None:
    """Record a run that could not happen (the nightly job's model failed, say), so that
    `pinch memory status` shows it; nothing else is kept of it."""
    apply_dreaming_migrations(db)
    at = time.time()
    with db.transaction() as conn:
        conn.execute(
            "INSERT INTO dream_runs(started_at, finished_at, phase, outcome) VALUES (?, ?, ?, ?)",
            (at, at, phase, f"failed: {reason}"),
        )


@dataclass(frozen=True)
class LastDream:
    run_id: int
    started_at: float
    outcome: str  # "promoted 2 of 7 candidates (append)", "nothing promoted: …", "failed: …"
    undone: bool


def last_dream(db: Database) -> LastDream | None:
    """The latest finished dream (not a dry run), read only: creates no table."""
    tables = {str(r[0]) for r in db.execute("SELECT name FROM sqlite_master")}
    if "dream_runs" not in tables:
        return None
    columns = {str(r[1]) for r in db.execute("PRAGMA table_info(dream_runs)")}
    outcome = "outcome" if "outcome" in columns else "NULL"
    rows = db.execute(
        f"SELECT id, started_at, {outcome}, promoted, undone_at FROM dream_runs "
        "WHERE finished_at IS NOT NULL ORDER BY id DESC LIMIT 1"
    )
    if not rows:
        return None
    run_id, started, text, promoted, undone = rows[0]
    return LastDream(
        int(run_id), float(started), str(text or f"promoted {promoted}"), undone is not None
    )


@dataclass(frozen=True)
class UndoPlan:
    """What `pinch memory dream --undo` would do: put `restored` (the preimage of dream
    `run_id`, saved as `preimage`) back in place of `current`."""

    run_id: int
    preimage: str
    started_at: float
    restored: str
    current: str | None
    post_hash: str

    @property
    def coming_back(self) -> list[str]:
        """Entries of the preimage that MEMORY.md no longer has (superseded by the dream)."""
        return _missing_from(self.restored, self.current or "")

    @property
    def going(self) -> list[str]:
        """Entries of MEMORY.md that the preimage does not have (added by the dream)."""
        return _missing_from(self.current or "", self.restored)

    def lines(self) -> list[str]:
        when = datetime.fromtimestamp(self.started_at).astimezone()
        back, going = self.coming_back, self.going
        return [
            f"Would restore MEMORY.md from {self.preimage} (the copy saved by dream "
            f"#{self.run_id} of {when:%Y-%m-%d %H:%M}):",
            f"{_entries_count(len(going))} would go:",
            *(f"  {line}" for line in going),
            f"{_entries_count(len(back))} would come back:",
            *(f"  {line}" for line in back),
            "Nothing was changed (dry run).",
        ]


def _entries_count(n: int) -> str:
    return f"{n} entry" if n == 1 else f"{n} entries"


def _missing_from(text: str, other: str) -> list[str]:
    """Entries of `text` that `other` lacks (counted: a duplicate line counts twice)."""
    left = Counter(line.strip() for _, line in memory_entries(other))
    out = []
    for _, line in memory_entries(text):
        if left[line.strip()]:
            left[line.strip()] -= 1
        else:
            out.append(line.strip())
    return out


def plan_undo(db: Database, workspace: Path) -> UndoPlan:
    """The undo of the last dream that wrote MEMORY.md, not yet done.

    Raises WorkspaceError when there is none, or when MEMORY.md was edited since that dream
    wrote it (undoing would lose the edit)."""
    if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'dream_runs'"):
        raise WorkspaceError("There is no dream to undo.")  # never dreamed: create nothing
    apply_dreaming_migrations(db)
    rows = db.execute(
        "SELECT id, preimage, post_hash, preimage_text, started_at FROM dream_runs "
        "WHERE preimage_text IS NOT NULL AND undone_at IS NULL ORDER BY id DESC LIMIT 1"
    )
    if not rows:
        raise WorkspaceError("There is no dream to undo.")
    run_id, preimage, post_hash, old, started = rows[0]
    plan = UndoPlan(
        int(run_id),
        str(preimage),
        float(started),
        str(old),
        read_workspace_text(workspace, MEMORY_FILE),
        str(post_hash),
    )
    _check_unedited(plan, plan.current)
    return plan


def _check_unedited(plan: UndoPlan, current: str | None) -> None:
    if content_hash(current) != plan.post_hash:
        raise WorkspaceError(
            "MEMORY.md was edited after the last dream, so undo would lose those edits; "
            f"nothing was changed. The pre-dream copy is {plan.preimage}."
        )


def undo_last(db: Database, workspace: Path) -> str:
    """Restore MEMORY.md from the last dream's preimage; returns what was done.

    Refused (WorkspaceError) when MEMORY.md changed since that dream wrote it."""
    plan = plan_undo(db, workspace)
    target = workspace / MEMORY_FILE
    with locked_target(workspace, target) as pinned:
        current = read_workspace_text(workspace, MEMORY_FILE)
        _check_unedited(plan, current)
        if not replace_atomically(
            pinned, plan.restored.encode("utf-8"), check=True, expect=current
        ):
            raise WorkspaceError("MEMORY.md changed during the undo; nothing was changed.")
    with db.transaction() as conn:
        conn.execute("UPDATE dream_runs SET undone_at = ? WHERE id = ?", (time.time(), plan.run_id))
    return f"MEMORY.md restored from {plan.preimage} (dream #{plan.run_id} undone)."


def last_runs(db: Database, n: int = 5) -> list[dict[str, Any]]:
    apply_dreaming_migrations(db)
    cols = ["id", "started_at", "finished_at", "phase", "promoted", "model_calls", "tokens", "mode"]
    rows = db.execute(f"SELECT {', '.join(cols)} FROM dream_runs ORDER BY id DESC LIMIT ?", (n,))
    return [dict(zip(cols, r, strict=True)) for r in rows]
