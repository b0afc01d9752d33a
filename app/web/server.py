"""The web page's aiohttp application and the server `pinch gateway` runs it in.

    ctx = WebContext(settings, runtime, make_templates(), services={"gateway": gateway, ...})
    server = WebServer(ctx); await server.start(); ...; await server.stop()

`build_web_app` puts the security middleware (app/web/security.py) in front of every route,
serves app/web/static/ under /static/, and calls `add_routes(app, ctx)` of the login routes,
the overview, the chat and every module of `PAGE_MODULES`. aiohttp's access log is replaced by
one that writes the method, the path without its query string and the status at DEBUG level:
a login link's token (in the query) never reaches any log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from types import ModuleType
from typing import Any

import jinja2
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.typedefs import Handler, Middleware

from app.web import login
from app.web.auth import web_port_setting
from app.web.context import WebContext
from app.web.pages import access, automations, chat, dreams, health, memory, overview, sessions
from app.web.render import close_bidi, markdown_html
from app.web.security import add_security_headers, security_middleware

log = logging.getLogger("pinch.web")

WEB_DIR = Path(__file__).resolve().parent
MAX_UPLOAD_BYTES = 21 * 1024 * 1024  # a 20 MB file and the form around it

# The pages beside the overview and the chat, each a module with `add_routes(app, ctx)`.
PAGE_MODULES: tuple[ModuleType, ...] = (memory, dreams, sessions, access, automations, health)

NAV = (
    ("/", "Overview"),
    ("/chat", "Chat"),
    ("/memory", "Memory"),
    ("/dreams", "Dreams"),
    ("/sessions", "Sessions"),
    ("/access", "Access"),
    ("/automations", "Automations"),
    ("/health", "Health"),
)


def make_templates() -> jinja2.Environment:
    """The page's Jinja2 templates (app/web/templates), every value escaped unless marked safe
    (`markdown` renders untrusted Markdown with raw HTML off) and its bidi controls closed
    (`close_bidi`; write `{{ value|e }}` for a value sent back verbatim)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(WEB_DIR / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=close_bidi,  # a stored right-to-left override ends with its value
    )
    env.filters["markdown"] = markdown_html
    return env


def build_web_app(ctx: WebContext) -> web.Application:
    """The application: security first, then the login, the pages and the static files."""
    logins = ctx.services["logins"]
    app = web.Application(
        middlewares=[security_middleware(ctx.settings.web, logins), not_found_page(ctx)],
        client_max_size=MAX_UPLOAD_BYTES,
    )
    app.on_response_prepare.append(add_security_headers)
    ctx.globals.setdefault("nav", NAV)
    for module in (login, overview, chat, *PAGE_MODULES):
        module.add_routes(app, ctx)
    app.router.add_static("/static/", WEB_DIR / "static", follow_symlinks=False)
    return app


def not_found_page(ctx: WebContext) -> Middleware:
    """A page (with the nav) instead of aiohttp's bare "404: Not Found", for the logged-in owner
    (the security middleware has already sent everyone else to /login)."""

    @web.middleware
    async def friendly(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPNotFound:
            if request.method != "GET" or request.path.startswith("/static/"):
                raise
            return await ctx.render(
                request,
                "error.html",
                status=404,
                title="Not here",
                message="There is no page at this address.",
            )

    return friendly


class QuietAccessLogger(AbstractAccessLogger):
    """Method, path (never the query string: a login token travels there) and status."""

    def log(self, request: Any, response: Any, time: float) -> None:
        self.logger.debug(
            "%s %s %s %.0f ms", request.method, request.path, response.status, time * 1000
        )


class WebServer:
    """The page on [web] host:port, inside the gateway's event loop."""

    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        config = self.ctx.settings.web
        return f"http://{config.host}:{config.port}"

    async def start(self) -> None:
        """Bind [web] host:port; OSError (worded as advice) when the port is taken."""
        config = self.ctx.settings.web
        with contextlib.suppress(Exception):  # housekeeping; a failure costs nothing now
            await asyncio.to_thread(self.ctx.services["logins"].prune)
        runner = web.AppRunner(
            build_web_app(self.ctx),
            access_log_class=QuietAccessLogger,
            access_log=logging.getLogger("pinch.web.access"),
            shutdown_timeout=5.0,
        )
        await runner.setup()
        try:
            await web.TCPSite(runner, config.host, config.port).start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(
                f"The web page could not listen on {config.host}:{config.port} ({exc.strerror}): "
                "another program (or another agent's page) uses that port. Set "
                f"{web_port_setting(self.ctx.settings)} to a free one, or [web] enabled = false."
            ) from None
        self._runner = runner
        log.info("Web page on %s (open it with a link from `pinch web login`)", self.address)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
