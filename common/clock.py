"""The owner's time zone and the current time, in one place a test can replace.

clock = Clock(owner_zone(settings.agent.timezone, settings.workspace_dir))
clock.now()        # aware, in the owner's zone
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from common.home import config_file_hint
from common.text import strip_comments


def load_timezone(name: str | None) -> tzinfo:
    """The IANA zone `name`, or the machine's local zone when `name` is empty.

    Raises ValueError with advice for an unknown name."""
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(
                f'Unknown time zone "{name}": use an IANA name such as "Europe/Berlin" for '
                f"timezone in [agent] of {config_file_hint()}"
            ) from exc
    local = datetime.now().astimezone().tzinfo
    assert local is not None
    return local


_MENTIONS_ZONE = re.compile(r"time[ -]?zone|\btz\b|时区", re.IGNORECASE)
_ZONE_NAME = re.compile(r"\b(UTC|GMT|[A-Z][A-Za-z_]+(?:/[A-Za-z0-9_+-]+){1,2})\b")
_SUPERSEDED = re.compile(r"status:\s*superseded", re.IGNORECASE)


def zone_from_user_md(workspace: Path) -> str | None:
    """The IANA zone USER.md gives the owner ("- Time zone: Europe/Berlin"), or None.

    Read from the last line that mentions a time zone and names a real one; comments (the
    template's example) and entries marked `status: superseded` (on the line or on the marker
    line right above it) do not count. An unreadable USER.md counts as none."""
    try:
        text = (workspace / "USER.md").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = None
    previous = ""
    for line in text.splitlines():
        superseded = _SUPERSEDED.search(line) or (
            not strip_comments(previous).strip() and _SUPERSEDED.search(previous)
        )
        body = strip_comments(line)
        if body.strip():
            previous = line
        elif line.strip():
            previous = line  # a marker-only line: it describes the entry below
            continue
        if superseded or not _MENTIONS_ZONE.search(body):
            continue
        for m in _ZONE_NAME.finditer(body):
            try:
                ZoneInfo(m.group(1))
            except (ZoneInfoNotFoundError, ValueError):
                continue
            found = m.group(1)
            break
    return found


def owner_zone(configured: str | None, workspace: Path) -> tzinfo:
    """The owner's time zone: `[agent] timezone` (`configured`), else the one USER.md in
    `workspace` gives, else the machine's. Raises ValueError with advice for an unknown
    configured name."""
    return load_timezone(configured or zone_from_user_md(workspace))


def iana_name(tz: tzinfo) -> str | None:
    """The IANA name of `tz` ("Europe/Berlin"), or None for a zone without one (the machine's
    local zone read from the system clock)."""
    key = getattr(tz, "key", None)
    return key if isinstance(key, str) else None


@dataclass(frozen=True)
class Clock:
    tz: tzinfo = field(default_factory=lambda: load_timezone(None))
    utcnow: Callable[[], datetime] | None = None  # tests pin the time; returns an aware datetime

    def now(self) -> datetime:
        """The current time in the owner's zone."""
        current = self.utcnow() if self.utcnow else datetime.now().astimezone()
        return current.astimezone(self.tz)

    @property
    def zone_name(self) -> str:
        return iana_name(self.tz) or self.now().tzname() or "local time"
