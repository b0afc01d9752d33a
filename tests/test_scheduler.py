"""The scheduler's behaviour, with a controllable clock: on time, late, missed, once, failures,
cancellation, payloads, restart. One test runs the real timer in a real loop."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.requests import AgentRequest
from app.automations.checklist import heartbeat_items
from app.automations.jobs import Jobs, NewJob, Schedule, Target
from app.automations.scheduler import AutomationSettings, Scheduler
from channels.base import OutboundMessage
from memory.store.db import open_database
from memory.store.jobs_store import SqliteJobStore

T0 = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)
CHAT = Target("telegram", "42")
OWNER_KEY = "main:telegram:direct:owner"


def run(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(test(*args, **kwargs), 20))

    return wrapper


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.t = now

    def __call__(self) -> datetime:
        return self.t

    def advance(self, **kw: float) -> None:
        self.t += timedelta(**kw)


class Harness:
    """A job store on a real SQLite file, a clock, delivered messages and agent turns."""

    def __init__(self, path: Path, clock: Clock | None = None, **settings: Any) -> None:
        self.db = open_database(path / "agent.sqlite", vector_backend="numpy")
        self.store = Jobs(SqliteJobStore(self.db))
        self.clock = clock or Clock()
        self.sent: list[OutboundMessage] = []
        self.turns: list[AgentRequest] = []
        self.replies: list[str | BaseException] = []
        self.scheduler = Scheduler(
            self.store,
            deliver=self.deliver,
            run_turn=self.turn,
            now=self.clock,
            settings=AutomationSettings(**settings),
        )

    async def deliver(self, msg: OutboundMessage) -> None:
        self.sent.append(msg)

    async def turn(self, request: AgentRequest) -> str:
        self.turns.append(request)
        reply = self.replies.pop(0) if self.replies else "done"
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def add(
        self,
        kind: str,
        spec: str,
        payload: str = "reminder",
        text: str = "check the train tickets",
        *,
        anchor: datetime | None = None,
        private: bool = True,
        tz: str = "Europe/Berlin",
    ) -> int:
        schedule = Schedule(kind, spec, tz, anchor or self.clock() + timedelta(hours=1))  # type: ignore[arg-type]
        job = self.store.create(
            NewJob(schedule, payload, text, CHAT, OWNER_KEY, owner_private=private),  # type: ignore[arg-type]
            self.clock(),
        )
        return job.id


def texts(h: Harness) -> list[str]:
    return [m.text for m in h.sent]


@run
async def test_a_reminder_is_delivered_verbatim_to_its_chat_without_a_model_call(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    job = h.add("at", "x")
    h.clock.advance(hours=1)
    await h.scheduler.fire(job)
    assert h.sent == [OutboundMessage("telegram", "42", "check the train tickets")]
    assert h.turns == []
    assert h.store.get(job).state == "done"  # type: ignore[union-attr]
    assert [r.status for r in h.store.runs(job)] == ["ok"]


@run
async def test_nothing_runs_early(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    job = h.add("at", "x")
    h.clock.advance(minutes=59)
    await h.scheduler.fire(job)
    assert h.sent == [] and h.store.runs(job) == []


@run
async def test_a_run_late_within_the_grace_runs_now_and_says_how_late(tmp_path: Path) -> None:
    h = Harness(tmp_path, misfire_grace_s=3 * 3600)
    job = h.add("at", "x")
    h.clock.advance(hours=1 + 2, minutes=10)  # Pinch was down for 2 h 10 min past the time
    await h.scheduler.fire(job)
    assert texts(h) == ["check the train tickets\n\n_(late by 2 h 10 min: Pinch was not running)_"]
    assert h.store.runs(job)[0].status == "late"
    assert h.store.runs(job)[0].late_by_s == pytest.approx(7800)


@run
async def test_a_run_later_than_the_grace_is_reported_missed_and_the_schedule_moves_on(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)  # default grace 1 h
    job = h.add("cron", "0 9 * * *")  # 09:00 Berlin = 08:00 UTC
    h.clock.t = datetime(2026, 12, 1, 10, 30, tzinfo=UTC)  # 11:30 Berlin: 2 h 30 min late
    await h.scheduler.fire(job)
    [missed] = texts(h)
    assert missed.startswith("Missed: the reminder “check the train tickets” (job #1, cron")
    assert "2 h 30 min late" in missed and "Europe/Berlin" in missed
    assert "Next run: Wed 2026-12-02 09:00 CET (Europe/Berlin)" in missed
    assert h.store.runs(job)[0].status == "missed"
    assert h.store.get(job).next_run_utc == datetime(2026, 12, 2, 8, tzinfo=UTC)  # type: ignore[union-attr]


@run
async def test_runs_missed_during_downtime_are_coalesced_into_one(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    job = h.add("every", "600", anchor=T0 + timedelta(minutes=10))
    h.clock.advance(hours=2, minutes=5)  # 12 runs were due; the last one 5 min ago
    await h.scheduler.fire(job)
    await h.scheduler.fire(job)  # a second timer callback for the same moment
    assert len(h.sent) == 1
    assert "late by 5 min" in h.sent[0].text and "11 earlier runs missed" in h.sent[0].text
    assert h.store.get(job).next_run_utc == T0 + timedelta(hours=2, minutes=10)  # type: ignore[union-attr]


@run
async def test_a_missed_notice_says_what_was_missed_shortened(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    job = h.add("at", "x", "task", "Summarise my notes on the Hangzhou trip " * 5)
    h.clock.advance(hours=4)
    await h.scheduler.fire(job)
    [missed] = texts(h)
    assert missed.startswith("Missed: the task “Summarise my notes on the Hangzhou trip")
    assert "…” (job #1, once at" in missed and len(missed) < 400


@run
async def test_runs_coalesced_without_lateness_still_say_how_many_were_missed(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    job = h.add("every", "300", anchor=T0 + timedelta(minutes=5))
    h.clock.t = T0 + timedelta(hours=5, minutes=5, seconds=10)  # down for 5 h; 10 s late
    await h.scheduler.fire(job)
    [sent] = texts(h)
    assert sent == "check the train tickets\n\n_(60 earlier runs missed: Pinch was not running)_"
    [run] = h.store.runs(job)
    assert run.status == "ok" and run.scheduled_for == T0 + timedelta(hours=5, minutes=5)
    assert run.note == "60 earlier runs missed: Pinch was not running"


@run
async def test_a_daily_run_after_a_day_of_downtime_says_one_run_was_missed(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    job = h.add("cron", "0 9 * * *")  # first due Tue 09:00 Berlin
    h.clock.t = datetime(2026, 12, 2, 8, 0, 20, tzinfo=UTC)  # Wed 09:00:20 Berlin
    await h.scheduler.fire(job)
    assert texts(h) == [
        "check the train tickets\n\n_(1 earlier run missed: Pinch was not running)_"
    ]
    assert h.store.runs(job)[0].scheduled_for == datetime(2026, 12, 2, 8, tzinfo=UTC)


@run
async def test_two_schedulers_on_one_database_fire_a_job_once(tmp_path: Path) -> None:
    clock = Clock()
    a, b = Harness(tmp_path, clock), Harness(tmp_path, clock)
    job = a.add("at", "x")
    clock.advance(hours=1)
    await asyncio.gather(a.scheduler.fire(job), b.scheduler.fire(job))
    assert len(a.sent) + len(b.sent) == 1
    assert len(a.store.runs(job)) == 1


@run
async def test_a_task_runs_one_automation_turn_in_its_own_thread_of_the_owners_chat(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    h.replies = ["Your calendar notes: nothing today."]
    job = h.add("at", "x", "task", "summarise my calendar notes")
    h.clock.advance(hours=1)
    await h.scheduler.fire(job)
    [turn] = h.turns
    assert turn.sender == "automation" and turn.text == "summarise my calendar notes"
    assert str(turn.key) == f"main:telegram:direct:owner:thread:job%3A{job}"
    assert turn.key.is_owner_direct  # created in the owner's private chat: may see their memory
    assert texts(h) == ["Your calendar notes: nothing today."]


@run
async def test_a_task_not_created_in_the_owners_private_chat_never_runs_in_it(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    job = h.add("at", "x", "task", "post the weekly summary", private=False)
    h.clock.advance(hours=1)
    await h.scheduler.fire(job)
    assert not h.turns[0].key.is_owner_direct


@run
async def test_a_task_whose_agent_already_delivered_sends_no_second_copy(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.replies = ["NO_REPLY"]
    job = h.add("at", "x", "task", "check and tell me")
    h.clock.advance(hours=1)
    await h.scheduler.fire(job)
    assert h.sent == [] and h.store.runs(job)[0].status == "ok"


@run
async def test_a_failure_alert_sent_to_the_chat_names_no_server_path(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    job = h.add("every", "60", "task", "flaky", anchor=T0 + timedelta(minutes=1))
    advice = "model down: check api_base in /srv/pinch-home/config.toml and the network"
    h.replies = [RuntimeError(advice)] * 2
    h.clock.advance(minutes=1)
    for _ in range(2):
        await h.scheduler.fire(job)
        j = h.store.get(job)
        assert j is not None and j.next_run_utc is not None
        h.clock.t = j.next_run_utc
    [alert] = [t for t in texts(h) if "failed" in t]
    assert "/srv/pinch-home" not in alert and "config.toml on the server" in alert


@run
async def test_failures_back_off_alert_after_two_and_disable_after_ten(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    job = h.add("every", "60", "task", "flaky", anchor=T0 + timedelta(minutes=1))
    h.replies = [RuntimeError("model down")] * 10
    h.clock.advance(minutes=1)
    gaps = []
    for _ in range(10):
        await h.scheduler.fire(job)
        j = h.store.get(job)
        assert j is not None
        if j.state == "active":
            assert j.next_run_utc is not None
            gaps.append((j.next_run_utc - h.clock()).total_seconds())
            h.clock.t = j.next_run_utc
    assert gaps[:5] == [30, 60, 300, 900, 3600]  # the backoff, not the 60 s interval
    alerts = [t for t in texts(h) if "failed" in t]
    assert len(alerts) == 2
    assert "failed 2 times in a row (model down)" in alerts[0]
    assert "failed 10 times in a row and is now disabled" in alerts[1]
    assert h.store.get(job).state == "disabled"  # type: ignore[union-attr]
    assert h.store.get(job).consecutive_failures == 10  # type: ignore[union-attr]


@run
async def test_a_failed_one_shot_retries_after_thirty_seconds(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    job = h.add("at", "x", "task", "try")
    h.replies = [RuntimeError("boom"), "fine"]
    h.clock.advance(hours=1)
    await h.scheduler.fire(job)
    assert h.store.get(job).next_run_utc == h.clock() + timedelta(seconds=30)  # type: ignore[union-attr]
    h.clock.advance(seconds=30)
    await h.scheduler.fire(job)
    assert texts(h) == ["fine"] and h.store.get(job).state == "done"  # type: ignore[union-attr]


@run
async def test_a_daily_reminder_that_fails_once_is_retried_then_keeps_its_time(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    job = h.add("cron", "0 9 * * *")  # 09:00 Berlin = 08:00 UTC
    nine = datetime(2026, 12, 1, 8, tzinfo=UTC)
    failures = [ConnectionError("Telegram: 502 Bad Gateway")]

    async def flaky(msg: OutboundMessage) -> None:
        if failures:
            raise failures.pop()
        h.sent.append(msg)

    h.scheduler.deliver = flaky
    h.clock.t = nine
    await h.scheduler.fire(job)
    assert h.store.get(job).next_run_utc == nine + timedelta(seconds=30)  # type: ignore[union-attr]
    h.clock.t = nine + timedelta(seconds=30)
    await h.scheduler.fire(job)
    assert texts(h) == ["check the train tickets"]
    assert [r.status for r in h.store.runs(job)] == ["ok", "failed"]
    assert h.store.get(job).next_run_utc == nine + timedelta(days=1)  # type: ignore[union-attr]
    assert h.store.get(job).consecutive_failures == 0  # type: ignore[union-attr]


@run
async def test_cancel_while_running_stops_the_run_and_nothing_more_fires(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    job = h.add("every", "600", "task", "slow", anchor=T0 + timedelta(minutes=10))
    started, never = asyncio.Event(), asyncio.Event()

    async def slow(request: AgentRequest) -> str:
        started.set()
        await never.wait()
        return "too late"

    h.scheduler.run_turn = slow
    h.clock.advance(minutes=10)
    firing = asyncio.ensure_future(h.scheduler.fire(job))
    await started.wait()
    await h.scheduler.cancel(job)
    await firing
    assert h.sent == []
    assert h.store.get(job).state == "cancelled"  # type: ignore[union-attr]
    assert h.store.runs(job)[0].status == "cancelled"
    h.clock.advance(minutes=10)
    await h.scheduler.fire(job)
    assert h.sent == [] and len(h.store.runs(job)) == 1


@run
async def test_a_restart_re_arms_jobs_from_the_table_without_duplicates(tmp_path: Path) -> None:
    # The real timer runs here: the jobs must be due after the real now, not after T0.
    h = Harness(tmp_path, clock=Clock(datetime.now(UTC)))
    jobs = [h.add("at", "x"), h.add("cron", "0 9 * * *")]
    for _ in range(2):  # start, stop, start again (a restart), and a resync on top
        await h.scheduler.start()
        await h.scheduler.resync()
        ids = h.scheduler.armed_ids
        assert sorted(ids) == sorted(["pinch-resync", *(f"pinch-job-{j}" for j in jobs)])
        await h.scheduler.stop()
    h2 = Harness(tmp_path, h.clock)  # a new process on the same database
    await h2.scheduler.start()
    assert len(h2.scheduler.armed_ids) == 3
    await h2.scheduler.stop()


@run
async def test_a_job_due_in_a_fifth_of_a_second_is_delivered_by_the_real_timer(
    tmp_path: Path,
) -> None:
    delivered = asyncio.Event()
    h = Harness(tmp_path, clock=Clock(datetime.now(UTC)))
    h.scheduler.now = lambda: datetime.now(UTC)

    async def deliver(msg: OutboundMessage) -> None:
        h.sent.append(msg)
        delivered.set()

    h.scheduler.deliver = deliver
    job = h.add("at", "x", anchor=datetime.now(UTC) + timedelta(seconds=0.2))
    await h.scheduler.start()
    try:
        await asyncio.wait_for(delivered.wait(), 5)
    finally:
        await h.scheduler.stop()
    assert texts(h) == ["check the train tickets"]
    assert h.store.runs(job)[0].late_by_s < 1.0


def test_heartbeat_items_are_the_list_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "HEARTBEAT.md"
    path.write_text("# Heartbeat\n\nKeep this empty to skip.\n", encoding="utf-8")
    assert heartbeat_items(path) == ""
    path.write_text(
        "# Heartbeat\n- check the inbox folder\n1. any reminder due?\n", encoding="utf-8"
    )
    assert heartbeat_items(path) == "- check the inbox folder\n1. any reminder due?"


@run
async def test_heartbeat_without_items_makes_no_model_call(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "HEARTBEAT.md").write_text("# Heartbeat\n", encoding="utf-8")
    h = Harness(tmp_path, workspace=ws)
    job = h.add("every", "1800", "heartbeat", "heartbeat", anchor=T0 + timedelta(minutes=30))
    h.clock.advance(minutes=30)
    await h.scheduler.fire(job)
    assert h.turns == [] and h.sent == []


@run
async def test_heartbeat_delivers_only_an_answer_other_than_heartbeat_ok(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "HEARTBEAT.md").write_text("- anything urgent in inbox/?\n", encoding="utf-8")
    h = Harness(tmp_path, workspace=ws)
    h.replies = [
        "HEARTBEAT_OK",
        "The invoice in inbox/ is due today.",
        " HEARTBEAT_OK. ",
        "HEARTBEAT_OK — except one thing: the passport expires next week.",
    ]
    job = h.add("every", "1800", "heartbeat", "heartbeat", anchor=T0 + timedelta(minutes=30))
    for _ in range(4):
        h.clock.advance(minutes=30)
        await h.scheduler.fire(job)
    # The all-clear alone is never sent; an answer with more to say is, without the token.
    assert texts(h) == [
        "The invoice in inbox/ is due today.",
        "except one thing: the passport expires next week.",
    ]
    assert all(str(t.key) == "main:cli:direct:owner" for t in h.turns)  # the owner's main session
    assert all(t.sender == "automation" for t in h.turns)


@run
async def test_heartbeat_outside_active_hours_makes_no_model_call(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "HEARTBEAT.md").write_text("- anything urgent?\n", encoding="utf-8")
    h = Harness(
        tmp_path, workspace=ws, heartbeat_active_hours=(8 * 60, 22 * 60), owner_tz="Europe/Berlin"
    )
    h.clock.t = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)  # 23:00 Berlin
    job = h.add("every", "1800", "heartbeat", "heartbeat", anchor=h.clock.t + timedelta(minutes=30))
    h.clock.advance(minutes=30)
    await h.scheduler.fire(job)
    assert h.turns == []


@run
async def test_a_one_shot_interrupted_by_a_stop_runs_at_the_next_start(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    job = h.add("at", "x", "task", "slow")
    started = asyncio.Event()

    async def slow(request: AgentRequest) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    h.scheduler.run_turn = slow
    h.clock.advance(hours=1)
    firing = asyncio.ensure_future(h.scheduler.fire(job))
    await started.wait()
    await h.scheduler.stop()
    await firing
    assert h.store.runs(job)[0].note == "interrupted: Pinch stopped"
    assert h.store.get(job).next_run_utc == T0 + timedelta(hours=1)  # type: ignore[union-attr]
    h2 = Harness(tmp_path, h.clock)  # the restart, five minutes later
    h2.replies = ["done at last"]
    h.clock.advance(minutes=5)
    await h2.scheduler.fire(job)
    assert texts(h2) == ["done at last\n\n_(late by 5 min: Pinch was not running)_"]


@run
async def test_a_one_shot_whose_process_died_mid_run_is_retried_after_the_lease(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path, clock=Clock(datetime.now(UTC)))  # the real timer starts below
    job = h.add("at", "x")
    h.clock.advance(hours=1)
    j = h.store.get(job)
    assert j is not None and j.next_run_utc is not None
    # The dead process claimed the run (a lease) and never finished it.
    assert h.store.claim(j, j.next_run_utc, h.clock() + timedelta(minutes=10), h.clock())
    h2 = Harness(tmp_path, h.clock)
    await h2.scheduler.start()
    await h2.scheduler.stop()
    assert h2.store.runs(job)[0].status == "cancelled"  # the stale 'running' row is closed
    await h2.scheduler.fire(job)
    assert h2.sent == []  # not before the lease ends
    h.clock.advance(minutes=10)
    await h2.scheduler.fire(job)
    assert texts(h2) == ["check the train tickets\n\n_(late by 10 min: Pinch was not running)_"]


@run
async def test_a_one_shot_resumed_after_its_time_runs_on_resume_not_missed(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    job = h.add("at", "x")
    h.store.set_state(job, "paused", h.clock())
    h.clock.advance(hours=5)
    h.store.set_state(job, "active", h.clock())
    await h.scheduler.fire(job)
    assert texts(h) == ["check the train tickets"]


@run
async def test_run_now_runs_a_future_one_shot_once_and_on_time(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    job = h.add("at", "x")
    h.store.run_now(job, h.clock())
    await h.scheduler.fire(job)
    h.clock.advance(hours=2)
    await h.scheduler.fire(job)
    assert texts(h) == ["check the train tickets"]


def test_heartbeat_items_inside_comments_do_not_count(tmp_path: Path) -> None:
    path = tmp_path / "HEARTBEAT.md"
    path.write_text("# Heartbeat\n<!--\n- an idea for later\n-->\n", encoding="utf-8")
    assert heartbeat_items(path) == ""


@run
async def test_a_run_due_again_when_the_previous_one_ends_is_not_skipped_by_the_timer(
    tmp_path: Path,
) -> None:
    # APScheduler's max_instances=1 would skip it: the job re-arms inside its own callback.
    h = Harness(tmp_path, clock=Clock(datetime.now(UTC)))
    h.scheduler.now = lambda: datetime.now(UTC)
    job = h.add("every", "3600", "task", "t", anchor=datetime.now(UTC) + timedelta(seconds=0.1))
    second = asyncio.Event()

    async def turn(request: AgentRequest) -> str:
        h.turns.append(request)
        if len(h.turns) == 1:
            h.store.run_now(job, datetime.now(UTC))  # `pinch jobs run` during the first run
        else:
            second.set()
        return "ok"

    h.scheduler.run_turn = turn
    await h.scheduler.start()
    try:
        await asyncio.wait_for(second.wait(), 5)
    finally:
        await h.scheduler.stop()
    assert len(h.turns) == 2


@run
async def test_a_job_whose_timer_fires_over_a_second_late_still_runs(tmp_path: Path) -> None:
    # APScheduler's default misfire_grace_time=1 would drop it silently.
    import time as _time

    delivered = asyncio.Event()
    h = Harness(tmp_path, clock=Clock(datetime.now(UTC)))
    h.scheduler.now = lambda: datetime.now(UTC)

    async def deliver(msg: OutboundMessage) -> None:
        h.sent.append(msg)
        delivered.set()

    h.scheduler.deliver = deliver
    job = h.add("at", "x", anchor=datetime.now(UTC) + timedelta(seconds=0.1))
    await h.scheduler.start()
    try:
        _time.sleep(1.3)  # the event loop is blocked (a busy process) past the due time + 1 s
        await asyncio.wait_for(delivered.wait(), 5)
    finally:
        await h.scheduler.stop()
    started = h.store.runs(job)[0].started
    assert (
        started is not None and (started - h.store.runs(job)[0].scheduled_for).total_seconds() > 1
    )


@run
async def test_a_stop_right_after_delivery_does_not_make_a_one_shot_due_again(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    job = h.add("at", "x")
    delivered = asyncio.Event()

    async def deliver(msg: OutboundMessage) -> None:
        h.sent.append(msg)
        delivered.set()

    h.scheduler.deliver = deliver
    h.clock.advance(hours=1)
    firing = asyncio.ensure_future(h.scheduler.fire(job))
    await delivered.wait()
    await h.scheduler.stop()  # cancels the run while it records its success
    await firing
    assert h.store.get(job).state == "done"  # type: ignore[union-attr]
    assert [r.status for r in h.store.runs(job)] == ["ok"]
