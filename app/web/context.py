"""`WebContext`: what every page handler of the web control page is given.

A page module (app/web/pages/NAME.py) exposes `add_routes(app, ctx)`; its handlers read and
write through `ctx.runtime` (the same stores the CLI uses) and answer with
`await ctx.render(...)` (in a worker thread: a long transcript or memory file is Markdown to
render, and the gateway's event loop serves the platforms meanwhile).
The security middleware (app/web/security.py) has already checked, before any handler runs:
the owner's login (every path but /login and /static), the Host header, and — for every POST —
the Origin and the CSRF token. Handlers never check these themselves; a form only carries
the token: `<input type="hidden" name="csrf" value="{{ csrf_token }}">` (a script sends it as
the `X-CSRF-Token` header). Templates extend base.html (blocks: title, content; also head,
scripts, main_class, body_class) and see `nav`, `path` and `csrf_token`; `{{ text | markdown }}`
renders untrusted Markdown safely.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jinja2
from aiohttp import web

if TYPE_CHECKING:
    from app.config import Settings
    from app.process import Runtime

# Set on each request by the security middleware: the logged-in session's CSRF token.
CSRF_KEY = "pinch_csrf"


@dataclass
class WebContext:
    """The page's shared state: settings, the running Pinch, the templates."""

    settings: Settings
    runtime: Runtime
    templates: jinja2.Environment
    # Extra values every template sees (e.g. the nav), filled by the server.
    globals: dict[str, Any] = field(default_factory=dict)
    # Services of the running process, by name (app/wiring.py `build_web_server` fills them):
    #   "gateway"     — the running app.gateway.server.Gateway: channel health (`health`,
    #                   `failed`), access and pairing (`access.pairing`), `cancel_turn`,
    #                   `workers.busy(key)`, its channels (`channels`);
    #   "web_channel" — the channels.web.WebChannel of the chat (None when not running);
    #   "logins"      — app.web.auth.Logins: the login links, password and sessions;
    #   "log_tail"    — `log_tail(count) -> list[str]`: the gateway's newest log lines,
    #                   redacted (app.logging_setup.RecentLines), oldest first.
    services: dict[str, Any] = field(default_factory=dict)

    async def render(
        self, request: web.Request, name: str, *, status: int = 200, **values: Any
    ) -> web.Response:
        """Render template `name` (autoescaped) with `values`, the CSRF token and the nav, in a
        worker thread (rendering untrusted Markdown is CPU work; the event loop must stay free
        for Telegram, Slack and the other pages)."""
        template = self.templates.get_template(name)
        html = await asyncio.to_thread(
            template.render,
            **self.globals,
            **values,
            csrf_token=request.get(CSRF_KEY, ""),
            path=request.path,
        )
        return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")
