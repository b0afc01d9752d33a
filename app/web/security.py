"""The web page's guard, run before every handler (`security_middleware`) and on every response
(`add_security_headers`):

- the Host header must be one the page is configured for (DNS rebinding: a page on another
  site that resolves its own name to 127.0.0.1 still sends its own name as Host) — refused
  otherwise, before anything else, with nothing about the server in the answer;
- every path but /login and /static/ needs a live session (the HttpOnly, SameSite=Strict
  cookie `pinch_session`); without one a GET goes to /login and a POST is refused;
- every POST needs an Origin header equal to the page's own origin (or "null" from the browser
  itself, see `same_origin`) and the session's CSRF token
  (form field `csrf` or header `X-CSRF-Token`); the login form, before any session, uses a
  double-submit token (cookie `pinch_login_csrf` + field);
- a request body is read only after the session is checked, and only as large as its path
  takes (`body_limit`): before login a small form, after it a memory file's edit, and the chat's
  uploads only on /chat/send; a form that cannot be parsed is refused (400), not a server error;
- every response carries a Content-Security-Policy without inline script, no framing, no
  sniffing, no referrer, no caching, and no server name or version.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Middleware

from app.web.auth import Logins, csrf_token
from app.web.context import CSRF_KEY
from app.web.web_config import LOOPBACK_HOSTS, WebConfig

SESSION_COOKIE = "pinch_session"
LOGIN_CSRF_COOKIE = "pinch_login_csrf"
SESSION_KEY = "pinch_session_id"  # request[SESSION_KEY]: the logged-in session's id
PUBLIC_PATHS = ("/login",)
PUBLIC_PREFIXES = ("/static/",)
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
# Request bodies: the login form (a password); any form of the logged-in owner (a memory file's
# edit: 1 MB of text, up to 3 MB URL-encoded); the chat's uploads (20 MB files, the server's
# client_max_size) on UPLOAD_PATHS only.
LOGIN_BODY_BYTES = 64 * 1024
FORM_BODY_BYTES = 4 * 1024 * 1024
UPLOAD_PATHS = ("/chat/send",)

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def allowed_hosts(config: WebConfig) -> frozenset[str]:
    """The Host header values the page answers: loopback names on its port, the configured
    host (unless a wildcard), and `allowed_hosts` (with or without the port)."""
    port = config.port
    names = {"127.0.0.1", "localhost", "[::1]"}
    if config.host not in ("0.0.0.0", "::", "") and config.host not in LOOPBACK_HOSTS:
        names.add(f"[{config.host}]" if ":" in config.host else config.host)
    found = {f"{name}:{port}".lower() for name in names}
    for extra in config.allowed_hosts:
        found.add(extra.lower())
        if ":" not in extra:
            found.add(f"{extra}:{port}".lower())
    return frozenset(found)


def refuse(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", content_type="text/plain")


def set_cookie(
    response: web.StreamResponse, request: web.Request, name: str, value: str, max_age: int
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="Strict",
        secure=request.secure,
    )


def security_middleware(config: WebConfig, logins: Logins) -> Middleware:
    hosts = allowed_hosts(config)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if (request.host or "").lower() not in hosts:
            return refuse(403, "Refused: this page is not served under that host name.")
        public = request.path in PUBLIC_PATHS or request.path.startswith(PUBLIC_PREFIXES)
        session_id = request.cookies.get(logins.session_cookie, "")
        alive = bool(session_id) and await _alive(logins, session_id)
        if request.method not in SAFE_METHODS and not same_origin(request):
            return refuse(403, "Refused: the request did not come from this page (Origin).")
        if not alive and not public:
            if request.method in ("GET", "HEAD"):
                raise web.HTTPSeeOther("/login")
            return refuse(403, "Refused: log in first.")
        if alive:
            request[SESSION_KEY] = session_id
            request[CSRF_KEY] = csrf_token(session_id)
        elif request.path == "/login":
            request[CSRF_KEY] = request.cookies.get(LOGIN_CSRF_COOKIE, "")
        if request.method not in SAFE_METHODS:
            limit = body_limit(request.path, alive=alive)
            size = request.content_length  # None: chunked, of any size
            if limit is not None and request.body_exists and (size is None or size > limit):
                return refuse(413, f"Refused: the request is larger than {limit:,} bytes.")
            expected = request.get(CSRF_KEY, "")
            given = request.headers.get("X-CSRF-Token", "")
            if request.content_type in FORM_TYPES:
                try:  # parsed here once (the handler gets it again from aiohttp's cache)
                    form = await request.post()
                except (ValueError, HttpProcessingError):  # bad UTF-8, a broken multipart
                    return refuse(400, "Refused: the form could not be read. Reload the page.")
                given = given or str(form.get("csrf", ""))
            if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
                return refuse(403, "Refused: the form is out of date (CSRF). Reload the page.")
        return await handler(request)

    return guard


def body_limit(path: str, *, alive: bool) -> int | None:
    """The largest body a request to `path` may send (None: the server's own limit, for the
    chat's uploads)."""
    if not alive:
        return LOGIN_BODY_BYTES
    return None if path in UPLOAD_PATHS else FORM_BODY_BYTES


def same_origin(request: web.Request) -> bool:
    """Whether a state-changing request comes from the page itself: its Origin is the page's
    own. Under `Referrer-Policy: no-referrer` a browser sends `Origin: null` for a plain form
    POST, so "null" passes only with the browser's own `Sec-Fetch-Site: same-origin` (which no
    page can set; a sandboxed frame or another site gets "cross-site")."""
    origin = request.headers.get("Origin", "")
    scheme, _, host = origin.partition("://")
    # The scheme may differ from this server's: an HTTPS proxy in front (Tailscale serve, a
    # reverse proxy) talks plain HTTP to it. The host (already checked) must be the same.
    if scheme in ("http", "https") and host.lower() == (request.host or "").lower():
        return True
    return origin == "null" and request.headers.get("Sec-Fetch-Site") == "same-origin"


async def _alive(logins: Logins, session_id: str) -> bool:
    return await asyncio.to_thread(logins.alive, session_id)


async def add_security_headers(_request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: every answer, errors and the event stream included."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    response.headers["Server"] = "Pinch"  # not aiohttp's name and version
