"""/sessions: every session by channel and person with its last activity (paginated), its
transcript (escaped; compaction summaries shown as such), and forget — a dry-run preview of what
goes, then the owner confirms — the same as `pinch memory forget --session ID [--dry-run]`.

    GET  /sessions[?channel=C&page=N]   the list, newest activity first
    GET  /sessions/{id}[?from=SEQ]      the transcript, 200 events a page
    GET  /sessions/{id}/forget          what forgetting it would remove and keep (changes nothing)
    POST /sessions/{id}/forget          forget it
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

from aiohttp import web

from app.web.context import WebContext
from app.web.page_support import ago, int_field, notice_of, owner_time
from app.web.render import closed_bidi
from memory.errors import MemoryError_
from memory.lifecycle.forget import ForgetItem, ForgetPlan, forget, plan_forget
from memory.store.backends import store_for
from memory.store.pairing_store import SqlitePairingStore
from memory.store.session_overview import SqliteSessionOverview
from memory.store.sessions import TranscriptEvent
from memory.store.transcripts import EVENT_LABELS, message_text, untrusted_seqs

PAGE_SIZE = 50
EVENTS_PER_PAGE = 200
TOOL_TEXT_CHARS = 2000


def add_routes(app: web.Application, ctx: WebContext) -> None:
    pages = SessionPages(ctx)
    app.router.add_get("/sessions", pages.index)
    app.router.add_get("/sessions/{sid}", pages.transcript)
    app.router.add_get("/sessions/{sid}/forget", pages.preview)
    app.router.add_post("/sessions/{sid}/forget", pages.forget)


@dataclass(frozen=True)
class ShownEvent:
    seq: int
    kind: str
    label: str
    text: str
    markdown: bool  # the assistant's words and compaction summaries are Markdown
    untrusted: bool
    at: str


class SessionPages:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx
        self._overview: SqliteSessionOverview | None = None
        self._pairing: SqlitePairingStore | None = None

    def _views(self) -> SqliteSessionOverview:
        if self._overview is None:  # applies its migration set once, on first use
            self._overview = store_for("SessionOverview", self.ctx.runtime.index.db)
        return self._overview

    async def index(self, request: web.Request) -> web.Response:
        channel = request.query.get("channel") or None
        number = int_field(request.query.get("page"), 1, low=1)
        views = await asyncio.to_thread(self._views)
        page, channels = await asyncio.gather(
            asyncio.to_thread(
                views.page, channel=channel, offset=(number - 1) * PAGE_SIZE, limit=PAGE_SIZE
            ),
            asyncio.to_thread(views.channels),
        )
        pages = max(1, -(-page.total // PAGE_SIZE))
        names = await asyncio.to_thread(self._names)
        now = time.time()
        return await self.ctx.render(
            request,
            "pages/sessions.html",
            page=page,
            number=number,
            pages=pages,
            channel=channel,
            channels=channels,
            names=names,
            notice=notice_of(self.ctx, request),
            when=lambda ts: owner_time(self.ctx, ts),
            age=lambda ts: ago(now - ts),
        )

    def _names(self) -> dict[tuple[str, str], str]:
        """The names people gave when they asked to pair, by (channel, sender id)."""
        if self._pairing is None:
            self._pairing = store_for("PairingStore", self.ctx.runtime.index.db)
        store = self._pairing
        return {(a.channel, a.sender_id): a.sender_name for a in store.approved() if a.sender_name}

    async def transcript(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        store = self.ctx.runtime.store
        session = await asyncio.to_thread(store.get, sid)
        if session is None:
            return await self._missing(request, sid)
        start = int_field(request.query.get("from"), 1, low=1)
        events = await asyncio.to_thread(
            store.events, sid, after_seq=start - 1, limit=EVENTS_PER_PAGE + 1
        )
        every = await asyncio.to_thread(store.events, sid)
        outside = untrusted_seqs(every)
        more = len(events) > EVENTS_PER_PAGE
        shown = [self._shown(e, e.seq in outside) for e in events[:EVENTS_PER_PAGE]]
        return await self.ctx.render(
            request,
            "pages/session.html",
            session=session,
            events=shown,
            total=len(every),
            start=start,
            next_from=start + EVENTS_PER_PAGE if more else None,
            prev_from=max(1, start - EVENTS_PER_PAGE) if start > 1 else None,
            when=lambda ts: owner_time(self.ctx, ts),
        )

    async def preview(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        try:
            plan = await asyncio.to_thread(plan_forget, self.ctx.runtime.index, sid)
        except MemoryError_ as exc:
            return await self._missing(request, sid, str(exc))
        return await self._plan_page(request, plan)

    async def forget(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        index = self.ctx.runtime.index
        writer = self.ctx.runtime.agent.writer

        def carry_out() -> ForgetPlan:  # planned again now: what is there at the confirm
            return forget(index, writer, plan_forget(index, sid))

        try:
            plan = await asyncio.to_thread(carry_out)
        except MemoryError_ as exc:
            return await self._missing(request, sid, str(exc))
        return await self._plan_page(request, plan)

    async def _plan_page(self, request: web.Request, plan: ForgetPlan) -> web.Response:
        return await self.ctx.render(
            request,
            "pages/session_forget.html",
            plan=plan,
            items=[(item, describe(item, plan.done)) for item in plan.items],
            when=lambda ts: owner_time(self.ctx, ts),
        )

    async def _missing(self, request: web.Request, sid: str, why: str = "") -> web.Response:
        message = why or f"No session {sid!r} in this agent database."
        return await self.ctx.render(
            request, "pages/session_missing.html", status=404, message=message
        )

    def _shown(self, event: TranscriptEvent, untrusted: bool) -> ShownEvent:
        c = event.content
        label = EVENT_LABELS.get(event.kind, event.kind)
        markdown = event.kind in ("assistant", "compaction")
        if event.kind in ("user", "assistant", "command", "flush"):
            text = message_text(c.get("text"))
        elif event.kind == "compaction":
            text = message_text(c.get("summary"))
        elif event.kind == "tool_call":
            args = json.dumps(c.get("input") or {}, ensure_ascii=False, indent=1)
            text = f"{c.get('name', '?')} {args}"
        elif event.kind == "tool_result":
            text = message_text(c.get("content"))
            if c.get("is_error"):
                label += " (error)"
        else:
            text = json.dumps(c, ensure_ascii=False)
        if event.kind in ("tool_call", "tool_result") and len(text) > TOOL_TEXT_CHARS:
            text = text[:TOOL_TEXT_CHARS] + " …"
        sender = c.get("sender") if event.kind == "user" else None
        if isinstance(sender, dict) and sender.get("name"):
            label += f" ({closed_bidi(str(sender.get('name')))})"
        return ShownEvent(
            event.seq,
            event.kind,
            label,
            text,
            markdown,
            untrusted,
            owner_time(self.ctx, event.created_at, "%Y-%m-%d %H:%M:%S"),
        )


KIND_WORDS = {
    "transcript_events": "transcript events",
    "index_chunks": "searchable passages of the transcript",
    "session_note": "session note",
    "daily_entry": "daily log entry",
}


def describe(item: ForgetItem, done: bool) -> str:
    """One item of a forget plan in words (what `pinch memory forget` prints, less terse)."""
    where = item.path or ""
    if item.lines:
        where += f" lines {item.lines}"
    kind = KIND_WORDS.get(item.kind, item.kind.replace("_", " "))
    what = f"{item.count} {kind}" if item.count != 1 else kind
    if item.kind == "recall_signals":
        what = f"{item.count} recall signals on"
    elif item.kind == "dream_preimage_db":
        what = f"{item.count} pre-dream copies of MEMORY.md kept for undo (in the database)"
    if item.action == "keep":
        return f"kept: {what} {where} ({item.reason})"
    return f"{'removed' if done else 'remove'}: {what} {where}".rstrip()
