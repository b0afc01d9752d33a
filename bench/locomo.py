"""LoCoMo: long two-person conversations, written as dated memory files, and questions on them.

Format (snap-research/LoCoMo, `data/locomo10.json`): a JSON list of samples, each with
`conversation` (`session_N` turn lists and `session_N_date_time` strings) and `qa` (question,
evidence dia_ids, category). The parser is lenient in the ways the data needs: malformed evidence
strings, evidence naming turns that do not exist, date keys without a session.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bench.scoring import Line

CATEGORY_NAMES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

_SESSION_KEY = re.compile(r"^session_(\d+)$")
# "D8:6", "D8:6; D9:17", "D:11:26", "D30:05" -> (8, 6), (9, 17), (11, 26), (30, 5).
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)
# "1:56 pm on 8 May, 2023" (the time part optional, "on" and the comma too).
_DATE_TIME = re.compile(
    r"(?:(\d{1,2}):(\d{2})\s*([ap])\.?\s*m\.?\s*)?(?:on\s+)?(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})",
    re.IGNORECASE,
)
_MONTHS = {
    name: number
    for number, name in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
        start=1,
    )
}


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    caption: str | None  # blip_caption of a shared photo


@dataclass(frozen=True)
class Session:
    number: int
    date_time: str  # as written in the data
    when: datetime
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    question: str
    evidence: tuple[str, ...]  # normalised dia_ids that exist in the conversation
    category: int


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]
    skipped_questions: int  # no evidence, or none of it names an existing turn
    dropped_evidence: int  # evidence ids naming no turn of the conversation


def parse_evidence(raw: object) -> list[str]:
    """Normalised dia_ids ("D30:5") found in one evidence entry, however it is written."""
    if not isinstance(raw, str):
        return []
    return [f"D{int(s)}:{int(t)}" for s, t in _EVIDENCE.findall(raw)]


def parse_session_datetime(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> datetime(2023, 5, 8, 13, 56). Raises ValueError if unreadable."""
    m = _DATE_TIME.search(text)
    month = _MONTHS.get(m.group(5)[:3].lower()) if m else None
    if not m or month is None:
        raise ValueError(f"unreadable LoCoMo session date {text!r}")
    hour, minute = int(m.group(1) or 0), int(m.group(2) or 0)
    if m.group(3):
        hour = hour % 12 + (12 if m.group(3).lower() == "p" else 0)
    return datetime(int(m.group(6)), month, int(m.group(4)), hour, minute)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _load_sessions(conversation: dict, sample_id: str) -> list[Session]:
    sessions: list[Session] = []
    for key, value in conversation.items():
        m = _SESSION_KEY.match(key)
        if not m or not isinstance(value, list):
            continue  # date keys, speaker names, and date keys whose session list is missing
        date_time = conversation.get(f"{key}_date_time")
        if not isinstance(date_time, str):
            print(f"{sample_id}: {key} has no date; skipped", file=sys.stderr)
            continue
        turns = tuple(
            Turn(
                dia_id=parse_evidence(t.get("dia_id"))[0],
                speaker=_one_line(t.get("speaker", "")),
                text=_one_line(t.get("text", "")),
                caption=_one_line(t["blip_caption"]) if t.get("blip_caption") else None,
            )
            for t in value
            if isinstance(t, dict) and parse_evidence(t.get("dia_id"))
        )
        sessions.append(
            Session(int(m.group(1)), date_time, parse_session_datetime(date_time), turns)
        )
    return sorted(sessions, key=lambda s: s.number)


def load_locomo(path: Path) -> list[Conversation]:
    samples = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(samples, dict):  # a single sample
        samples = [samples]
    conversations = []
    for index, sample in enumerate(samples):
        sample_id = str(sample.get("sample_id") or f"sample-{index}")
        sessions = _load_sessions(sample.get("conversation", {}), sample_id)
        known = {turn.dia_id for s in sessions for turn in s.turns}
        questions: list[Question] = []
        skipped = dropped = 0
        for qa in sample.get("qa", []):
            ids = [i for raw in qa.get("evidence") or [] for i in parse_evidence(raw)]
            found = tuple(dict.fromkeys(i for i in ids if i in known))
            dropped += len(ids) - len([i for i in ids if i in known])
            if not found or not qa.get("question"):
                skipped += 1
                continue
            questions.append(Question(str(qa["question"]), found, int(qa.get("category", 0))))
        conversations.append(
            Conversation(sample_id, tuple(sessions), tuple(questions), skipped, dropped)
        )
    return conversations


def turn_line(turn: Turn) -> str:
    line = f"[{turn.dia_id}] {turn.speaker}: {turn.text}"
    return f"{line} [shares a photo: {turn.caption}]" if turn.caption else line


def render_workspace(
    conversation: Conversation,
) -> tuple[dict[str, str], dict[str, Line]]:
    """One `memory/YYYY-MM-DD.md` per session date (sessions of one day appended in order).

    Returns the files (path -> content) and where each turn's line is (dia_id -> location).
    """
    by_day: dict[str, list[Session]] = defaultdict(list)
    for session in conversation.sessions:
        by_day[f"memory/{session.when:%Y-%m-%d}.md"].append(session)
    files: dict[str, str] = {}
    locations: dict[str, Line] = {}
    for path, sessions in sorted(by_day.items()):
        lines: list[str] = []
        for session in sessions:
            if lines:
                lines.append("")
            lines.append(f"## Session {session.number} — {session.date_time}")
            for turn in session.turns:
                lines.append(turn_line(turn))
                locations[turn.dia_id] = Line(path, len(lines), lines[-1])
        files[path] = "\n".join(lines) + "\n"
    return files, locations


def last_session_time(conversation: Conversation) -> datetime:
    return max(s.when for s in conversation.sessions)
