"""Putting automations together: the jobs, the scheduler and the schedule tool, built once by
the composition root (app/wiring.py) and started by the gateway.

    automations = build_automations(settings, db, clock)    # blocking: creates the tables
    tools.add(automations.tool)                              # the agent's `schedule` tool
    scheduler = await start_automations(runtime, channels)   # in the gateway, after its channels

The schedule tool receives the scheduler itself (it arms new jobs at once); a scheduler that never
starts (in `pinch chat`) only records what the tool changed, and the gateway's picks it up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from agent.requests import AgentRequest, Final
from agent.tools import Tool
from app.automations.durations import ScheduleError, parse_active_hours, parse_duration
from app.automations.jobs import Jobs, NewJob, Schedule
from app.automations.schedule_tool import schedule_tool
from app.automations.scheduler import (
    AutomationSettings,
    ChannelNotRunning,
    Deliver,
    Now,
    RunTurn,
    Scheduler,
    utcnow,
)
from app.automations.schedules import zone
from app.channel_registry import Owners
from channels.base import Channel, OutboundMessage
from common.clock import Clock
from memory.store.backends import store_for
from memory.store.db import Database
from memory.store.sessions import SessionKey

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Automations:
    """What one process holds of automations: the jobs, the scheduler, the schedule tool."""

    jobs: Jobs
    scheduler: Scheduler
    tool: Tool
    zone: str  # the owner's IANA zone the jobs are read in


class AutomationsHost(Protocol):
    """What `start_automations` needs of the running process (app/wiring.py's `Runtime`)."""

    settings: Any
    agent: Any
    automations: Automations | None


def owner_zone(clock: Clock) -> str:
    """The IANA name of the owner's zone (the clock's, from common/clock.py); "UTC" (logged)
    when the machine's zone has none."""
    name = clock.zone_name
    try:
        zone(name)
    except ScheduleError:
        log.warning(
            'The local time zone "%s" has no IANA name; jobs use UTC. Set [agent] timezone '
            '(e.g. "Europe/Berlin") for times in your zone.',
            name,
        )
        return "UTC"
    return name


def build_automations(
    settings: Any, db: Database, clock: Clock, *, now: Now = utcnow
) -> Automations:
    """The jobs over `db`, a scheduler (not started) and the `schedule` tool that arms jobs in
    it. Blocking (creates the automation tables): call it in a worker thread."""
    zone_name = owner_zone(clock)
    owners = Owners.from_settings(settings)
    hb = settings.heartbeat
    jobs = Jobs(store_for("JobStore", db))
    scheduler = Scheduler(
        jobs,
        settings=AutomationSettings(
            misfire_grace_s=settings.automations.misfire_grace_s,
            agent_id=settings.agent_id,
            workspace=settings.workspace_dir,
            heartbeat_active_hours=parse_active_hours(hb.active_hours) if hb.active_hours else None,
            owner_tz=zone_name,
            owner_chats=owners.chats(),
            shared_jobs=settings.store.backend == "postgres",
        ),
        now=now,
    )
    tool = schedule_tool(jobs, zone=zone_name, route=owners.route, scheduler=scheduler)
    return Automations(jobs, scheduler, tool, zone_name)


def keep_heartbeat(automations: Automations, settings: Any, now: Now = utcnow) -> None:
    """Create, update or cancel the managed heartbeat job from `[heartbeat]` (blocking)."""
    hb = settings.heartbeat
    chats = automations.scheduler.settings.owner_chats
    target = chats[0] if chats else None  # the main session's chat
    if hb.every and target is not None:
        seconds = parse_duration(hb.every)
        automations.jobs.replace_managed(
            NewJob(
                Schedule(
                    "every", str(seconds), automations.zone, now() + timedelta(seconds=seconds)
                ),
                "heartbeat",
                "heartbeat",
                target,
                str(SessionKey.owner_main(settings.agent_id)),
                owner_private=True,
                managed="heartbeat",
            ),
            now(),
        )
    else:
        if hb.every:
            log.warning("The heartbeat needs an owner id in [owners] to deliver to; it is off.")
        automations.jobs.remove_managed("heartbeat")


def agent_turn(agent: Any) -> RunTurn:
    """A `RunTurn` over `agent.run`: the stored reply text of one turn."""

    async def run(request: AgentRequest) -> str:
        text = ""
        async for event in agent.run(request):
            if isinstance(event, Final):
                text = event.reply.text
        return text

    return run


def deliver_via(channels: Mapping[str, Channel]) -> Deliver:
    """A `Deliver` over the gateway's running channels. A channel that is not running raises
    `ChannelNotRunning`, so the run counts as failed and is retried with backoff (or, for the
    owner's own jobs, goes to their chat on a channel that runs)."""

    async def deliver(message: OutboundMessage) -> None:
        channel = channels.get(message.channel)
        if channel is None:
            raise ChannelNotRunning(
                f"no {message.channel} channel is running to deliver to; configure it "
                "or cancel the job"
            )
        await channel.send(message)

    return deliver


async def start_automations(
    runtime: AutomationsHost, channels: Mapping[str, Channel]
) -> Scheduler | None:
    """Start the runtime's scheduler in the running gateway, delivering through `channels`
    (None when `[automations]` is off). Also brings the managed heartbeat job in line with
    `[heartbeat]`.

    The gateway calls this after its channels started and `await scheduler.stop()` before
    stopping them; its one-gateway lock keeps a second process from running jobs (each run is
    also claimed in the database)."""
    automations = runtime.automations
    if not runtime.settings.automations.enabled or automations is None:
        return None
    scheduler = automations.scheduler
    await asyncio.to_thread(keep_heartbeat, automations, runtime.settings, scheduler.now)
    await scheduler.start(deliver=deliver_via(channels), run_turn=agent_turn(runtime.agent))
    return scheduler
