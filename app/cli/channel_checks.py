"""`pinch doctor`'s channel checks: one per channel whose token is set (getMe / auth.test).

`app/cli/doctor.py` imports this module when it exists (see `plugin_checks`); the adapters are built
the way `pinch gateway` builds them, but not started, so a running gateway is not disturbed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.cli.doctor import Check, CheckResult, channel_check
from app.wiring import build_channels

if TYPE_CHECKING:
    from app.config import Settings


def channel_checks(settings: Settings) -> list[Check]:
    notes: list[str] = []
    channels = build_channels(settings, notes.append)
    checks = [channel_check(channel) for channel in channels.values()]
    for note in notes:  # a channel whose token is set but whose adapter could not be built
        if "no token" not in note:
            checks.append(_failed(note))
    return checks


def _failed(note: str) -> Check:
    name, _, detail = note.partition(": ")

    def check(settings: Settings) -> CheckResult:
        return CheckResult(name, False, detail)

    check.__name__ = name
    return check
