"""`pinch jobs`: list, show, run, pause, resume, cancel, history."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from click.testing import CliRunner

from app.automations.jobs import Jobs, NewJob, Schedule, Target
from app.cli.main import main
from app.config import load_settings
from memory.store.db import open_database
from memory.store.jobs_store import SqliteJobStore


def add_job(zone: str = "Europe/Berlin") -> int:
    settings = load_settings()
    store = Jobs(SqliteJobStore(open_database(settings.database_path, vector_backend="numpy")))
    now = datetime.now(UTC)
    job = store.create(
        NewJob(
            Schedule("cron", "0 9 * * *", zone, now),
            "reminder",
            "check the train tickets",
            Target("telegram", "111"),
            "main:telegram:direct:owner",
            owner_private=True,
        ),
        now,
    )
    run_id = store.claim(job, job.next_run_utc, job.next_run_utc + timedelta(days=1), now)  # type: ignore[arg-type,operator]
    assert run_id is not None
    store.finish_run(run_id, "late", now, 7800, "late by 2 h 10 min: Pinch was not running")
    store.close()
    return job.id


def pinch(*args: str) -> str:
    result = CliRunner().invoke(main, ["jobs", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_list_shows_the_schedule_and_next_run_in_the_jobs_zone() -> None:
    add_job()
    out = pinch("list")
    assert '#1 active reminder cron "0 9 * * *" in Europe/Berlin' in out
    assert re.search(r"09:00 CES?T \(Europe/Berlin\)", out)  # CEST from late March


def test_a_time_in_utc_names_the_zone_once() -> None:
    add_job("UTC")
    out = pinch("list")
    assert "09:00 UTC" in out
    assert "UTC (UTC)" not in out


def test_show_and_history_show_the_runs_with_their_lateness() -> None:
    add_job()
    assert "late, late by 2 h 10 min" in pinch("show", "1")
    assert "late, late by 2 h 10 min" in pinch("history")


def test_history_says_how_many_runs_a_coalesced_run_stood_for() -> None:
    import asyncio

    from app.automations.scheduler import Scheduler

    settings = load_settings()
    store = Jobs(SqliteJobStore(open_database(settings.database_path, vector_backend="numpy")))
    t0 = datetime(2026, 12, 1, 7, tzinfo=UTC)
    job = store.create(
        NewJob(
            Schedule("every", "300", "Europe/Berlin", t0 + timedelta(minutes=5)),
            "reminder",
            "stretch",
            Target("telegram", "111"),
            "main:telegram:direct:owner",
            owner_private=True,
        ),
        t0,
    )

    async def deliver(message: object) -> None:
        pass

    async def no_turn(request: object) -> str:
        raise AssertionError

    later = t0 + timedelta(hours=5, minutes=5, seconds=10)
    scheduler = Scheduler(store, deliver=deliver, run_turn=no_turn, now=lambda: later)
    asyncio.run(scheduler.fire(job.id))
    store.close()
    out = pinch("history")
    assert "#1 due Tue 2026-12-01 13:05 CET (Europe/Berlin): ok — 60 earlier runs missed" in out


def test_pause_resume_cancel_change_the_state_and_say_so() -> None:
    add_job()
    assert 'Job #1 (cron "0 9 * * *" in Europe/Berlin) paused.' in pinch("pause", "1")
    assert "paused" in pinch("list")
    out = pinch("resume", "1")
    assert "resumed; next run" in out and re.search(r"09:00 CES?T \(Europe/Berlin\)", out)
    assert "Europe/Berlin) cancelled." in pinch("cancel", "1")
    assert "cancelled" in pinch("list", "--all")


def test_run_makes_the_job_due_now() -> None:
    add_job()
    assert "will run now; next run" in pinch("run", "1")


def test_an_unknown_job_is_one_line_of_advice() -> None:
    pinch("list")
    result = CliRunner().invoke(main, ["jobs", "show", "9"])
    assert result.exit_code == 1 and "There is no job #9" in result.output


def ended_jobs() -> tuple[int, int]:
    """A one-shot that has run (done) and a cancelled daily job."""
    settings = load_settings()
    store = Jobs(SqliteJobStore(open_database(settings.database_path, vector_backend="numpy")))
    now = datetime.now(UTC)
    done = store.create(
        NewJob(
            Schedule("at", "1h", "Europe/Berlin", now + timedelta(hours=1)),
            "reminder",
            "delivered once",
            Target("telegram", "111"),
            "main:telegram:direct:owner",
            owner_private=True,
        ),
        now,
    )
    store.mark_done(done.id)
    cancelled = add_job()
    store.set_state(cancelled, "cancelled", now)
    store.close()
    return done.id, cancelled


def test_a_done_or_cancelled_job_cannot_be_resumed_or_paused() -> None:
    done, cancelled = ended_jobs()
    for verb, job_id, state in (
        ("resume", done, "done"),
        ("pause", done, "done"),
        ("resume", cancelled, "cancelled"),
        ("pause", cancelled, "cancelled"),
    ):
        result = CliRunner().invoke(main, ["jobs", verb, str(job_id)])
        assert result.exit_code == 1, result.output
        assert f"Job #{job_id} is {state}" in result.output
        assert "Ask Pinch for a new one." in result.output
    out = pinch("list", "--all")
    assert f"#{done} done" in out and f"#{cancelled} cancelled" in out


def test_a_done_or_cancelled_job_has_no_next_run() -> None:
    done, _ = ended_jobs()
    out = pinch("list", "--all")
    for line in out.splitlines():
        assert "; next —:" in line, line
    assert "next run: —" in pinch("show", str(done))
