"""What a `pinch doctor` check is: a callable taking the settings and returning a `CheckResult`
(or an awaitable of one), and `channel_check`, which makes one from a channel adapter. Shared by
app/cli/doctor.py and app/cli/channel_checks.py; imports neither."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.config import Settings
    from channels.base import Channel

CHANNEL_CHECK_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str  # one line; never a secret's value

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


Check = Callable[["Settings"], "CheckResult | Awaitable[CheckResult]"]


def channel_check(channel: Channel, *, timeout_s: float = CHANNEL_CHECK_TIMEOUT_S) -> Check:
    """A doctor check from a channel adapter: its `check()` (getMe / auth.test), time-limited."""

    async def check(settings: Settings) -> CheckResult:
        try:
            health = await asyncio.wait_for(channel.check(), timeout_s)
        except TimeoutError:
            return CheckResult(channel.name, False, f"no answer within {timeout_s:.0f} s")
        return CheckResult(channel.name, health.ok, health.detail)

    check.__name__ = channel.name or "channel"
    return check
