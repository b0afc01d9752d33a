"""/access: who may talk to Pinch — pending pairing codes (approve, reject), approved people
(revoke), each channel's direct-message policy and groups (read only: they are config.toml's),
and the owners. The same operations as `pinch pairing list|approve|reject`.

    GET  /access
    POST /access/approve   code
    POST /access/reject    code
    POST /access/revoke    channel, sender_id
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from app.channel_registry import CHANNELS, Owners, channel_settings
from app.gateway.access import Pairing
from app.web.context import WebContext
from app.web.page_support import ago, done, gateway_of, notice_of, owner_time
from app.web.render import closed_bidi
from memory.store.backends import store_for


def add_routes(app: web.Application, ctx: WebContext) -> None:
    pages = AccessPages(ctx)
    app.router.add_get("/access", pages.index)
    app.router.add_post("/access/approve", pages.approve)
    app.router.add_post("/access/reject", pages.reject)
    app.router.add_post("/access/revoke", pages.revoke)


class AccessPages:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx
        self._own: Pairing | None = None

    def _pairing(self) -> Pairing:
        """The running gateway's pairing when it serves the page, else one over the same
        database (never closed here: the database is the runtime's)."""
        gateway = gateway_of(self.ctx)
        if gateway is not None:
            return gateway.access.pairing
        if self._own is None:
            self._own = Pairing(store_for("PairingStore", self.ctx.runtime.index.db))
        return self._own

    async def index(self, request: web.Request) -> web.Response:
        pairing = await asyncio.to_thread(self._pairing)
        pending, approved = await asyncio.gather(
            asyncio.to_thread(pairing.pending), asyncio.to_thread(pairing.approved)
        )
        settings = self.ctx.settings
        owners = Owners.from_settings(settings)
        configured = channel_settings(settings)
        channels = [
            {
                "name": row.name,
                "title": row.title,
                "owners": owners.ids.get(row.name, ()),
                # Channels without access rules (the web page: the owner, logged in) have none.
                "config": _rules(configured.get(row.name)),
                "section": row.config_section,
            }
            for row in CHANNELS
            if row.config_section
        ]
        now = time.time()
        return await self.ctx.render(
            request,
            "pages/access.html",
            pending=pending,
            approved=approved,
            channels=channels,
            notice=notice_of(self.ctx, request),
            expires_in=lambda ts: ago(ts - now),
            when=lambda ts: owner_time(self.ctx, ts),
        )

    async def approve(self, request: web.Request) -> web.StreamResponse:
        return await self._decide(request, approve=True)

    async def reject(self, request: web.Request) -> web.StreamResponse:
        return await self._decide(request, approve=False)

    async def _decide(self, request: web.Request, *, approve: bool) -> web.StreamResponse:
        form = await request.post()
        pairing = await asyncio.to_thread(self._pairing)
        try:
            req = await asyncio.to_thread(pairing.decide, str(form.get("code", "")), approve)
        except ValueError as exc:
            raise done(self.ctx, "/access", str(exc), ok=False) from None
        who = _who(req.sender_id, req.sender_name)
        if approve:
            text = f"Approved {req.channel} user {who}: their next message will be answered."
        else:
            text = f"Rejected the request of {req.channel} user {who}."
        raise done(self.ctx, "/access", text)

    async def revoke(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        channel, sender = str(form.get("channel", "")), str(form.get("sender_id", ""))
        pairing = await asyncio.to_thread(self._pairing)
        revoked = await asyncio.to_thread(pairing.revoke, channel, sender)
        if not revoked:
            raise done(self.ctx, "/access", f"{channel} user {sender} was not approved.", ok=False)
        raise done(
            self.ctx,
            "/access",
            f"Revoked {channel} user {sender}: their messages are no longer answered (they may ask "
            "for a new pairing code after an hour).",
        )


def _rules(config: Any) -> Any:
    return config if hasattr(config, "dm_policy") and hasattr(config, "groups") else None


def _who(sender_id: str, name: Any) -> str:
    return f"{sender_id} ({closed_bidi(str(name))})" if name else sender_id
