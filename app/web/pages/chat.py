"""`/chat`: the owner's main conversation in the page — the same session as Telegram, Slack and
the terminal (under the default `owner_dm_scope = "main"`) — through the `web` channel.

- GET /chat: the scrollback (the current session's messages, compaction summaries shown as
  such; `?before=SEQ` pages back) and the form.
- POST /chat/send: text and files (photos, documents → the inbox, as the channels do) queued
  durably through the gateway (`WebChannel.receive`); answered by the gateway's worker.
- GET /chat/events: Server-Sent Events — each reply message as it is written (Markdown rendered
  here, escaped), "typing", and whether a turn of the session runs (`state`).
- POST /chat/stop: cancel the running turn (what streamed so far stays as the answer).
The page's script is app/web/static/chat.js (no inline script: the CSP forbids it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiohttp import web
from aiohttp.web_request import FileField

from app.web.context import WebContext
from app.web.render import markdown_html
from channels.web import Upload, WebChannel, WebChannelError
from common.channel_table import WEB
from memory.store.sessions import SessionKey
from memory.store.transcripts import message_text

SCROLLBACK_EVENTS = 80
SHOWN_KINDS = ("user", "assistant", "compaction", "command")
KEEPALIVE_S = 15.0
STATE_POLL_S = 0.5


@dataclass(frozen=True)
class Bubble:
    """One message of the scrollback: `role` is user, assistant, summary or command."""

    seq: int
    role: str
    text: str
    at: str


def owner_key(ctx: WebContext) -> SessionKey:
    """The session the page's messages go to (app/gateway/routing.py's rule for the owner)."""
    agent_id = ctx.settings.agent_id
    if ctx.settings.gateway.owner_dm_scope == "per-channel":
        return SessionKey.owner_direct(WEB, agent_id)
    return SessionKey.owner_main(agent_id)


def scrollback(ctx: WebContext, before: int | None) -> tuple[list[Bubble], int | None]:
    """The last SCROLLBACK_EVENTS shown events before seq `before` (None: the newest), and the
    seq to page back from (None: nothing earlier)."""
    store = ctx.runtime.store
    session = store.current(owner_key(ctx))
    events = store.events(session.id, kinds=SHOWN_KINDS)
    if before is not None:
        events = [e for e in events if e.seq < before]
    earlier = len(events) > SCROLLBACK_EVENTS
    events = events[-SCROLLBACK_EVENTS:]
    bubbles = []
    zone = ctx.runtime.clock.tz
    for event in events:
        c = event.content
        if event.kind == "compaction":
            role, text = "summary", message_text(c.get("summary"))
        elif event.kind == "command":
            role, text = "command", message_text(c.get("text")) or str(c.get("name", ""))
        else:
            if c.get("cancelled") and not message_text(c.get("text")):
                continue
            role, text = event.kind, message_text(c.get("text"))
        if not text.strip():
            continue
        at = datetime.fromtimestamp(event.created_at, zone).strftime("%a %d %b %H:%M")
        bubbles.append(Bubble(event.seq, role, text, at))
    return bubbles, (events[0].seq if earlier and events else None)


def add_routes(app: web.Application, ctx: WebContext) -> None:
    def channel() -> WebChannel:
        found = ctx.services.get("web_channel")
        if found is None:
            raise web.HTTPServiceUnavailable(text="The web chat is not running in this process.")
        assert isinstance(found, WebChannel)
        return found

    async def page(request: web.Request) -> web.Response:
        before = request.query.get("before", "")
        bubbles, earlier = await asyncio.to_thread(
            scrollback, ctx, int(before) if before.isdecimal() else None
        )
        return await ctx.render(
            request,
            "chat.html",
            bubbles=bubbles,
            earlier=earlier,
            paged=bool(before),
            client_id=_client_id(),
        )

    async def send(request: web.Request) -> web.StreamResponse:
        form = await request.post()
        text = str(form.get("text", "")).strip()
        uploads = []
        for item in form.getall("files", []):
            if isinstance(item, FileField) and item.filename:
                data = await asyncio.to_thread(item.file.read)  # a spooled file: off the loop
                uploads.append(Upload(item.filename, data, item.content_type))
        if not text and not uploads:
            return _answer(request, {"error": "Type a message or choose a file."}, 400)
        try:
            await channel().receive(text, client_id=str(form.get("client_id", "")), uploads=uploads)
        except WebChannelError as exc:
            return _answer(request, {"error": str(exc)}, 400)
        return _answer(request, {"ok": True, "client_id": _client_id()})

    async def stop(request: web.Request) -> web.Response:
        gateway = ctx.services.get("gateway")
        stopped = bool(gateway is not None and gateway.cancel_turn(str(owner_key(ctx))))
        return web.json_response({"stopped": stopped})

    async def events(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}
        )
        await response.prepare(request)
        key = str(owner_key(ctx))
        gateway = ctx.services.get("gateway")
        busy: bool | None = None
        idle_s = 0.0
        last_event_id = request.headers.get("Last-Event-ID", "")
        web_channel = channel()
        with (
            contextlib.suppress(ConnectionResetError, asyncio.CancelledError),
            web_channel.listen(last_event_id) as listener,
        ):
            # A new page is given the newest event's id: reconnecting, it asks for what came
            # after it (after a gateway restart: everything the new process sent).
            hello = f"retry: 1000\nid: {last_event_id or web_channel.cursor()}\n"
            await response.write(f"{hello}event: hello\ndata: {{}}\n\n".encode())
            while not listener.closed:
                event = await listener.get(STATE_POLL_S)
                now_busy = bool(gateway is not None and gateway.workers.busy(key))
                if now_busy != busy:
                    busy = now_busy
                    await response.write(_sse("state", {"busy": busy}))
                if event is None:
                    idle_s += STATE_POLL_S
                    if idle_s >= KEEPALIVE_S:
                        idle_s = 0.0
                        await response.write(b": keep-alive\n\n")
                    continue
                idle_s = 0.0
                if event.kind == "message":
                    html = await asyncio.to_thread(markdown_html, event.text)  # off the loop
                    data = {"id": event.message_id, "html": str(html)}
                    await response.write(_sse("message", data, event.id))
                else:
                    await response.write(_sse(event.kind, {}))
        return response

    app.router.add_get("/chat", page)
    app.router.add_post("/chat/send", send)
    app.router.add_post("/chat/stop", stop)
    app.router.add_get("/chat/events", events)


def _client_id() -> str:
    import secrets

    return secrets.token_urlsafe(16)


def _sse(kind: str, data: dict[str, Any], event_id: str | None = None) -> bytes:
    lines = [f"event: {kind}"]
    if event_id:
        lines.append(f"id: {event_id}")
    lines.append("data: " + json.dumps(data, ensure_ascii=False))
    return ("\n".join(lines) + "\n\n").encode()


def _answer(request: web.Request, body: dict[str, Any], status: int = 200) -> web.StreamResponse:
    """JSON for the page's script; a plain form post (no script) goes back to the chat."""
    if request.headers.get("X-CSRF-Token"):
        return web.json_response(body, status=status)
    if status != 200:
        return web.Response(status=status, text=str(body.get("error", "")))
    return web.Response(status=303, headers={"Location": "/chat"})
