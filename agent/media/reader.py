"""What a turn makes of the files that came with a message, before it is stored.

    reader = MediaReader(workspace=..., inbox=..., voice=VoiceConfig(), media=MediaConfig(),
                         transcriber=create_transcriber(voice), vision=lambda: supports(model))
    prepared = await reader.prepare(text, request.attachments, session_id=session.id)
    prepared.text          # the message, with each voice note's transcript in it
    prepared.attachments   # the stored form: paths and what was read (never image bytes)
    prepared.notices       # one line each for what could not be done, and what to set

- Voice notes and audio are transcribed (the transcript is the owner's words: it is stored,
  searched and remembered; the audio stays in the inbox), within [voice] max_duration_s,
  max_size_mb and timeout_s.
- Photos and image documents are downscaled for the model (images.py) and the copy is saved
  beside the original in the inbox; the stored event names both paths. A model that can't read
  images is said so once per session; an album over [media] max_images is cut with a note.
- PDFs, DOCX and text-like files are read (documents.py) up to [media] document_chars; the text
  is stored with the event and shown to the model as untrusted content with the file's name.

Nothing here loses a message: every failure becomes a note in the text and a notice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agent.media.audio import audio_duration
from agent.media.documents import DocumentError, document_kind, read_document
from agent.media.images import ImageError, is_image, prepare_image
from agent.media.media_config import MediaConfig, VoiceConfig
from agent.media.render import clean_name
from agent.media.transcribe import NOT_CONFIGURED, Transcriber, TranscriptionError
from common.attachment import Attachment

log = logging.getLogger(__name__)

MB = 1024 * 1024
SENT_SUFFIX = ".model"  # the downscaled copy: "photo-1.jpg" → "photo-1.model.jpg"


class DerivedFiles(Protocol):
    """Where the downscaled copy of an image goes (memory.files.inbox.Inbox)."""

    def save_derived(self, original: str, suffix: str, data: bytes) -> str: ...


@dataclass(frozen=True)
class PreparedMessage:
    text: str
    attachments: tuple[dict[str, Any], ...]
    notices: tuple[str, ...] = ()
    outside_text: bool = False  # a document's text came in (outside content)
    timings: dict[str, float] = field(default_factory=dict)  # backend seconds, for benchmarks


def stored_attachment(a: Attachment) -> dict[str, Any]:
    """An attachment's stored form: its path, kind and the sender's name for it."""
    return {k: v for k, v in (("path", a.path), ("kind", a.kind), ("name", a.file_name)) if v}


class MediaReader:
    def __init__(
        self,
        *,
        workspace: Path,
        inbox: DerivedFiles,
        voice: VoiceConfig,
        media: MediaConfig,
        transcriber: Transcriber | None,
        vision: Callable[[], Awaitable[bool]],
    ) -> None:
        self.workspace = workspace
        self.inbox = inbox
        self.voice = voice
        self.media = media
        self.transcriber = transcriber
        self._vision = vision
        self._vision_known: bool | None = None  # the answer, once asked
        self._told_no_vision: set[str] = set()

    @property
    def sends_images(self) -> bool:
        """Whether stored pictures go to the model (False once the model said it can't read
        them: a picture from before a switch to such a model is then named, not sent)."""
        if self.media.vision != "auto":
            return self.media.vision == "on"
        return self._vision_known is not False

    async def supports_images(self) -> bool:
        if self.media.vision != "auto":
            return self.media.vision == "on"
        if self._vision_known is None:
            try:
                self._vision_known = await self._vision()
            except Exception:
                log.warning("Could not tell whether the model reads images", exc_info=True)
                return False
        return self._vision_known

    async def prepare(
        self, text: str, attachments: Sequence[Attachment], *, session_id: str
    ) -> PreparedMessage:
        """The message `text` with what its `attachments` hold (see the module docstring)."""
        lines: list[str] = [text] if text.strip() else []
        stored: list[dict[str, Any]] = []
        notices: list[str] = []
        timings: dict[str, float] = {}
        outside = False
        images = [a for a in attachments if a.path and _is_image(a)]
        vision = await self.supports_images() if images else False
        shown = 0
        for a in attachments:
            if not a.path:
                continue
            entry = stored_attachment(a)
            try:
                if a.kind in ("voice", "audio") or (a.mime_type or "").startswith("audio/"):
                    line, notice, seconds = await self._transcribe(a)
                    entry["transcribed"] = notice is None
                    lines.append(line)
                    if seconds is not None:
                        timings["transcription_s"] = timings.get("transcription_s", 0.0) + seconds
                else:
                    notice, shown, read = await self._look(a, entry, vision, shown, session_id)
                    outside = outside or read
            except Exception as exc:  # one file a library chokes on must not cost the message
                log.warning("Could not read %s", a.path, exc_info=True)
                entry = stored_attachment(a) | {"unreadable": f"failed ({type(exc).__name__})"}
                notice = (
                    f"(I couldn't read {shown_name(a)}: it failed in a way I did not expect "
                    f"({type(exc).__name__}); it is saved at {a.path}.)"
                )
            if notice:
                notices.append(notice)
            stored.append(entry)
        cut = sum(1 for e in stored if str(e.get("not_shown", "")).startswith("over"))
        if cut:
            notices.append(
                f"(You sent {shown + cut} pictures; I looked at the first {shown} "
                f"([media] max_images). The rest are saved in the inbox.)"
            )
        return PreparedMessage("\n".join(lines), tuple(stored), tuple(notices), outside, timings)

    async def _look(
        self, a: Attachment, entry: dict[str, Any], vision: bool, shown: int, session_id: str
    ) -> tuple[str | None, int, bool]:
        """An image or a document into `entry`: the notice, the pictures shown so far, and
        whether a document's text came in."""
        if _is_image(a):
            notice = None
            if not vision:
                entry["not_shown"] = "the model can't read images"
                if session_id not in self._told_no_vision:
                    self._told_no_vision.add(session_id)
                    notice = (
                        "(The model I use can't read images, so I haven't seen your "
                        f"picture; it is saved at {a.path}. If the model can, set [media] "
                        'vision = "on".)'
                    )
            elif shown >= self.media.max_images:
                entry["not_shown"] = f"over [media] max_images = {self.media.max_images}"
            else:
                notice = await self._image(a, entry)
                shown += "image" in entry
            return notice, shown, False
        if document_kind(a.file_name or a.path, a.mime_type):
            notice = await self._document(a, entry)
            return notice, shown, "document" in entry
        return None, shown, False

    # -- voice ----------------------------------------------------------------------------------

    async def _transcribe(self, a: Attachment) -> tuple[str, str | None, float | None]:
        """The line for the message, a notice when it failed, the backend's seconds."""
        label = "voice note" if a.kind == "voice" else f"audio file {shown_name(a)}"
        path = self.workspace / str(a.path)

        def failed(reason: str) -> tuple[str, str, None]:
            note = f"[{label} not transcribed: {reason}; the audio is saved at {a.path}]"
            return note, f"(I couldn't transcribe your {label}: {reason}.)", None

        if self.transcriber is None:
            return failed(NOT_CONFIGURED)
        size = a.size if a.size is not None else _size(path)
        if size is not None and size > self.voice.max_size_mb * MB:
            return failed(
                f"it is {size / MB:.1f} MB, over [voice] max_size_mb = {self.voice.max_size_mb}"
            )
        # The file's own length when it can be told: the length a platform passes on is the
        # sending app's claim (a 2-hour recording may say 3 s).
        measured = await asyncio.to_thread(audio_duration, path)
        claimed = [d for d in (a.duration_s, measured) if d is not None]
        duration = max(claimed) if claimed else None
        if duration is not None and duration > self.voice.max_duration_s:
            return failed(
                f"it is {_clock(duration)} long, over [voice] max_duration_s = "
                f"{self.voice.max_duration_s} ({_clock(self.voice.max_duration_s)})"
            )
        try:
            result = await self.transcriber.transcribe(path)
        except TranscriptionError as exc:
            log.info("Transcription of %s failed: %s", a.path, exc)
            return failed(str(exc))
        length = f", {_clock(duration)}" if duration is not None else ""
        language = f", language {result.language}" if result.language else ""
        words = result.text or "(no speech recognised)"
        return f"[{label}{length}, transcribed{language}]: {words}", None, result.seconds

    # -- images ---------------------------------------------------------------------------------

    async def _image(self, a: Attachment, entry: dict[str, Any]) -> str | None:
        path = self.workspace / str(a.path)
        name = shown_name(a)
        try:
            size = path.stat().st_size
            if size > self.media.max_image_mb * MB:
                raise ImageError(
                    f"it is {size / MB:.1f} MB, over [media] max_image_mb = "
                    f"{self.media.max_image_mb}"
                )
            data = await asyncio.to_thread(path.read_bytes)
            pixels = self.media.max_image_megapixels * 1_000_000
            image = await asyncio.to_thread(prepare_image, data, max_pixels=pixels)
            sent = str(a.path)
            if image.resized:
                sent = await asyncio.to_thread(
                    self.inbox.save_derived, str(a.path), SENT_SUFFIX + image.suffix, image.data
                )
        except (ImageError, OSError) as exc:
            entry["not_shown"] = f"unreadable: {exc}"
            return f"(I couldn't read {name} as an image: {exc}.)"
        entry["image"] = {
            "path": sent,
            "media_type": image.media_type,
            "width": image.width,
            "height": image.height,
        }
        return None

    async def show_image(self, rel: str, data: bytes) -> dict[str, Any]:
        """The stored reference of workspace image `rel` (its bytes: `data`) for a tool result,
        so the picture is sent again when the owner asks about it: the copy a model takes,
        downscaled beside it in the inbox when needed. ImageError when it can't be shown."""
        if not await self.supports_images():
            raise ImageError("the model I use can't read images")
        pixels = self.media.max_image_megapixels * 1_000_000
        image = await asyncio.to_thread(prepare_image, data, max_pixels=pixels)
        sent = rel
        if image.resized:
            if not rel.startswith("inbox/"):
                raise ImageError("only pictures in inbox/ are downscaled; this one is too large")
            sent = await asyncio.to_thread(
                self.inbox.save_derived, rel, SENT_SUFFIX + image.suffix, image.data
            )
        return {
            "path": sent,
            "media_type": image.media_type,
            "width": image.width,
            "height": image.height,
        }

    # -- documents ------------------------------------------------------------------------------

    async def _document(self, a: Attachment, entry: dict[str, Any]) -> str | None:
        path = self.workspace / str(a.path)
        name = shown_name(a)
        started = time.perf_counter()
        try:
            size = path.stat().st_size
            if size > self.media.max_document_mb * MB:
                raise DocumentError(
                    f"{name} is {size / MB:.1f} MB, over [media] max_document_mb = "
                    f"{self.media.max_document_mb}"
                )
            doc = await asyncio.to_thread(
                read_document,
                path,
                name,
                max_chars=self.media.document_chars,
                mime=a.mime_type,
            )
        except (DocumentError, OSError) as exc:
            entry["unreadable"] = str(exc)
            return f"(I couldn't read {name}: {exc}.)"
        log.debug("Read %s in %.3f s", a.path, time.perf_counter() - started)
        if not doc.text:
            entry["unreadable"] = doc.note or "no text"
            return f"(I couldn't read {name}: {doc.note or 'it holds no text'}.)"
        entry["document"] = {
            "text": doc.text,
            "unit": doc.unit,
            "first": doc.first,
            "last": doc.last,
            "total": doc.total,
            "note": doc.note,
        }
        return None


def shown_name(a: Attachment) -> str:
    """The sender's name for a file as it may be shown or quoted: printable characters only (no
    line breaks, no right-to-left overrides that reverse what follows), at most 100."""
    return clean_name(a.file_name or Path(str(a.path)).name)


def _is_image(a: Attachment) -> bool:
    return a.kind == "photo" or (a.kind == "document" and is_image(a.mime_type, a.file_name))


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _clock(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60}:{whole % 60:02d}"
