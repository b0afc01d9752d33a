"""The one redaction of secrets: every error Pinch prints and every log record pass through
`redact` before they reach a screen or a file.

What counts as a secret:
- the value of any environment variable whose name ends in _API_KEY, _KEY, _TOKEN, _SECRET,
  _PASSWORD or _DSN, or that starts with PINCH_ and contains TOKEN (ANTHROPIC_API_KEY,
  OPENAI_API_KEY, PINCH_TELEGRAM__BOT_TOKEN, PINCH_STORE__DSN, …), whatever it looks like;
- `extra` values a caller passes (a key given in code rather than the environment);
- anything shaped like a provider credential, configured or not: `sk-…` / `sk-ant-…` keys,
  Slack `xox…-` / `xapp-` tokens, Telegram bot tokens (`123456:ABC…`), Google `AIza…` keys,
  the value after `Bearer `, and the password in a URL (`postgresql://user:PASSWORD@host`).

Values shorter than 8 characters are not replaced (a variable set to "1" would blank every 1).
`RedactingFilter` does the same to log records (app/logging_setup.py puts it on every handler;
a channel puts one with its token on the loggers of the libraries that log request URLs).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 8

_SECRET_NAME_SUFFIXES = ("_API_KEY", "_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_DSN")
_CREDENTIAL_PATTERNS = re.compile(
    r"|".join(
        [
            r"\bsk-(?:ant-)?[A-Za-z0-9_\-]{12,}",  # Anthropic, OpenAI (sk-proj-…) and look-alikes
            r"\bxox[abposr]-[A-Za-z0-9\-]{8,}",  # Slack bot / user / app-level tokens
            r"\bxapp-[A-Za-z0-9\-]{8,}",
            r"\b\d{6,12}:[A-Za-z0-9_\-]{30,}",  # Telegram bot token
            r"\bAIza[0-9A-Za-z_\-]{30,}",  # Google API key
        ]
    )
)
# A database URL's password: postgresql://user:PASSWORD@host (the user and host stay readable).
# (up to the authority's last '@': a password holding a raw '@' is hidden whole)
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^\s/?#]+(@)", re.IGNORECASE)
_BEARER = re.compile(r"(\bBearer\s+)[A-Za-z0-9._~+/=\-]{8,}", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable called `name` holds a secret."""
    upper = name.upper()
    return upper.endswith(_SECRET_NAME_SUFFIXES) or (
        upper.startswith("PINCH_") and "TOKEN" in upper
    )


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret values in `environ` (default: the process environment), longest first."""
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if is_secret_name(k) and len(v) >= MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)


def redact(text: str, extra: Iterable[str | None] = ()) -> str:
    """`text` with every secret (see the module docstring) replaced by "[redacted]"."""
    values = {v for v in extra if v and len(v) >= MIN_SECRET_CHARS}
    values.update(secret_values())
    for value in sorted(values, key=len, reverse=True):  # a longer secret may contain a shorter
        text = text.replace(value, REDACTED)
    text = _CREDENTIAL_PATTERNS.sub(REDACTED, text)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + m.group(2), text)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


class RedactingFilter(logging.Filter):
    """Rewrites a record's message, arguments and traceback with the secrets blanked out;
    `extra` are secrets known to the caller beyond the environment (a token in config.toml)."""

    def __init__(self, extra: Iterable[str | None] = ()) -> None:
        super().__init__()
        self.extra = tuple(s for s in extra if s)

    def filter(self, record: logging.LogRecord) -> bool:
        done: frozenset[str] | None = getattr(record, "_pinch_redacted", None)
        if done is not None and done.issuperset(self.extra):
            return True  # already done by another filter that knew these secrets
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
        record._pinch_redacted = frozenset(self.extra).union(done or ())
        return True
