"""The session-memory hook: on /new and /reset, the ending session becomes a Markdown note.

The last 15 user/assistant messages (slash commands filtered out first, then the 15 taken) go to
`memory/YYYY-MM-DD-<slug>.md`, where the slug is one or two words the model picks — or the time
as HHMM when the model fails or takes longer than the timeout. The writer never overwrites an
existing note and re-indexes memory after writing.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from datetime import datetime

from agent.history import sender_label
from agent.model.factory import ModelClient
from agent.prompts import render
from agent.types import Message, ModelRequest
from common.clock import Clock
from memory.files.writes import WorkspaceWriter, escape_markup
from memory.store.sessions import Session, SessionStore, TranscriptEvent

log = logging.getLogger(__name__)

NOTE_MESSAGES = 15
SLUG_TRANSCRIPT_CHARS = 3_000


@dataclass(frozen=True)
class NoteMessage:
    role: str  # "Owner" | "Assistant"
    text: str
    time: str  # HH:MM in the owner's zone


def note_messages(
    events: list[TranscriptEvent], clock: Clock, limit: int = NOTE_MESSAGES
) -> list[NoteMessage]:
    """The last `limit` user/assistant messages with text; slash commands dropped before slicing."""
    picked = []
    for event in events:
        text = str(event.content.get("text") or "").strip()
        if event.kind not in ("user", "assistant") or not text:
            continue
        if event.kind == "user" and text.startswith("/"):
            continue
        when = datetime.fromtimestamp(event.created_at, clock.tz).strftime("%H:%M")
        role = "Assistant"
        if event.kind == "user":  # an automation's message is not the owner's word
            role = sender_label(event.content.get("sender")).strip("[]") or "Owner"
        picked.append(NoteMessage(role, escape_markup(text), when))
    return picked[-limit:]


def clean_slug(raw: str) -> str | None:
    """One or two lowercase words joined by a hyphen, or None if the reply had none."""
    words = re.findall(r"[a-z0-9]+", raw.lower())
    return "-".join(words[:2])[:40] or None


async def ask_slug(model: ModelClient, messages: list[NoteMessage], timeout_s: float) -> str | None:
    """The model's name for the conversation, or None when it fails or is too slow."""
    transcript = "\n".join(f"{m.role}: {m.text}" for m in messages)[-SLUG_TRANSCRIPT_CHARS:]
    request = ModelRequest(
        (Message.user(render("slug", transcript=transcript)),), max_tokens=16, cache_prefix=False
    )
    try:
        response = await asyncio.wait_for(model.complete(request), timeout_s)
    except Exception as exc:  # any failure: the HHMM name will do
        log.info("No session-note name from the model (%s); using the time", exc)
        return None
    return clean_slug(response.text)


async def save_session_note(
    session: Session,
    *,
    store: SessionStore,
    writer: WorkspaceWriter,
    model: ModelClient,
    clock: Clock,
    slug_timeout_s: float = 10.0,
    origin: str | None = None,
    project: str | None = None,
) -> str | None:
    """Write the session's note and return its workspace path, or None if it had no messages.

    With `origin` (e.g. "untrusted" for a session that read web pages), each paragraph is
    marked with it and the session id; with `project` (the session's), the note is tagged."""
    events = await asyncio.to_thread(store.events, session.id)
    messages = note_messages(events, clock)
    if not messages:
        return None
    now = clock.now()
    slug = await ask_slug(model, messages, slug_timeout_s) or now.strftime("%H%M")
    started = datetime.fromtimestamp(session.created_at, clock.tz)
    body = render(
        "session_note",
        started=started.strftime("%Y-%m-%d %H:%M"),
        ended=now.strftime("%H:%M") if started.date() == now.date() else f"{now:%Y-%m-%d %H:%M}",
        session_id=session.id,
        key=str(session.key),
        messages=messages,
    )
    return await asyncio.to_thread(
        lambda: writer.write_session_note(
            now.date(),
            slug,
            body.rstrip() + "\n",
            origin=origin,
            session_id=session.id,
            project=project,
        )
    )
