"""Durations and hours of the day as the owner writes them ("1h30m", "08:00-22:00").

Plain standard library: app/config.py validates `[heartbeat]` with these without importing the
scheduler.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta


class ScheduleError(ValueError):
    """A schedule that cannot be understood; the message says how to write it."""


def human_duration(seconds: float) -> str:
    """'2 h 10 min', '45 s', '3 d 4 h'."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    d, s = divmod(s, 86_400)
    h, s = divmod(s, 3600)
    m = s // 60
    parts = [f"{d} d" if d else "", f"{h} h" if h else "", f"{m} min" if m and not d else ""]
    return " ".join(p for p in parts if p) or "0 s"


_DURATION = re.compile(r"(\d+)(min|d|h|m|s)", re.I)
DURATIONS = re.compile(r"(\d+(min|d|h|m|s))+", re.I)
_UNIT_S = {"d": 86_400, "h": 3600, "m": 60, "min": 60, "s": 1}


def parse_duration(text: str) -> int:
    """Seconds in '30m', '2h', '1h30m', '1d', '90s'."""
    cleaned = text.strip().lower().replace(" ", "")
    parts = _DURATION.findall(cleaned)
    if not parts or "".join(n + u for n, u in parts) != cleaned:
        raise ScheduleError(f'"{text}" is not a duration: write e.g. "20m", "2h", "1h30m", "1d".')
    return sum(int(n) * _UNIT_S[u.lower()] for n, u in parts)


def later_by(now: datetime, seconds: int) -> datetime:
    """`now` plus `seconds`, or a `ScheduleError` when that is past the calendar's end."""
    try:
        return now.astimezone(UTC) + timedelta(seconds=seconds)
    except OverflowError:
        raise ScheduleError(
            f"{human_duration(seconds)} from now is too far in the future: give a time before "
            "the year 9999."
        ) from None


def parse_active_hours(text: str) -> tuple[int, int]:
    """'08:00-22:00' → minutes of the day (start, end)."""
    try:
        a, b = text.split("-")
        ha, ma = (int(x) for x in a.strip().split(":"))
        hb, mb = (int(x) for x in b.strip().split(":"))
        if not (0 <= ha <= 24 and 0 <= hb <= 24 and 0 <= ma < 60 and 0 <= mb < 60):
            raise ValueError
    except ValueError:
        raise ValueError(f'"{text}" is not a range of hours: write e.g. "08:00-22:00".') from None
    return ha * 60 + ma, hb * 60 + mb
