"""The one attachment type: a file that came with a message, from the platform adapter that
saved it, through the gateway's queue, to the agent's request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

AttachmentKind = Literal["photo", "document", "voice", "audio", "video", "sticker", "other"]


@dataclass(frozen=True)
class Attachment:
    """A file that came with a message. `path` is where it was saved (workspace-relative,
    '/'-separated, e.g. "inbox/2026-12-01/photo-123.jpg"), or None with `error` saying why it was
    not saved (too big for the platform's download limit, unsupported, download failed).
    `file_name` is the sender's name for it, when the platform gave one; `duration_s` is the
    length of a recording, when the platform gave it."""

    kind: AttachmentKind
    path: str | None = None
    file_name: str | None = None
    mime_type: str | None = None
    size: int | None = None
    error: str | None = None
    duration_s: float | None = None  # seconds of a voice note or audio file

    def __post_init__(self) -> None:
        if self.path is None:
            return
        parts = self.path.split("/")
        if not self.path or self.path.startswith(("/", "~")) or ".." in parts or "\\" in self.path:
            raise ValueError(f"An attachment path must be workspace-relative, not {self.path!r}.")
