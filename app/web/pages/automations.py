"""/automations: reminders and scheduled tasks with their next run in the owner's time zone
(pause, resume, cancel, run now), their history, the heartbeat, and standing intents (cancel) —
the same operations as `pinch jobs …` and `pinch intents …`. Changes go through the running
scheduler when the gateway serves the page (armed at once), else only to the table (a gateway
started later picks them up).

    GET  /automations[?all=1]
    POST /automations/jobs/{id}/{pause|resume|cancel|run}
    POST /automations/intents/{id}/cancel
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from app.automations.durations import ScheduleError, human_duration
from app.automations.jobs import Job, State
from app.automations.schedules import describe, local_text
from app.web.context import WebContext
from app.web.page_support import done, notice_of, owner_time
from memory.lifecycle.intents import IntentError

ACTIONS = ("pause", "resume", "cancel", "run")
HISTORY = 30


def add_routes(app: web.Application, ctx: WebContext) -> None:
    pages = AutomationPages(ctx)
    app.router.add_get("/automations", pages.index)
    app.router.add_post(r"/automations/jobs/{job_id:\d{1,18}}/{action}", pages.change_job)
    app.router.add_post(r"/automations/intents/{intent_id:\d{1,18}}/cancel", pages.cancel_intent)


class AutomationPages:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    async def index(self, request: web.Request) -> web.Response:
        runtime = self.ctx.runtime
        show_all = request.query.get("all") == "1"
        automations = runtime.automations
        jobs: list[Job] = []
        runs: list[Any] = []
        heartbeat = None
        zone = runtime.clock.zone_name
        if automations is not None:
            zone = automations.zone
            states = None if show_all else ("active", "paused", "disabled")
            found, runs, heartbeat = await asyncio.gather(
                asyncio.to_thread(automations.jobs.jobs, states=states),
                asyncio.to_thread(automations.jobs.runs, None, HISTORY),
                asyncio.to_thread(automations.jobs.get_managed, "heartbeat"),
            )
            jobs = [j for j in found if j.managed is None]
        intents_store = runtime.agent.intents
        now = time.time()
        await asyncio.to_thread(intents_store.expire_due, now=now)
        intents = await asyncio.to_thread(intents_store.intents, include_ended=show_all)
        by_id = {j.id: j for j in jobs}
        if heartbeat is not None:
            by_id[heartbeat.id] = heartbeat

        def next_run(job: Job) -> str:
            return local_text(job.upcoming, zone) if job.upcoming else "—"

        return await self.ctx.render(
            request,
            "pages/automations.html",
            enabled=automations is not None,
            scheduler_running=self.ctx.services.get("gateway") is not None,
            jobs=jobs,
            runs=runs,
            job_of=by_id.get,
            heartbeat=heartbeat,
            heartbeat_config=self.ctx.settings.heartbeat,
            intents=intents,
            zone=zone,
            show_all=show_all,
            describe=describe,
            next_run=next_run,
            local=lambda dt: local_text(dt, zone),
            duration=human_duration,
            notice=notice_of(self.ctx, request),
            when=lambda ts: owner_time(self.ctx, ts),
        )

    async def change_job(self, request: web.Request) -> web.StreamResponse:
        job_id = int(request.match_info["job_id"])
        action = request.match_info["action"]
        automations = self.ctx.runtime.automations
        if action not in ACTIONS:
            raise web.HTTPNotFound()
        if automations is None:
            raise done(
                self.ctx,
                "/automations",
                "Automations are off ([automations] enabled = false).",
                ok=False,
            )
        jobs, scheduler = automations.jobs, automations.scheduler
        job = await asyncio.to_thread(jobs.get, job_id)
        if job is None:
            raise done(self.ctx, "/automations", f"There is no job #{job_id}.", ok=False)
        now = datetime.now(UTC)
        try:
            if action == "cancel":
                updated = await scheduler.cancel(job_id)
            elif action == "run":
                if job.state not in ("active", "paused"):
                    raise ScheduleError(f"Job #{job_id} is {job.state}; resume it first.")
                updated = await asyncio.to_thread(jobs.run_now, job_id, now)
            else:
                state: State = "paused" if action == "pause" else "active"
                updated = await asyncio.to_thread(jobs.set_state, job_id, state, now)
        except ScheduleError as exc:
            raise done(self.ctx, "/automations", str(exc), ok=False) from None
        await scheduler.resync()  # armed or disarmed now (a scheduler not started only records)
        assert updated is not None
        verb = {
            "pause": "paused",
            "resume": "resumed",
            "cancel": "cancelled",
            "run": "will run now",
        }
        nxt = (
            f"; next run {local_text(updated.next_run_utc, automations.zone)}"
            if updated.state == "active" and updated.next_run_utc and action != "run"
            else ""
        )
        raise done(
            self.ctx,
            "/automations",
            f"Job #{job_id} ({describe(updated.schedule)}) {verb[action]}{nxt}.",
        )

    async def cancel_intent(self, request: web.Request) -> web.StreamResponse:
        intent_id = int(request.match_info["intent_id"])
        store = self.ctx.runtime.agent.intents
        try:
            intent = await asyncio.to_thread(store.cancel, intent_id, now=time.time())
        except IntentError as exc:
            raise done(self.ctx, "/automations", str(exc), ok=False) from None
        raise done(
            self.ctx, "/automations", f"Cancelled standing intent #{intent.id} ({intent.action})."
        )
