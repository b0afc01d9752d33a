"""Logging that never shows a secret: every record is redacted (common.redact) before any handler
writes it, its traceback included.

`install_log_redaction()` puts the filter on the handlers that exist (and on Python's last-resort
handler, which prints warnings when nothing is configured, as in `pinch chat`); a process that adds
handlers later (the gateway) adds `RedactingFilter()` to each, or calls this again afterwards.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable

from common.redact import RedactingFilter


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Add a `RedactingFilter` to every handler of `logger` (default: the root logger) and to the
    last-resort handler; calling it twice adds nothing twice."""
    target = logger or logging.getLogger()
    handlers = list(target.handlers)
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    for handler in handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def add_redacted_handler(
    handler: logging.Handler, secrets: Iterable[str | None] = (), level: int = logging.INFO
) -> None:
    """Attach `handler` to the root logger with Pinch's format and a `RedactingFilter` (`secrets`
    beyond the environment), lower the root level to `level` if needed, and redact every other
    handler too."""
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > level:
        root.setLevel(level)
    install_log_redaction()


class RecentLines(logging.Handler):
    """The last `capacity` log lines, formatted and redacted like every other handler's (the
    web page's health view shows a tail of the gateway's log from here)."""

    def __init__(self, capacity: int = 500) -> None:
        super().__init__()
        self._lines: deque[str] = deque(maxlen=capacity)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._lines.append(self.format(record))
        except Exception:
            self.handleError(record)

    def tail(self, count: int = 200) -> list[str]:
        """The newest `count` lines, oldest first."""
        return list(self._lines)[-count:] if count > 0 else []
