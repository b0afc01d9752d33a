"""`/login` and `/logout`: a one-time link or the password becomes a session cookie.

GET /login?token=… redeems a link from `pinch web login` (once, within 10 minutes) and sends
the browser on to `/`, so the token leaves the address bar at once. POST /login takes the
password set with `pinch web set-password`. Failed attempts are rate limited (app/web/auth.py).
POST /logout ends the session in the database, not only in this browser.
"""

from __future__ import annotations

import asyncio
import secrets

from aiohttp import web

from app.web.auth import Logins
from app.web.context import WebContext
from app.web.security import (
    LOGIN_CSRF_COOKIE,
    SESSION_KEY,
    set_cookie,
)


def redirect(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location})


TOO_MANY = "Too many failed logins: wait a minute, then try again."


def add_routes(app: web.Application, ctx: WebContext) -> None:
    logins: Logins = ctx.services["logins"]
    max_age = int(ctx.settings.web.session_hours * 3600)

    def logged_in(request: web.Request, session_id: str) -> web.StreamResponse:
        response = redirect("/")
        set_cookie(response, request, logins.session_cookie, session_id, max_age)
        response.del_cookie(LOGIN_CSRF_COOKIE, path="/")
        return response

    async def login_page(
        request: web.Request, *, status: int = 200, error: str = ""
    ) -> web.Response:
        csrf = request.cookies.get(LOGIN_CSRF_COOKIE) or secrets.token_urlsafe(24)
        response = await ctx.render(
            request,
            "login.html",
            status=status,
            error=error,
            password_login=logins.password_set(),
            login_csrf=csrf,
        )
        set_cookie(response, request, LOGIN_CSRF_COOKIE, csrf, 3600)
        return response

    async def login_get(request: web.Request) -> web.StreamResponse:
        token = request.query.get("token")
        if request.method == "HEAD":  # a link checker's look: the link stays unused
            return await login_page(request)
        if token is None:
            if request.get(SESSION_KEY):
                raise web.HTTPSeeOther("/")
            return await login_page(request)
        # A valid link always works (256 random bits: guessing is hopeless), so a stranger
        # hammering the login cannot lock the owner out; failed tries count and are limited.
        session_id = await asyncio.to_thread(logins.redeem, token)
        if session_id is None and logins.limited():
            return await login_page(request, status=429, error=TOO_MANY)
        if session_id is None:
            return await login_page(
                request,
                status=403,
                error="This login link has expired or was already used: run `pinch web login` "
                "on the server for a new one.",
            )
        return logged_in(request, session_id)

    async def login_post(request: web.Request) -> web.StreamResponse:
        if logins.limited():
            return await login_page(request, status=429, error=TOO_MANY)
        password = str((await request.post()).get("password", ""))
        session_id = await asyncio.to_thread(logins.password_login, password)
        if session_id is None:
            return await login_page(request, status=403, error="Wrong password.")
        return logged_in(request, session_id)

    async def logout_get(request: web.Request) -> web.StreamResponse:
        return await ctx.render(request, "logout.html")

    async def logout_post(request: web.Request) -> web.StreamResponse:
        await asyncio.to_thread(logins.end, request[SESSION_KEY])
        response = redirect("/login")
        response.del_cookie(logins.session_cookie, path="/")
        return response

    app.router.add_get("/login", login_get)
    app.router.add_post("/login", login_post)
    app.router.add_get("/logout", logout_get)
    app.router.add_post("/logout", logout_post)
