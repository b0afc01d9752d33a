"""Forgetting one session: everything attributable to it by lineage, removed, and a tombstone.

    plan = plan_forget(index, "3f2a…")        # or a session key: its latest session
    forget(index, writer, plan)               # `pinch memory forget --session … [--dry-run]`

What goes (each item of the plan says where):
- its session notes (memory/YYYY-MM-DD-<slug>.md recorded when /new wrote them), deleted — unless
  the file changed since, then kept and reported (the owner's edits are never removed);
- the daily-log entries appended during it (marker `<!-- origin: … · session: ID -->` and a
  lineage row with the entry's line count and hash), cut out of the log atomically — unless the
  entry's text changed since, then kept and reported; lines around them are untouched;
- its transcript (events and session row) and its transcript chunks in the index;
- its recall signals (on the entries cut, its notes, its transcript; those below a cut move up)
  and what Dreaming made of its entries — MEMORY.md lines promoted from them, the same lines in
  the preimages, DREAMS.md lines quoting them (memory/lifecycle/forget_dreams.py);
- lineage rows other parts recorded for it: removed (all database changes in one transaction,
  `ForgetStore.erase`, memory/store/forget_store.py);
- then a tombstone (lineage_tombstones): re-indexing skips entries still marked with the
  session and reads a note whose header names it as empty (a restored backup; a note `forget`
  kept stays the owner's), transcript indexing skips it, Dreaming does the same. A second run
  finds the tombstone and changes nothing (`ForgetPlan.forgotten_at`).

What it cannot erase: text the owner edited by hand (kept, reported), backups and copies of the
workspace or database, and what a model provider already received.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from memory.errors import SessionError, WorkspaceError
from memory.files.writes import WorkspaceWriter
from memory.index.chunking import hash_text
from memory.index.index import MemoryIndex
from memory.lifecycle.forget_dreams import (
    Attributed,
    attributed,
    count_signals,
    forget_dreams,
    plan_dreams,
)
from memory.store.backends import store_for
from memory.store.forget_store import KeptNote, SessionErasure, forget_store_for
from memory.store.lineage import (
    KEPT_SESSION,
    LineageRow,
    marked_entries,
    note_session,
    origin_marker,
    strip_marker,
)
from memory.store.recall_signals import Span
from memory.store.sessions import Session, SessionKey, SessionStore
from memory.store.transcripts import transcript_path

FILE_KINDS = frozenset({"session_note", "daily_entry"})
UNRECORDED_NOTE = (
    "written before Pinch recorded lineage, so it may hold your edits: delete it yourself"
)


@dataclass(frozen=True)
class ForgetItem:
    kind: str  # session_note | daily_entry | transcript_events | index_chunks | <lineage kind>
    action: str  # "remove" | "keep"
    path: str | None = None
    lines: str | None = None  # "12-14" for daily entries
    count: int = 1
    reason: str | None = None  # why kept


@dataclass(frozen=True)
class ForgetPlan:
    session_id: str
    session_key: str | None
    items: tuple[ForgetItem, ...] = field(default_factory=tuple)
    done: bool = False  # False: a dry run (nothing changed)
    forgotten_at: float | None = None  # set: forgotten already then (nothing left to do)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def kept(self) -> list[ForgetItem]:
        return [i for i in self.items if i.action == "keep"]


def find_session(store: SessionStore, ref: str) -> Session:
    """The session `ref` names: a session id or a unique start of one (`/status` shows 8
    characters), or a session key (its latest session)."""
    ref = ref.strip().removeprefix("sessions/")
    session = store.get(ref)
    if session is not None:
        return session
    matches = store.with_id_prefix(ref)
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(m.id[: len(ref) + 4] for m in matches)
        raise SessionError(
            f"{ref!r} is the start of {len(matches)} sessions: {shown}. Give more of the id."
        )
    try:
        key = SessionKey.parse(ref)
    except ValueError:
        key = None
    history = store.history(key) if key is not None else []
    if not history:
        raise SessionError(
            f"No session {ref!r} in this agent database. Give a session id (from a search hit "
            "sessions/<id>, or the header of a session note) or a session key such as "
            "main:cli:direct:owner."
        )
    return history[-1]


def plan_forget(index: MemoryIndex, ref: str) -> ForgetPlan:
    """Exactly what `forget` would remove (and keep) for the session `ref`. Changes nothing."""
    store = store_for("SessionStore", index.db)
    lineage = store_for("LineageRepository", index.db)
    sid = ref.strip().removeprefix("sessions/")
    tombstone = lineage.tombstone(sid)
    if tombstone is not None:  # a second run: nothing is left to remove, nothing changes
        return ForgetPlan(sid, tombstone[1], forgotten_at=tombstone[0])
    try:
        session: Session | None = find_session(store, ref)
    except SessionError:
        if not lineage.of_session(ref):
            raise
        session = None  # transcript gone already; lineage (files) remains
    sid = session.id if session else ref
    rows = lineage.of_session(sid)
    items: list[ForgetItem] = []
    items += _plan_notes(index, [r for r in rows if r.kind == "session_note"])
    recorded_notes = {r.path for r in rows if r.kind == "session_note"}
    items += [
        ForgetItem("session_note", "keep", path, reason=UNRECORDED_NOTE)
        for path in _notes_naming(index, sid)
        if path not in recorded_notes
    ]
    for path in dict.fromkeys(r.path for r in rows if r.kind == "daily_entry" and r.path):
        text = _read(index, path)
        if text is not None:
            items += _entries_plan(path, text, sid, _recorded(rows, path))[1]
    texts = {p: _read(index, p) for p in dict.fromkeys(i.path for i in items if i.path)}
    events = len(store.events(sid)) if session else 0
    if events:
        items.append(ForgetItem("transcript_events", "remove", count=events))
    chunks = _chunk_count(index, transcript_path(sid))
    if chunks:
        items.append(ForgetItem("index_chunks", "remove", transcript_path(sid), count=chunks))
    others: dict[str, int] = {}
    for r in rows:
        if r.kind not in FILE_KINDS:
            others[r.kind] = others.get(r.kind, 0) + 1
    items += [ForgetItem(kind, "remove", count=n) for kind, n in sorted(others.items())]
    spans = _spans(sid, items)
    items += [
        ForgetItem("recall_signals", "remove", path, count=n)
        for path, n in count_signals(index.db, spans).items()
    ]
    found = plan_dreams(index.db, index.workspace, _attributed(texts, spans))
    items += [ForgetItem(f.kind, f.action, f.path, f.lines, f.count, f.reason) for f in found]
    key = str(session.key) if session else None
    return ForgetPlan(sid, key, tuple(items))


def forget(index: MemoryIndex, writer: WorkspaceWriter, plan: ForgetPlan) -> ForgetPlan:
    """Carry out `plan` (from `plan_forget`): files rewritten atomically, rows deleted, the
    tombstone recorded, the index synced. Returns what was actually done."""
    if plan.forgotten_at is not None:
        return plan  # forgotten already: nothing to do
    sid = plan.session_id
    lineage = store_for("LineageRepository", index.db)
    rows = lineage.of_session(sid)
    # What Dreaming cited is the text and line numbers before the cut: read them first.
    texts = {r.path: _read(index, r.path) for r in rows if r.kind in FILE_KINDS and r.path}
    outcomes: dict[str, list[ForgetItem]] = {}  # daily log -> entries removed or kept
    cut_lines: dict[str, set[int]] = {}  # daily log -> its lines removed (1-based, before)
    for path in dict.fromkeys(r.path for r in rows if r.kind == "daily_entry" and r.path):
        if _read(index, path) is not None:
            outcomes[path], cut_lines[path] = [], set()
            cutter = _cutter(path, sid, _recorded(rows, path), outcomes[path], cut_lines[path])
            writer.rewrite(path, cutter)
    done: list[ForgetItem] = []
    for item in plan.items:
        if item.kind == "daily_entry":
            done += outcomes.pop(item.path or "", [])
            continue
        if item.kind in _DREAM_KINDS:
            continue  # recomputed below from what was actually removed
        if item.kind == "session_note" and item.action == "remove" and item.path:
            hashes = {r.detail.get("hash") for r in rows if r.kind == "session_note"}
            text = _read(index, item.path)
            if text is not None and hash_text(text) not in hashes:
                done.append(_kept(item, "edited by hand"))
                continue
            if text is not None and not writer.remove_file(item.path, text):
                done.append(_kept(item, "changed while forgetting; run forget again"))
                continue
        done.append(item)
    for items in outcomes.values():  # entries that appeared after the plan was made
        done += items
    spans = _spans(sid, done)
    signals = count_signals(index.db, spans)
    done += [ForgetItem("recall_signals", "remove", p, count=n) for p, n in signals.items()]
    found = forget_dreams(index.db, index.workspace, writer, _attributed(texts, spans))
    done += [ForgetItem(f.kind, f.action, f.path, f.lines, f.count, f.reason) for f in found]
    summary = [
        {k: v for k, v in asdict(i).items() if v is not None and k != "action"}
        for i in done
        if i.action == "remove"
    ]
    # Keep the rows of what stayed (edited by hand): they still say where it came from,
    # and a kept note is the owner's, indexed as such (Tombstones.kept_notes).
    kept = {i.path for i in done if i.action == "keep" and i.path}
    recorded = {r.path for r in rows}
    forget_store_for(index.db).erase(
        SessionErasure(
            sid,
            plan.session_key,
            time.time(),
            summary,
            signal_spans=spans,
            cut_lines={path: frozenset(lines) for path, lines in cut_lines.items()},
            lineage_ids=[r.id for r in rows if r.path is None or r.path not in kept],
            kept_notes=[
                KeptNote(i.path, i.reason)
                for i in done
                if i.kind == "session_note"
                and i.action == "keep"
                and i.path
                and i.path not in recorded
            ],
        )
    )
    if index.active_generation() is not None:
        index.delete_virtual(transcript_path(sid))
    index.sync()
    return ForgetPlan(sid, plan.session_key, tuple(done), done=True)


_DREAM_KINDS = frozenset(
    {"recall_signals", "memory_entry", "dream_preimage", "dream_preimage_db", "dream_report"}
)


def _spans(sid: str, items: list[ForgetItem]) -> list[Span]:
    """What is being removed, as file spans: the entries cut, notes deleted, the transcript."""
    spans = [Span(transcript_path(sid))]
    for i in items:
        if i.action != "remove" or not i.path:
            continue
        if i.kind == "session_note":
            spans.append(Span(i.path))
        elif i.kind == "daily_entry" and i.lines:
            first, _, last = i.lines.partition("-")
            spans.append(Span(i.path, int(first), int(last or first)))
    return spans


def _attributed(texts: dict[str, str | None], spans: list[Span]) -> list[Attributed]:
    """Dreaming's entries (as it cited them) inside `spans`, from the texts before the cut."""
    out: list[Attributed] = []
    for path in dict.fromkeys(s.path for s in spans):
        text = texts.get(path)
        if text is not None:
            out += attributed(path, text, spans)
    return out


def _cutter(
    path: str, sid: str, recorded: dict[str, int], outcome: list[ForgetItem], cut: set[int]
) -> Callable[[str | None], str]:
    """The change `rewrite` applies (maybe more than once); `outcome` and `cut` (the lines
    removed, 1-based) hold the last run's."""

    def change(text: str | None) -> str:
        dropped: set[int] = set()
        new, items = _entries_plan(path, text or "", sid, recorded, dropped)
        outcome[:] = items
        cut.clear()
        cut.update(i + 1 for i in dropped)
        return new

    return change


# ---- files -----------------------------------------------------------------------------------


def _read(index: MemoryIndex, rel: str) -> str | None:
    try:
        return (index.workspace / rel).read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkspaceError(f"Cannot read {rel} ({exc}); nothing was forgotten.") from exc


def _kept(item: ForgetItem, reason: str) -> ForgetItem:
    return ForgetItem(item.kind, "keep", item.path, item.lines, item.count, reason)


def _plan_notes(index: MemoryIndex, rows: list[LineageRow]) -> list[ForgetItem]:
    items = []
    for r in rows:
        if r.path is None:
            continue
        text = _read(index, r.path)
        if text is None:
            continue
        if hash_text(text) == r.detail.get("hash"):
            items.append(ForgetItem("session_note", "remove", r.path))
        else:
            items.append(ForgetItem("session_note", "keep", r.path, reason="edited by hand"))
    return items


def _notes_naming(index: MemoryIndex, sid: str) -> list[str]:
    """Session notes whose header names `sid` (`<!-- session: ID | … -->` on line 2)."""
    found = []
    folder = index.workspace / "memory"
    for note in sorted(folder.glob("????-??-??-*.md")) if folder.is_dir() else []:
        try:
            with note.open(encoding="utf-8", errors="replace") as fh:
                head = "".join(fh.readline() for _ in range(3))
        except OSError:
            continue
        if note_session(head) == sid:
            found.append(note.relative_to(index.workspace).as_posix())
    return found


def _recorded(rows: list[LineageRow], path: str) -> dict[str, int]:
    """hash -> line count of the entries the session appended to `path`."""
    return {
        str(r.detail.get("hash")): int(r.detail.get("lines", 1))
        for r in rows
        if r.kind == "daily_entry" and r.path == path
    }


def _entries_plan(
    path: str, text: str, sid: str, recorded: dict[str, int], dropped: set[int] | None = None
) -> tuple[str, list[ForgetItem]]:
    """`text` without the session's unchanged entries, and what was removed or kept; the
    removed lines' indexes (0-based) are added to `dropped`."""
    nl = "\r\n" if "\r\n" in text else "\n"
    lines = text.replace("\r\n", "\n").split("\n")
    drop: set[int] = set()  # 0-based line indexes
    relabel: dict[int, str] = {}  # 0-based line index -> the marker it gets instead
    items: list[ForgetItem] = []
    for entry in marked_entries("\n".join(lines)):
        if entry.session_id != sid:
            continue
        end = entry.end - 1
        span = None
        for entry_hash, count in recorded.items():
            start = end - count + 1
            if start >= 0 and hash_text("\n".join(lines[start : end + 1])) == entry_hash:
                span = (start, end)
                break
        if span is None:
            # The owner's now: it stays, with its origin, but names no session, so the
            # tombstone does not blank it when the file is indexed again.
            relabel[end] = origin_marker(entry.origin, KEPT_SESSION)
            where = f"{entry.start}-{entry.end}"
            items.append(ForgetItem("daily_entry", "keep", path, where, reason="edited by hand"))
            continue
        drop.update(range(span[0], span[1] + 1))
        items.append(ForgetItem("daily_entry", "remove", path, f"{span[0] + 1}-{span[1] + 1}"))
    for start in [i for i in sorted(drop) if i - 1 not in drop]:
        end = start
        while end + 1 in drop:
            end += 1
        # The blank line that separated the entry from what came before goes with it, unless
        # another paragraph follows the entry (then it still separates the two).
        after_blank = end + 1 >= len(lines) or not lines[end + 1].strip()
        if start > 0 and not lines[start - 1].strip() and after_blank:
            drop.add(start - 1)
    if not drop and not relabel:
        return text, items
    if dropped is not None:
        dropped.update(drop)
    for i, marker in relabel.items():
        lines[i] = f"{strip_marker(lines[i])} {marker}"
    return nl.join(line for i, line in enumerate(lines) if i not in drop), items


def _chunk_count(index: MemoryIndex, path: str) -> int:
    active = index.active_generation()
    if active is None:
        return 0
    return forget_store_for(index.db).chunk_count(active[0], path)
