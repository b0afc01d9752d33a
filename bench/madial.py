"""MADial-Bench: memory events of a few children, and dialogues where one should be recalled.

Format (hejunqing/MADial-Bench): `memory.jsonl` holds one `{"<id>": {"time": "YYYY-MM-DD",
"scene", "emotion", "event"}}` a line; `dialogue_*.jsonl` one dialogue a line with `dialogue`
(lines `<Name>: "text"`, the first `<BOD>`), `test-turn` (index of the turn that should recall a
memory) and `relevant-id` (memory ids, the first the primary one). Files named `.json` that hold
JSON Lines, or one JSON document, are read too.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from bench.scoring import Span

_DAY = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_SPEAKER = re.compile(r"^\s*<[^<>]*>\s*[:：]\s*")
_MARKERS = {"<BOD>", "<EOD>"}
_QUOTES = "\"'“”‘’「」『』"


@dataclass(frozen=True)
class MemoryEvent:
    id: str
    day: date
    scene: str
    emotion: str
    event: str


@dataclass(frozen=True)
class Dialogue:
    number: int  # position in the dialogue files
    query: str
    relevant_ids: tuple[str, ...]  # known memory ids, the primary one first


def _read_records(path: Path) -> list[object]:
    """The JSON values in a file: one document (a list is spread out) or JSON Lines."""
    text = path.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return whole if isinstance(whole, list) else [whole]


def _clean(value: object) -> str:
    return " ".join(str(value or "").split())


def load_memories(path: Path) -> list[MemoryEvent]:
    events: list[MemoryEvent] = []
    for record in _read_records(path):
        if not isinstance(record, dict):
            continue
        for key, fields in record.items():
            if not isinstance(fields, dict):
                continue
            m = _DAY.search(str(fields.get("time", "")))
            if not m:
                print(f"{path}: memory {key} has no date; skipped", file=sys.stderr)
                continue
            day = date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
            events.append(
                MemoryEvent(
                    id=str(key),
                    day=day,
                    scene=_clean(fields.get("scene")),
                    emotion=_clean(fields.get("emotion")),
                    event=_clean(fields.get("event")),
                )
            )
    return events


def dialogue_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("dialogue*.json*") if p.is_file())


def _utterance(line: str) -> str:
    return _SPEAKER.sub("", line.strip()).strip().strip(_QUOTES).strip()


def dialogue_query(lines: list[str], test_turn: int, context_turns: int = 4) -> str:
    """The last `context_turns` utterances before the test turn, speaker tags stripped."""
    before = [_utterance(line) for line in lines[:test_turn] if line.strip() not in _MARKERS]
    return " ".join([u for u in before if u][-context_turns:])


def load_dialogues(paths: list[Path], known_ids: set[str]) -> tuple[list[Dialogue], int]:
    """Dialogues whose primary memory exists, and how many were skipped."""
    dialogues: list[Dialogue] = []
    skipped = 0
    number = 0
    for path in paths:
        for record in _read_records(path):
            number += 1
            if not isinstance(record, dict):
                skipped += 1
                continue
            turns = record.get("test-turn")
            turn = min(turns) if isinstance(turns, list) and turns else turns
            lines = record.get("dialogue")
            relevant = [str(i) for i in record.get("relevant-id") or []]
            if (
                not isinstance(turn, int)
                or not isinstance(lines, list)
                or not relevant
                or relevant[0] not in known_ids
            ):
                skipped += 1
                continue
            query = dialogue_query([str(line) for line in lines], turn)
            if not query:
                skipped += 1
                continue
            ids = tuple(i for i in dict.fromkeys(relevant) if i in known_ids)
            dialogues.append(Dialogue(number, query, ids))
    return dialogues, skipped


def render_workspace(events: list[MemoryEvent]) -> tuple[dict[str, str], dict[str, Span]]:
    """One `memory/YYYY-MM-DD.md` per day; each event a `## <scene>` block with its emotion.

    Returns the files (path -> content) and each event's line range (id -> span).
    """
    by_day: dict[str, list[MemoryEvent]] = defaultdict(list)
    for event in events:
        by_day[f"memory/{event.day:%Y-%m-%d}.md"].append(event)
    files: dict[str, str] = {}
    blocks: dict[str, Span] = {}
    for path, day_events in sorted(by_day.items()):
        lines: list[str] = []
        for event in day_events:
            if lines:
                lines.append("")
            start = len(lines) + 1
            lines += [f"## {event.scene or 'Memory'}", event.event, f"Emotion: {event.emotion}"]
            blocks[event.id] = Span(path, start, len(lines))
        files[path] = "\n".join(lines) + "\n"
    return files, blocks
