"""The gateway log's tail for the /health page: a logging handler keeping the last lines in memory,
each redacted (common/redact.py, plus the channel tokens config.toml holds) before it is kept.

The gateway logs to its standard error (and Docker keeps that); nothing is written to a file, so
the page reads the same records from this ring instead: what was logged since the page's server
started, at most `capacity` lines.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

from app.channel_registry import channel_settings
from app.logging_setup import add_redacted_handler
from common.redact import redact

TAIL_LINES = 500


class LogTail(logging.Handler):
    """The last `capacity` log lines, formatted and redacted."""

    def __init__(self, capacity: int = TAIL_LINES, secrets: tuple[str, ...] = ()) -> None:
        super().__init__(level=logging.INFO)
        self._lines: deque[str] = deque(maxlen=capacity)
        self._secrets = secrets
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = redact(self.format(record), self._secrets)  # the filter did; once more
        except Exception:
            self.handleError(record)
            return
        with self._guard:
            self._lines.append(line)

    def tail(self, n: int = 200) -> list[str]:
        """The last `n` lines, oldest first."""
        with self._guard:
            return list(self._lines)[-n:]


def config_secrets(settings: Any) -> tuple[str, ...]:
    """The channel tokens in the settings (config.toml too), which the environment scan misses."""
    found = []
    for section in channel_settings(settings).values():
        for value in section.__dict__.values():
            secret = getattr(value, "get_secret_value", None)
            if secret is not None:
                found.append(str(secret()))
    return tuple(found)


def install_log_tail(settings: Any) -> LogTail:
    """A `LogTail` on the root logger (Pinch's format, redacted like every handler)."""
    secrets = config_secrets(settings)
    handler = LogTail(secrets=secrets)
    add_redacted_handler(handler, secrets)
    return handler
