"""The gateway's heartbeat file, `<home>/gateway.heartbeat` (another agent's in its folder): how
`pinch doctor --health` (a container HEALTHCHECK) knows the gateway is alive without talking to
it.

The gateway rewrites the file every 15 s (atomically, mode 0600) with JSON:
`{"pid": 1234, "at": <unix time>, "channels": {"telegram": {"ok": true, "detail": "polling"}}}`
and optionally `"stopping": true` in its last beat. A heartbeat older than `MAX_AGE_S`, from a
process that is gone, marked stopping, or with a channel whose `ok` is false means unhealthy.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from channels.base import ChannelHealth
from common.channel_table import messaging
from memory.store.liveness import pid_alive

if TYPE_CHECKING:
    from app.config import Settings

HEARTBEAT_FILE = "gateway.heartbeat"
MAX_AGE_S = 90.0  # several missed beats at the gateway's 15 s interval


@dataclass(frozen=True)
class Heartbeat:
    pid: int
    at: float  # unix time of the beat
    channels: Mapping[str, ChannelHealth] = field(default_factory=dict)
    stopping: bool = False  # the gateway's last beat, written as it shuts down


def heartbeat_path(home: Path) -> Path:
    return home / HEARTBEAT_FILE


def heartbeat_dir(settings: Settings) -> Path:
    """Where the gateway serving `settings`' agent writes its heartbeat: the Pinch home for the
    installation's default agent (as with one agent), else the agent's folder
    (<home>/agents/NAME), so agents served together never share one file."""
    return settings.own_dir


def write_heartbeat(
    home: Path,
    channels: Mapping[str, ChannelHealth],
    *,
    pid: int | None = None,
    at: float | None = None,
) -> None:
    """Replace the heartbeat file atomically (a reader never sees half a file)."""
    beat = {
        "pid": os.getpid() if pid is None else pid,
        "at": time.time() if at is None else at,
        "channels": {name: {"ok": h.ok, "detail": h.detail} for name, h in channels.items()},
    }
    fd, tmp = tempfile.mkstemp(prefix=".gateway.heartbeat.", dir=home)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(beat, fh)
        os.replace(tmp, heartbeat_path(home))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_heartbeat_file(
    path: Path, channels: Mapping[str, ChannelHealth], *, stopping: bool = False
) -> None:
    """The gateway's beat at `path`: written to a 0600 `<path>.tmp` beside it, then renamed
    (readers never see half). One writer at a time: the tmp file is shared."""
    beat = {
        "pid": os.getpid(),
        "at": time.time(),
        "stopping": stopping,
        "channels": {name: {"ok": h.ok, "detail": h.detail} for name, h in channels.items()},
    }
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(beat))
    os.replace(tmp, path)


def read_heartbeat(home: Path) -> Heartbeat | None:
    """The last heartbeat, or None if there is none or it cannot be parsed."""
    try:
        raw = json.loads(heartbeat_path(home).read_text(encoding="utf-8"))
        channels = {
            str(name): ChannelHealth(bool(c.get("ok")), str(c.get("detail", "")))
            for name, c in dict(raw.get("channels") or {}).items()
        }
        return Heartbeat(
            int(raw["pid"]), float(raw["at"]), channels, bool(raw.get("stopping", False))
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def health_problem(beat: Heartbeat | None, *, now: float | None = None) -> str | None:
    """Why the gateway is unhealthy according to `beat`, or None when it is healthy."""
    if beat is None:
        return "no gateway heartbeat: is `pinch gateway` running?"
    age = (time.time() if now is None else now) - beat.at
    if age > MAX_AGE_S:
        return f"the gateway's last heartbeat is {age:.0f} s old (more than {MAX_AGE_S:.0f} s)"
    if beat.stopping:  # a clean stop leaves this last beat behind: say which case it is
        if not pid_alive(beat.pid):
            return "the gateway has stopped (shut down cleanly): start it with `pinch gateway`"
        return "the gateway is shutting down"
    if not pid_alive(beat.pid):
        return f"the gateway process {beat.pid} is gone"
    down = [  # a messaging channel; the web page not served is reported by doctor, not here
        f"{name}: {h.detail or 'not ok'}"
        for name, h in sorted(beat.channels.items())
        if not h.ok and messaging(name)
    ]
    if down:
        return "channel down: " + "; ".join(down)
    return None
