"""The heartbeat's checklist: HEARTBEAT.md's items, the hours it may speak in, and what its
answer tells the owner."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from app.automations.schedules import zone

NO_REPLY = (
    "NO_REPLY"  # a task's answer that means "nothing to deliver" (already sent, or nothing new)
)
HEARTBEAT_OK = "HEARTBEAT_OK"


def heartbeat_message(reply: str) -> str | None:
    """What a heartbeat's reply tells the owner: None when it is only the all-clear
    (HEARTBEAT_OK, NO_REPLY, or nothing); otherwise the reply without the token, so an answer
    that says "HEARTBEAT_OK — but the invoice is due today" is still delivered."""
    text = reply.strip()
    if text == NO_REPLY:
        return None
    rest = text.replace(HEARTBEAT_OK, " ").strip()
    if not re.search(r"\w", rest):
        return None
    return re.sub(r"^[\s.,:;!—–-]+", "", rest).strip() if HEARTBEAT_OK in text else text


def heartbeat_items(path: Path) -> str:
    """HEARTBEAT.md's checklist lines ('- …', '* …', '1. …'), or "" when it has none."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)  # commented-out items are no items
    items = []
    for line in text.splitlines():
        s = line.strip()
        body = s[2:].strip() if s[:2] in ("- ", "* ", "+ ") else ""
        if not body and s[:1].isdigit() and ". " in s[:4]:
            body = s.split(". ", 1)[1].strip()
        if body and body not in ("[ ]", "[x]"):
            items.append(s)
    return "\n".join(items)


def within_hours(now: datetime, tz: str, hours: tuple[int, int] | None) -> bool:
    if hours is None:
        return True
    local = now.astimezone(zone(tz))
    minute = local.hour * 60 + local.minute
    start, end = hours
    return start <= minute < end if start <= end else (minute >= start or minute < end)
