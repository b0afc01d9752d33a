"""Logging that never shows a secret: every record is redacted (common.redact) before any handler
writes it, its traceback included.

`install_log_redaction()` puts the filter on the handlers that exist (and on Python's last-resort
handler, which prints warnings when nothing is configured, as in `pinch chat`); a process that adds
handlers later (the gateway) adds `RedactingFilter()` to each, or calls this again afterwards.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from common.redact import redact


class RedactingFilter(logging.Filter):
    """Rewrites a record's message, arguments and traceback with the secrets blanked out;
    `extra` are secrets known to the caller beyond the environment (a token in config.toml)."""

    def __init__(self, extra: Iterable[str | None] = ()) -> None:
        super().__init__()
        self.extra = tuple(s for s in extra if s)

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_pinch_redacted", False):
            return True  # already done by another handler's filter
        try:
            message = record.getMessage()
        except Exception:  # a malformed format string: the handler reports it as usual
            return True
        record.msg, record.args = redact(message, self.extra), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.extra)
            record.exc_info = None  # else a formatter could render the raw traceback again
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.extra)
        record._pinch_redacted = True
        return True


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
