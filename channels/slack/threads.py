"""Threads the Slack bot has joined, remembered across restarts (a small JSON file)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

log = logging.getLogger("pinch.channels.slack")

THREADS_FILE = "slack-threads.json"


class JoinedThreads:
    """Threads the bot has posted in (so follow-ups there need no @mention), kept in a small
    JSON file so they survive a restart. Old entries expire; the file stays small."""

    def __init__(self, path: Path, *, keep: int = 5000, max_age_s: float = 90 * 86400) -> None:
        self.path = path
        self._keep = keep
        self._max_age_s = max_age_s
        self._joined: dict[str, float] = {}
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            self._joined = {str(k): float(v) for k, v in dict(raw).items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError) as e:
            log.warning(
                "Ignoring unreadable %s (%s); thread follow-ups will need a mention", path, e
            )

    def __contains__(self, key: object) -> bool:
        return key in self._joined

    def add(self, channel: str, thread_ts: str) -> None:
        key = f"{channel}:{thread_ts}"
        if key in self._joined:
            return
        now = time.time()
        self._joined[key] = now
        fresh = {k: t for k, t in self._joined.items() if now - t < self._max_age_s}
        self._joined = dict(sorted(fresh.items(), key=lambda kv: kv[1])[-self._keep :])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._joined), encoding="utf-8")
            tmp.replace(self.path)
        except OSError as e:
            log.warning("Could not save %s (%s)", self.path, e)
