"""Who may open the web page: the owner, through a one-time login link or a password.

    url = issue_login_url(settings, store)        # `pinch web login`: single use, 10 minutes
    set_password(home, "…")                       # `pinch web set-password`: scrypt, file 0600
    session = Logins(store, settings.web).redeem(token)   # the gateway: a token → a session id

Tokens and session ids are 32 random bytes (URL-safe base64); the store keeps only their
sha256. The password file holds `scrypt$n$r$p$salt$hash` (hashlib.scrypt), never the password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from common.private_files import PRIVATE_FILE_MODE, make_private_dirs
from memory.store.web_store import WebAuthStore

if TYPE_CHECKING:
    from app.config import Settings
    from app.web.web_config import WebConfig

TOKEN_TTL_S = 600.0  # a login link works once, for 10 minutes
PASSWORD_FILE = "web-password"
MIN_PASSWORD_CHARS = 10
# scrypt's cost: 2^15 × 8 × 128 bytes = 32 MiB and ~0.1 s per guess on a laptop.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1
SCRYPT_MAXMEM = 64 * 1024 * 1024
# Login attempts (wrong password, unknown or used link) allowed per window, from anywhere.
MAX_FAILED_LOGINS = 5
FAILED_LOGIN_WINDOW_S = 60.0


def digest(secret: str) -> str:
    """What the store keeps of a token or a session id."""
    return hashlib.sha256(secret.encode()).hexdigest()


def csrf_token(session_id: str) -> str:
    """The CSRF token of a session: derived from its id (never stored, not derivable from the
    stored hash), so a form from another session is refused."""
    return hmac.new(session_id.encode(), b"pinch-web-csrf", hashlib.sha256).hexdigest()


def _new_secret() -> str:
    return secrets.token_urlsafe(32)


# -- the one-time login link ---------------------------------------------------------------------


def page_address(config: WebConfig) -> str:
    """Where the owner's browser reaches the page (a wildcard bind is reached on loopback)."""
    host = config.host
    if host in ("0.0.0.0", "::", ""):
        host = config.allowed_hosts[0] if config.allowed_hosts else "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{config.port}"


def issue_login_url(
    settings: Settings, store: WebAuthStore, clock: Callable[[], float] = time.time
) -> str:
    """A fresh one-time login URL (the token in it works once, for TOKEN_TTL_S)."""
    token = _new_secret()
    now = clock()
    store.add_token(digest(token), now, now + TOKEN_TTL_S)
    return f"{page_address(settings.web)}/login?token={token}"


class Logins:
    """Turning a login link or the password into a session, and checking sessions."""

    def __init__(
        self,
        store: WebAuthStore,
        config: WebConfig,
        home: Path,
        clock: Callable[[], float] = time.time,
        *,
        session_cookie: str = "pinch_session",
    ) -> None:
        """`session_cookie`: the cookie's name — one per agent, as browsers send a host's
        cookies to every port of it (two agents' pages on one host would log each other out)."""
        self.store = store
        self.config = config
        self.home = home
        self.clock = clock
        self.session_cookie = session_cookie
        self._failures: deque[float] = deque()

    # Rate limit: every failed attempt counts, whatever it tried.
    def limited(self) -> bool:
        now = self.clock()
        while self._failures and self._failures[0] <= now - FAILED_LOGIN_WINDOW_S:
            self._failures.popleft()
        return len(self._failures) >= MAX_FAILED_LOGINS

    def _failed(self) -> None:
        self._failures.append(self.clock())

    def redeem(self, token: str) -> str | None:
        """A new session id for a valid, unused, unexpired `token` (which is then used up)."""
        if not token or not self.store.redeem_token(digest(token), self.clock()):
            self._failed()
            return None
        return self._new_session()

    def password_login(self, password: str) -> str | None:
        """A new session id when `password` is the one set with `pinch web set-password`."""
        stored = read_password_hash(self.home)
        if stored is None or not verify_password(password, stored):
            self._failed()
            return None
        return self._new_session()

    def _new_session(self) -> str:
        session_id = _new_secret()
        now = self.clock()
        self.store.add_session(digest(session_id), now, now + self.config.session_hours * 3600)
        return session_id

    def alive(self, session_id: str) -> bool:
        return bool(session_id) and self.store.session_alive(digest(session_id), self.clock())

    def end(self, session_id: str) -> None:
        self.store.end_session(digest(session_id))

    def prune(self) -> None:
        """Forget expired sessions and old login links."""
        self.store.prune(self.clock())

    def password_set(self) -> bool:
        return read_password_hash(self.home) is not None


# -- the password --------------------------------------------------------------------------------


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    salt = salt or os.urandom(16)
    key = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=SCRYPT_MAXMEM
    )
    encode = base64.b64encode
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${encode(salt).decode()}${encode(key).decode()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, key = stored.strip().split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(key)
        got = hashlib.scrypt(
            password.encode(),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=SCRYPT_MAXMEM,
            dklen=len(expected),
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


def password_path(home: Path) -> Path:
    """`home`: the agent's own folder (`Settings.own_dir`): the installation's home for the
    default agent, <home>/agents/NAME for another, so one agent's password opens no other page."""
    return home / PASSWORD_FILE


def read_password_hash(home: Path) -> str | None:
    try:
        text = password_path(home).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def set_password(home: Path, password: str) -> Path:
    """Store `password`'s scrypt hash in <home>/web-password (0600, written whole); raises
    ValueError with advice for a password too short."""
    if len(password) < MIN_PASSWORD_CHARS:
        raise ValueError(
            f"The password is too short: use at least {MIN_PASSWORD_CHARS} characters "
            "(a few random words are easy to type and hard to guess)."
        )
    make_private_dirs(home)
    path = password_path(home)
    temporary = path.with_name(f".{PASSWORD_FILE}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(hash_password(password) + "\n")
        os.chmod(temporary, PRIVATE_FILE_MODE)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def web_page_wanted(settings: Settings) -> bool:
    """Whether `pinch gateway` serves this agent's web page: the default agent's unless `[web]
    enabled = false`; another agent's only when its own settings give it a port (two pages
    cannot share one; app/config_layers.py keeps [web] the agent's own)."""
    if not settings.web.enabled:
        return False
    return settings.is_default_agent or "port" in settings.web.model_fields_set


def web_port_setting(settings: Settings) -> str:
    """Where this agent's page port is set: the default agent's [web] port and PINCH_WEB__PORT,
    another agent's in its own file and variable."""
    if settings.is_default_agent:
        return "[web] port (PINCH_WEB__PORT)"
    from app.config_layers import agent_file, env_prefix

    name = settings.agent_id
    return f"[web] port in {agent_file(settings.home, name)} ({env_prefix(name)}WEB__PORT)"


def web_port_clashes(agents: Sequence[Settings]) -> list[str]:
    """One line per agent whose page would take a port an earlier agent's page takes (that page
    then cannot start), saying where to give it its own."""
    taken: dict[int, str] = {}
    lines = []
    for settings in agents:
        if not web_page_wanted(settings):
            continue
        port = settings.web.port
        if port in taken:
            lines.append(
                f"{settings.agent_id}: its web page's port {port} is agent {taken[port]}'s too, "
                f"so it cannot start: give it a port of its own, {web_port_setting(settings)}."
            )
        else:
            taken[port] = settings.agent_id
    return lines


def exposure_problem(config: WebConfig, home: Path) -> str | None:
    """Why the page must not start as configured (a non-loopback host without a password),
    worded as advice; None when it may."""
    if not config.enabled or config.loopback or read_password_hash(home) is not None:
        return None
    return (
        f"The web page would listen on {config.host}, reachable from other machines, and no "
        'password is set. Keep [web] host = "127.0.0.1" and reach it through an SSH tunnel '
        f"(ssh -L {config.port}:127.0.0.1:{config.port} HOST) or Tailscale (tailscale serve "
        f"{config.port}); or set a password first with `pinch web set-password`; or turn the "
        "page off with [web] enabled = false (PINCH_WEB__ENABLED=false)."
    )
