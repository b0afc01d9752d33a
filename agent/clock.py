"""The owner's time zone and the current time, in one place a test can replace."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def load_timezone(name: str | None) -> tzinfo:
    """The IANA zone `name`, or the machine's local zone when `name` is empty.

    Raises ValueError with advice for an unknown name."""
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(
                f'Unknown time zone "{name}": use an IANA name such as "Europe/Berlin" for '
                "timezone in [agent] of ~/.pinch/config.toml"
            ) from exc
    local = datetime.now().astimezone().tzinfo
    assert local is not None
    return local


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
        key = getattr(self.tz, "key", None)
        return key if isinstance(key, str) else (self.now().tzname() or "local time")
