"""/health: `pinch doctor`'s checks, each channel's state (from the running gateway: last poll age,
last error), the tokens used and the share read from the prompt cache per day (from the usage
each model call leaves on its transcript event), and the tail of the gateway's log (redacted).

    GET  /health
    POST /health/doctor   run the checks now (the model check only when asked: it is a call)
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web

from app.cli.checks import CheckResult, channel_check
from app.cli.doctor import run_checks_async
from app.gateway.agent_log import OnlyAgent
from app.gateway.heartbeat import heartbeat_dir, read_heartbeat
from app.web.context import WebContext
from app.web.log_tail import LogTail, install_log_tail
from app.web.page_support import ago, done, gateway_of, notice_of, owner_time
from memory.store.backends import store_for
from memory.store.session_overview import SqliteSessionOverview, UsageRow

USAGE_DAYS = 14
LOG_LINES = 200


def add_routes(app: web.Application, ctx: WebContext) -> None:
    if not isinstance(ctx.services.get("log_tail"), LogTail):  # from now on, for the tail
        tail = install_log_tail(ctx.settings)
        if ctx.services.get("log_agent"):  # a process serving several agents: this one's lines
            tail.addFilter(OnlyAgent(ctx.services["log_agent"]))
        ctx.services["log_tail"] = tail

        async def remove_tail(_app: web.Application) -> None:
            logging.getLogger().removeHandler(tail)
            ctx.services.pop("log_tail", None)

        app.on_cleanup.append(remove_tail)
    pages = HealthPages(ctx)
    app.router.add_get("/health", pages.index)
    app.router.add_post("/health/doctor", pages.doctor)


@dataclass(frozen=True)
class DayUsage:
    day: str
    calls: int
    input_tokens: int  # not read from the cache
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.output_tokens

    @property
    def cache_share(self) -> float:
        """The share of the prompt tokens read from the prompt cache."""
        return self.cache_read_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def usage_per_day(rows: list[UsageRow], tz: Any) -> list[DayUsage]:
    """Per day in the owner's zone, newest first (the rows are quarter hours)."""
    days: dict[str, list[int]] = {}
    for r in rows:
        day = datetime.fromtimestamp(r.at, tz).strftime("%Y-%m-%d")
        sums = days.setdefault(day, [0, 0, 0, 0, 0])
        sums[0] += r.calls
        sums[1] += r.input_tokens
        sums[2] += r.cache_read_tokens
        sums[3] += r.cache_write_tokens
        sums[4] += r.output_tokens
    return [DayUsage(day, *sums) for day, sums in sorted(days.items(), reverse=True)]


@dataclass(frozen=True)
class DoctorRun:
    at: float
    results: list[CheckResult]
    with_model: bool


class HealthPages:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx
        self._overview: SqliteSessionOverview | None = None

    def _usage(self) -> list[DayUsage]:
        if self._overview is None:
            self._overview = store_for("SessionOverview", self.ctx.runtime.index.db)
        tz = self.ctx.runtime.clock.tz
        start = datetime.now(tz).replace(hour=0, minute=0, second=0, microsecond=0)
        since = (start - timedelta(days=USAGE_DAYS - 1)).timestamp()
        return usage_per_day(self._overview.usage_since(since), tz)

    async def index(self, request: web.Request) -> web.Response:
        now = time.time()
        gateway = gateway_of(self.ctx)
        channels = []
        if gateway is not None:
            for name in sorted({*gateway.channels, *gateway.health, *gateway.failed}):
                health = gateway.health.get(name)
                failed = gateway.failed.get(name)
                channels.append(
                    {
                        "name": name,
                        "ok": health.ok if health and not failed else False,
                        "detail": (failed and f"could not start: {failed}")
                        or (health.detail if health else "not checked yet"),
                    }
                )
        beat = await asyncio.to_thread(read_heartbeat, heartbeat_dir(self.ctx.settings))
        usage = await asyncio.to_thread(self._usage)
        tail = self.ctx.services.get("log_tail")
        lines = tail.tail(LOG_LINES) if tail else []  # redacted as they were logged
        doctor = self.ctx.services.get("doctor_run")
        return await self.ctx.render(
            request,
            "pages/health.html",
            gateway_running=gateway is not None,
            channels=channels,
            beat=beat,
            beat_age=ago(now - beat.at) if beat else None,
            usage=usage,
            days=USAGE_DAYS,
            log_lines=lines,
            doctor=doctor,
            doctor_age=ago(now - doctor.at) if doctor else None,
            notice=notice_of(self.ctx, request),
            when=lambda ts: owner_time(self.ctx, ts),
        )

    async def doctor(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        with_model = form.get("model") == "1"
        gateway = gateway_of(self.ctx)
        extra = [channel_check(c) for c in gateway.channels.values()] if gateway else []
        results = await run_checks_async(self.ctx.settings, extra, offline=not with_model)
        self.ctx.services["doctor_run"] = DoctorRun(time.time(), results, with_model)
        failed = [r.name for r in results if not r.ok]
        text = (
            f"{len(results)} checks ran: {len(failed)} failed ({', '.join(failed)})."
            if failed
            else f"{len(results)} checks ran: all passed."
        )
        raise done(self.ctx, "/health", text, ok=not failed)
