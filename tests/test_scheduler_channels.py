"""Scheduled messages reach real Telegram and Slack adapters (against their fake servers)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent.requests import AgentRequest
from app.automations.assembly import deliver_via
from app.automations.jobs import Jobs, NewJob, Schedule, Target
from app.automations.scheduler import AutomationSettings, Scheduler
from memory.store.db import open_database
from memory.store.jobs_store import SqliteJobStore
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram_support import running as telegram_running
from tests.test_slack import running as slack_running

T0 = datetime(2026, 12, 1, 7, tzinfo=UTC)


def run(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(test(*args, **kwargs), 30))

    return wrapper


async def no_turn(request: AgentRequest) -> str:
    raise AssertionError("a reminder makes no model call")


def scheduler_for(store: Jobs, channels: dict[str, Any], **options: Any) -> Scheduler:
    """A scheduler delivering over `channels`, an hour after T0 unless `now` is given."""
    options.setdefault("now", lambda: T0 + timedelta(hours=1))
    return Scheduler(store, deliver=deliver_via(channels), run_turn=no_turn, **options)


def due_reminder(tmp_path: Path, target: Target) -> tuple[Jobs, int]:
    store = Jobs(SqliteJobStore(open_database(tmp_path / "agent.sqlite", vector_backend="numpy")))
    job = store.create(
        NewJob(
            Schedule("at", "x", "Europe/Berlin", T0 + timedelta(hours=1)),
            "reminder",
            "**check** the train tickets",
            target,
            "main:telegram:direct:owner",
            True,
        ),
        T0,
    )
    return store, job.id


@run
async def test_a_reminder_reaches_the_telegram_chat_that_asked(tmp_path: Path) -> None:
    store, job = due_reminder(tmp_path, Target("telegram", "111"))
    with FakeTelegram() as tg:
        async with telegram_running(tg, tmp_path) as (channel, _):
            scheduler = scheduler_for(store, {"telegram": channel})
            await scheduler.fire(job)
        [call] = tg.calls_to("sendMessage")
    assert str(call.params["chat_id"]) == "111"
    assert tg.sent[-1].text == "check the train tickets"  # the Markdown rendered by the adapter
    assert store.runs(job)[0].status == "ok"


@run
async def test_a_reminder_reaches_the_slack_thread_that_asked(tmp_path: Path) -> None:
    store, job = due_reminder(tmp_path, Target("slack", "C42", "171.2"))
    async with slack_running(tmp_path) as (slack, channel, _):
        scheduler = scheduler_for(store, {"slack": channel})
        await scheduler.fire(job)
        [call] = slack.calls_to("chat.postMessage")
    assert call.params["channel"] == "C42" and call.params["thread_ts"] == "171.2"
    assert "check" in str(call.params["text"])


@run
async def test_a_reminder_for_a_channel_not_running_fails_and_is_retried(tmp_path: Path) -> None:
    store, job = due_reminder(tmp_path, Target("slack", "C42"))
    scheduler = scheduler_for(store, {})
    await scheduler.fire(job)
    assert store.runs(job)[0].status == "failed"
    assert "no slack channel is running" in (store.runs(job)[0].note or "")
    assert store.get(job).next_run_utc == T0 + timedelta(hours=1, seconds=30)  # type: ignore[union-attr]


@run
async def test_an_owners_reminder_whose_channel_is_not_running_reaches_them_on_another(
    tmp_path: Path,
) -> None:
    store, job = due_reminder(tmp_path, Target("slack", "D9"))
    with FakeTelegram() as tg:
        async with telegram_running(tg, tmp_path) as (channel, _):
            scheduler = scheduler_for(
                store,
                {"telegram": channel},
                settings=AutomationSettings(owner_chats=(Target("telegram", "111"),)),
            )
            await scheduler.fire(job)
        [call] = tg.calls_to("sendMessage")
    assert str(call.params["chat_id"]) == "111"
    assert store.runs(job)[0].status == "ok"


@run
async def test_a_failure_alert_goes_to_the_owner_on_a_channel_that_works(tmp_path: Path) -> None:
    store = Jobs(SqliteJobStore(open_database(tmp_path / "agent.sqlite", vector_backend="numpy")))
    group = store.create(
        NewJob(
            Schedule("every", "3600", "Europe/Berlin", T0 + timedelta(hours=1)),
            "reminder",
            "stand-up",
            Target("slack", "C42"),  # a group chat on Slack, which does not run here
            "main:slack:channel:C42",
            False,
        ),
        T0,
    ).id
    now = [T0 + timedelta(hours=1)]
    with FakeTelegram() as tg:
        async with telegram_running(tg, tmp_path) as (channel, _):
            scheduler = scheduler_for(
                store,
                {"telegram": channel},
                settings=AutomationSettings(owner_chats=(Target("telegram", "111"),)),
                now=lambda: now[0],
            )
            for _ in range(2):
                await scheduler.fire(group)
                now[0] = store.get(group).next_run_utc  # type: ignore[union-attr,assignment]
        calls = tg.calls_to("sendMessage")
        sent = [(str(c.params["chat_id"]), str(c.params["text"])) for c in calls]
    assert [r.status for r in store.runs(group)] == ["failed", "failed"]
    [(chat, alert)] = sent  # the reminder itself never goes to the owner's private chat
    assert chat == "111" and "failed 2 times in a row" in alert and "no slack channel" in alert
