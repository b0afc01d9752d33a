"""`pinch doctor`'s channel checks: one per channel whose token is set (getMe / auth.test).

`app/cli/doctor.py` runs these after its own checks; the adapters are built the way `pinch gateway`
builds them, but not started, so a running gateway is not disturbed. What only a running adapter
knows (the age of the last completed poll, the last error) comes from the running gateway's
heartbeat file, when there is a live one.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from app.cli.checks import Check, CheckResult, channel_check
from app.gateway.heartbeat import health_problem, heartbeat_dir, read_heartbeat
from app.wiring import build_channels
from channels.base import ChannelHealth

if TYPE_CHECKING:
    from app.config import Settings


def channel_checks(settings: Settings) -> list[Check]:
    notes: list[str] = []
    channels = build_channels(settings, notes.append)
    running, age = _running_gateway(settings)
    checks = [
        _with_running_view(channel_check(channel), running.get(name), age)
        for name, channel in channels.items()
    ]
    for note in notes:  # a channel whose token is set but whose adapter could not be built
        if "no token" not in note:
            checks.append(_failed(note))
    return checks


def _running_gateway(settings: Settings) -> tuple[dict[str, ChannelHealth], float]:
    """Each channel's health as a live gateway last reported it, and how old that report is
    (nothing when no gateway runs)."""
    beat = read_heartbeat(heartbeat_dir(settings))
    if beat is None or health_problem(dataclasses.replace(beat, channels={})) is not None:
        return {}, 0.0
    return dict(beat.channels), max(0.0, time.time() - beat.at)


def _with_running_view(check: Check, running: ChannelHealth | None, age: float) -> Check:
    if running is None:
        return check

    async def with_view(settings: Settings) -> CheckResult:
        result = check(settings)
        own = result if isinstance(result, CheckResult) else await result
        seen = own.detail.split("; ")
        extra = [part for part in running.detail.split("; ") if part and part not in seen]
        if not extra:
            return own
        detail = f"{own.detail}; running gateway ({age:.0f} s ago): {'; '.join(extra)}"
        return CheckResult(own.name, own.ok and running.ok, detail)

    with_view.__name__ = getattr(check, "__name__", "channel")
    return with_view


def _failed(note: str) -> Check:
    name, _, detail = note.partition(": ")

    def check(settings: Settings) -> CheckResult:
        return CheckResult(name, False, detail)

    check.__name__ = name
    return check
