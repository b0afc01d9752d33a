"""The `schedule` tool: the owner asks for reminders and scheduled tasks in words.

    tool = schedule_tool(jobs, zone="Europe/Berlin", route=owners.route, scheduler=scheduler)

Offered only in the owner's private chats and run only on the owner's own message
(agent/policy.py: "schedule" is an owner-word tool, refused to automations, so a job's turn
never creates jobs). Every confirmation states the zone. Results go to the chat that asked:
`current_target` (set by the gateway for the turn it runs); for the terminal, which is gone by
the time a job runs, `route(key)`: the owner's chat per `[owners]` (no owner id: refused;
app/channel_registry.py `Owners.route`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Protocol

from agent.tools import Tool, ToolContext, ToolFailure
from agent.types import ToolSpec
from app.automations.durations import ScheduleError, later_by, parse_duration
from app.automations.jobs import Job, Jobs, NewJob, Schedule, Target
from app.automations.schedules import describe, local_text, parse_at, summary
from common.channel_table import CHANNELS, reachable_later
from memory.store.sessions import SessionKey

# The chat the current turn answers (the gateway sets it around a turn).
current_target: ContextVar[Target | None] = ContextVar("pinch_current_target", default=None)

Route = Callable[[SessionKey], Target | None]
# The channels an owner id can be set for (common/channel_table.py), for advice.
_OWNER_KEYS = tuple(row.owners_key for row in CHANNELS if row.owners_key)
_OWNER_CHANNELS = " or ".join(row.title for row in CHANNELS if row.owners_key)


def _title(channel: str) -> str:
    return next((row.title for row in CHANNELS if row.name == channel), channel.title())


class JobTimer(Protocol):
    """What the tool needs of the scheduler (app/automations/scheduler.py `Scheduler`): arm a
    new job at once, cancel one (a run in progress too). A scheduler that is not running (in
    `pinch chat`) only records the change; the gateway's scheduler picks it up."""

    def arm(self, job_id: int, when: datetime) -> None: ...

    async def cancel(self, job_id: int) -> Job | None: ...


def schedule_spec(zone: str) -> ToolSpec:
    return ToolSpec(
        "schedule",
        "Reminders and scheduled tasks, delivered to this chat. create: give text and one of "
        f"when (ISO time, e.g. 2026-12-02T09:00, meaning {zone} without an offset; or a "
        f'delay, e.g. 20m), every (e.g. 30m, 1d) or cron (5 fields in {zone}, e.g. "30 8 * * '
        '1-5"). task=true runs text as a prompt then and sends the answer; else text is sent '
        "as is. list: the active jobs. cancel: by id.",
        {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["create", "list", "cancel"]},
                "text": {"type": "string"},
                "when": {"type": "string"},
                "every": {"type": "string"},
                "cron": {"type": "string"},
                "task": {"type": "boolean"},
                "id": {"type": "integer"},
            },
            "required": ["action"],
        },
    )


def schedule_tool(
    store: Jobs,
    *,
    zone: str,
    route: Route,
    scheduler: JobTimer | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Tool:
    """The `schedule` tool over `store`; `scheduler` (when given) arms and cancels jobs."""

    async def run(ctx: ToolContext, args: Mapping[str, Any]) -> str:
        action = args.get("action")
        if action == "list":
            jobs = await asyncio.to_thread(store.jobs, states=("active", "paused"))
            mine = [j for j in jobs if j.managed is None]
            if not mine:
                return f"No scheduled jobs. (Times are in {zone}.)"
            return "\n".join(summary(j) for j in mine)
        if action == "cancel":
            job_id = args.get("id")
            if not isinstance(job_id, int):
                raise ToolFailure("cancel needs the job's id (see action=list).")
            job = await asyncio.to_thread(store.get, job_id)
            if job is None or job.managed is not None:
                raise ToolFailure(f"There is no job #{job_id}: see action=list.")
            if scheduler is not None:
                await scheduler.cancel(job_id)
            else:
                await asyncio.to_thread(store.set_state, job_id, "cancelled", now())
            return f"Cancelled job #{job_id} ({describe(job.schedule)}; times in {zone})."
        if action != "create":
            raise ToolFailure('action must be "create", "list" or "cancel".')
        asked = current_target.get()
        job = await asyncio.to_thread(_create, store, ctx, args, zone, route, now())
        if scheduler is not None and job.next_run_utc is not None:
            scheduler.arm(job.id, job.next_run_utc)
        asked_in = asked.channel if asked else ctx.key.channel
        return _confirmation(job, asked_in=asked_in)

    return Tool(schedule_spec(zone), run)


def _create(
    store: Jobs,
    ctx: ToolContext,
    args: Mapping[str, Any],
    zone: str,
    route: Route,
    now: datetime,
) -> Job:
    text = str(args.get("text") or "").strip()
    if not text:
        raise ToolFailure("create needs text: the reminder, or the task's prompt.")
    given = [k for k in ("when", "every", "cron") if args.get(k)]
    if len(given) != 1:
        raise ToolFailure("create needs exactly one of when, every or cron.")
    target = current_target.get()
    if target is None or not reachable_later(target.channel):
        # The terminal exists only while `pinch chat` runs (the web page while it is open), and
        # jobs run later: a job asked for there goes to the owner's chat on Telegram or Slack.
        target = route(ctx.key)
    if target is None:
        raise ToolFailure(
            "Nothing could deliver this: scheduled messages are sent by `pinch gateway` to "
            f"your chat on {_OWNER_CHANNELS}, and no owner id is set. Set [owners] "
            f'{_OWNER_KEYS[0]} = ["<your user id>"] (or {" or ".join(_OWNER_KEYS[1:])}) in '
            f"config.toml, or ask from {_OWNER_CHANNELS}."
        )
    try:
        if args.get("when"):
            schedule = Schedule(
                "at", str(args["when"]), zone, parse_at(str(args["when"]), zone, now)
            )
        elif args.get("every"):
            seconds = parse_duration(str(args["every"]))
            schedule = Schedule("every", str(seconds), zone, later_by(now, seconds))
        else:
            schedule = Schedule("cron", " ".join(str(args["cron"]).split()), zone, now)
        new = NewJob(
            schedule,
            "task" if args.get("task") else "reminder",
            text,
            target,
            str(ctx.key),
            owner_private=ctx.policy.owner_private,
        )
        return store.create(new, now)
    except ScheduleError as exc:
        raise ToolFailure(str(exc)) from None


def _confirmation(job: Job, *, asked_in: str | None = None) -> str:
    what = "Task" if job.payload == "task" else "Reminder"
    first = local_text(job.next_run_utc, job.schedule.tz) if job.next_run_utc else "—"
    where = (
        f" It will be sent to your {_title(job.target.channel)} chat by `pinch gateway` "
        f"(the {_title(asked_in).lower()} cannot show it later)."
        if asked_in is not None and not reachable_later(asked_in)
        else ""
    )
    return (
        f"{what} #{job.id} scheduled, {describe(job.schedule)}; first run {first}. "
        f"Times are in {job.schedule.tz}.{where}"
    )
