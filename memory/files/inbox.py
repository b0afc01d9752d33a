"""The inbox: files that came with messages (photos, documents, voice notes), saved in the
workspace where the agent can read them.

    inbox = Inbox(workspace, tz=clock.tz)
    rel = inbox.save("7-Q3 report.pdf", data, received_at)   # "inbox/2026-12-01/7-Q3_report.pdf"

A file goes to `<workspace>/inbox/YYYY-MM-DD/<name>`, the day being the day it was received in
the owner's time zone. Every name passes one sanitiser (`safe_file_name`): it can't leave its
folder, hide (leading dot) or exceed what a file system takes. Folders are created 0700 and
files 0600 whatever the umask, and a file appears whole or not at all (written beside, then
renamed). Channels reach this class through `channels.base.InboxWriter`; they never import it.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from datetime import datetime, tzinfo
from pathlib import Path

from common.private_files import PRIVATE_FILE_MODE, make_private_dirs

INBOX_FOLDER = "inbox"
MAX_NAME_CHARS = 100
_MAX_NAME_BYTES = 200  # below the usual 255-byte limit, leaving room for a temporary suffix
_UNSAFE = re.compile(r"[^\w.\-]+")


def safe_file_name(name: str) -> str:
    """`name` as a file name that stays in its folder: every run of characters other than
    letters, digits, `_`, `.` and `-` becomes "_" (so "/" and ".." can't climb out), leading
    and trailing dots, underscores and dashes go, and a name longer than MAX_NAME_CHARS
    characters (or 200 bytes) is shortened before its extension. Never empty ("file")."""
    cleaned = _UNSAFE.sub("_", name).strip("._-") or "file"
    stem, dot, ext = cleaned.rpartition(".")
    if not dot or not stem or len(ext) > 10:
        stem, ext = cleaned, ""
    suffix = f".{ext}" if ext else ""
    stem = stem[: MAX_NAME_CHARS - len(suffix)]
    while stem and len((stem + suffix).encode()) > _MAX_NAME_BYTES:
        stem = stem[:-1]
    return (stem.rstrip("._-") or "file") + suffix


class Inbox:
    """Saves received files under `<workspace>/inbox/`, in folders dated in `tz` (default: the
    machine's zone). Satisfies `channels.base.InboxWriter`."""

    def __init__(self, workspace: Path, *, tz: tzinfo | None = None) -> None:
        self.workspace = workspace
        self.tz = tz

    def save(self, name: str, data: bytes, received_at: datetime) -> str:
        """Store `data` as `safe_file_name(name)` in the folder of `received_at`'s day (an
        aware datetime; a naive one is taken as the machine's local time), replacing a file of
        that name. Returns the workspace-relative path, '/'-separated. Raises OSError when the
        disk refuses (nothing is left behind then)."""
        day = received_at.astimezone(self.tz).strftime("%Y-%m-%d")
        stored = safe_file_name(name)
        self._write(self.workspace / INBOX_FOLDER / day, stored, data)
        return f"{INBOX_FOLDER}/{day}/{stored}"

    def save_derived(self, original: str, suffix: str, data: bytes) -> str:
        """Store `data` beside the inbox file `original` (workspace-relative, as `save` returned
        it) under its name with `suffix` added: "inbox/D/photo-1.jpg" with ".model.jpg" gives
        "inbox/D/photo-1.model.jpg" (the downscaled copy a model is sent). Returns its path."""
        parts = original.split("/")
        if len(parts) != 3 or parts[0] != INBOX_FOLDER or ".." in parts:
            raise ValueError(f"{original!r} is not a file of the inbox")
        stem = parts[2].rsplit(".", 1)[0] if "." in parts[2] else parts[2]
        stored = safe_file_name(stem + suffix)
        self._write(self.workspace / INBOX_FOLDER / parts[1], stored, data)
        return f"{INBOX_FOLDER}/{parts[1]}/{stored}"

    @staticmethod
    def _write(folder: Path, stored: str, data: bytes) -> None:
        make_private_dirs(folder)
        fd, tmp = tempfile.mkstemp(prefix=".inbox-", suffix=".part", dir=folder)
        try:
            with os.fdopen(fd, "wb") as out:
                os.fchmod(out.fileno(), PRIVATE_FILE_MODE)
                out.write(data)
            os.replace(tmp, folder / stored)  # a link of that name is replaced, never followed
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
