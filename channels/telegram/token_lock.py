"""One poller per bot token on this machine: `TokenLock` (an flock named by a hash of the token).

Two processes polling one token make Telegram answer 409 Conflict and messages go missing, so
`TelegramChannel.start` takes this lock first and refuses with advice when another holds it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from pathlib import Path

from channels.base import ChannelError


def machine_lock_dir() -> Path:
    """Where locks shared by every Pinch process of this user on this machine live, whatever
    its PINCH_HOME: $XDG_RUNTIME_DIR/pinch, else <system temp dir>/pinch-<uid>."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "pinch"
    return Path(tempfile.gettempdir()) / f"pinch-{os.getuid()}"


class TokenLock:
    """One poller per bot token on this machine: an exclusive flock on a file named by a hash
    of the token (never the token itself) in `machine_lock_dir()` — so two data directories
    can't both poll one bot — and one in `state_dir` (this data directory's own check, which
    holds even when two processes see different lock directories). Released on `release` or
    exit."""

    def __init__(self, state_dir: Path, token: str, machine_dir: Path | None = None) -> None:
        name = f"telegram-{hashlib.sha256(token.encode()).hexdigest()[:16]}.lock"
        self.path = state_dir / name
        self.machine_path = (machine_dir or machine_lock_dir()) / name
        self._fds: list[int] = []

    def acquire(self) -> None:
        try:
            for path in dict.fromkeys((self.machine_path, self.path)):
                self._fds.append(_lock_file(path))
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        while self._fds:
            fd = self._fds.pop()
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _lock_file(path: Path) -> int:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ChannelError(
            f"Another Pinch process (pid {holder}) is already receiving this Telegram bot's "
            "messages, perhaps with another PINCH_HOME; stop it first — two pollers on one "
            "token make Telegram answer 409 Conflict and messages go missing."
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd
