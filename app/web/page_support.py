"""What the page handlers of app/web/pages/ share: times in the owner's zone, the running gateway
(if any), one-line notices carried across a redirect after a POST, and form parsing.

A POST that changes something answers with a 303 redirect to the page it came from (so reloading
does not repeat it) and leaves a notice under a random id in `Notices`; the page shows it once.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from datetime import datetime
from typing import Any

from aiohttp import web

from app.web.context import WebContext

MAX_NOTICES = 200


class Notices:
    """One-time notices by random id (bounded: the oldest go first)."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, tuple[str, bool]] = OrderedDict()

    def add(self, text: str, *, ok: bool = True) -> str:
        key = secrets.token_urlsafe(9)
        self._items[key] = (text, ok)
        while len(self._items) > MAX_NOTICES:
            self._items.popitem(last=False)
        return key

    def take(self, key: str | None) -> tuple[str, bool] | None:
        return self._items.pop(key, None) if key else None


def notices(ctx: WebContext) -> Notices:
    found = ctx.services.get("notices")
    if not isinstance(found, Notices):
        found = Notices()
        ctx.services["notices"] = found
    return found


def done(ctx: WebContext, location: str, text: str, *, ok: bool = True) -> web.HTTPSeeOther:
    """The redirect after a POST, with `text` shown once on `location` (a path of ours)."""
    key = notices(ctx).add(text, ok=ok)
    sep = "&" if "?" in location else "?"
    return web.HTTPSeeOther(f"{location}{sep}n={key}")


def notice_of(ctx: WebContext, request: web.Request) -> dict[str, Any] | None:
    """The notice the redirect left for this page, as the template's `notice`."""
    found = notices(ctx).take(request.query.get("n"))
    return {"text": found[0], "ok": found[1]} if found else None


def gateway_of(ctx: WebContext) -> Any | None:
    """The running `Gateway` when `pinch gateway` serves the page, else None."""
    return ctx.services.get("gateway")


def owner_time(ctx: WebContext, ts: float | datetime | None, fmt: str = "%Y-%m-%d %H:%M") -> str:
    """A moment in the owner's time zone ("—" for none)."""
    if ts is None:
        return "—"
    tz = ctx.runtime.clock.tz
    moment = ts if isinstance(ts, datetime) else datetime.fromtimestamp(ts, tz)
    return moment.astimezone(tz).strftime(fmt)


def ago(seconds: float) -> str:
    """A short age: "12 s", "5 min", "3 h", "4 d"."""
    s = max(0.0, seconds)
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    if s < 36 * 3600:
        return f"{s / 3600:.0f} h"
    return f"{s / 86400:.0f} d"


def int_field(value: Any, default: int = 0, *, low: int = 0, high: int = 10**9) -> int:
    """A non-negative integer from a query or form field, `default` when it is not one."""
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return default
    return min(max(number, low), high)
