"""`/`: the state of the assistant at a glance — the model, the memory index, each channel,
the next scheduled jobs and the pending pairing codes — reading only what is cheap."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from app.automations.schedules import local_text
from app.web.context import WebContext
from app.web.render import closed_bidi
from common.text import shorten

NEXT_JOBS = 5


@dataclass(frozen=True)
class Line:
    """One row of a card: a label, a value, and whether it is fine."""

    label: str
    value: str
    ok: bool = True


def add_routes(app: web.Application, ctx: WebContext) -> None:
    async def overview(request: web.Request) -> web.Response:
        facts = await asyncio.to_thread(_facts, ctx)
        return await ctx.render(request, "overview.html", **facts)

    app.router.add_get("/", overview)


def _facts(ctx: WebContext) -> dict[str, Any]:
    settings, runtime = ctx.settings, ctx.runtime
    status = runtime.index.status()
    index = [
        Line("Files", f"{status.files:,} files, {status.chunks:,} chunks"),
        Line(
            "Search",
            status.degraded or f"hybrid ({status.provider} {status.model})",
            ok=status.degraded is None,
        ),
    ]
    if status.problems:
        index.append(
            Line("Problems", f"{len(status.problems)} file(s) could not be indexed", ok=False)
        )
    gateway = ctx.services.get("gateway")
    channels = []
    if gateway is not None:
        for name, health in sorted(gateway.health.items()):
            channels.append(Line(name, shorten(health.detail, 120), ok=health.ok))
    jobs = []
    if runtime.automations is not None:
        active = runtime.automations.jobs.jobs(states=("active",))
        upcoming = sorted(
            ((j.next_run_utc, j) for j in active if j.next_run_utc is not None),
            key=lambda pair: pair[0],
        )
        for due, job in upcoming[:NEXT_JOBS]:
            when = local_text(due, job.schedule.tz)
            jobs.append(Line(when, shorten(" ".join(job.text.split()), 80)))
    pending = []
    if gateway is not None:
        for req in gateway.access.pairing.pending():
            name = closed_bidi(req.sender_name or "")  # a stranger's: may not turn the id around
            who = f"{name} ({req.sender_id})" if name else req.sender_id
            pending.append(Line(req.channel, who))
    return {
        "model": settings.agent.model or "not configured",
        "fallbacks": list(settings.agent.fallback_models),
        "index": index,
        "channels": channels,
        "jobs": jobs,
        "automations_on": runtime.automations is not None,
        "pending": pending,
    }
