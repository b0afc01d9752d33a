"""`pinch jobs …`: the owner's view of reminders and scheduled tasks (added to `pinch` in
app/cli/main.py). Changes are written to the agent database; a running gateway picks them up
within `RESYNC_S` (30 s)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

import click

from app.cli.support import friendly_errors, load_settings

if TYPE_CHECKING:
    from app.automations.jobs import Job, Jobs

F = TypeVar("F", bound=Callable[..., Any])


def _store() -> Jobs:
    from app.automations.jobs import Jobs
    from app.store_factory import open_agent_database
    from memory.store.backends import store_for

    settings = load_settings()
    return Jobs(store_for("JobStore", open_agent_database(settings)))


def _job_or_fail(store: Jobs, job_id: int) -> Job:
    job = store.get(job_id)
    if job is None:
        raise click.ClickException(
            f"There is no job #{job_id}: `pinch jobs list --all` lists them."
        )
    return job


def _with_store(fn: F) -> F:
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        store = _store()
        try:
            return fn(store, *args, **kwargs)
        finally:
            store.close()

    return friendly_errors(wrapper)  # type: ignore[return-value]


def _now() -> datetime:
    return datetime.now(UTC)


@click.group()
def jobs() -> None:
    """Reminders and scheduled tasks: list, show, run, pause, resume, cancel, history."""


@jobs.command("list")
@click.option("--all", "show_all", is_flag=True, help="Also cancelled, done and disabled jobs.")
@_with_store
def jobs_list(store: Jobs, show_all: bool) -> None:
    """The active and paused jobs (times in each job's zone)."""
    from app.automations.schedules import summary

    found = store.jobs() if show_all else store.jobs(states=("active", "paused", "disabled"))
    if not found:
        click.echo("No jobs. Ask Pinch: “remind me tomorrow at 9 to check the train tickets”.")
    for job in found:
        failing = f" ({job.consecutive_failures} failures)" if job.consecutive_failures else ""
        click.echo(summary(job) + failing)


@jobs.command("show")
@click.argument("job_id", type=int)
@_with_store
def jobs_show(store: Jobs, job_id: int) -> None:
    """One job in full, with its last runs."""
    from app.automations.schedules import describe, local_text

    job = _job_or_fail(store, job_id)
    s, t = job.schedule, job.target
    nxt = local_text(job.upcoming, s.tz) if job.upcoming else "—"
    rows = [
        ("job", f"#{job.id} ({job.managed or job.payload})"),
        ("state", job.state),
        ("schedule", describe(s)),
        ("zone", s.tz),
        ("next run", nxt),
        (
            "delivers to",
            f"{t.channel} {t.chat_id}" + (f" thread {t.thread_id}" if t.thread_id else ""),
        ),
        ("created in", job.creator_key + (" (owner's private chat)" if job.owner_private else "")),
        ("failures", str(job.consecutive_failures)),
        ("text", job.text),
    ]
    for name, value in rows:
        click.echo(f"{name:>12}: {value}")
    _print_runs(store, job_id, limit=10)


@jobs.command("history")
@click.option("--job", "job_id", type=int, default=None, help="Only this job's runs.")
@click.option("--limit", type=int, default=30, show_default=True)
@_with_store
def jobs_history(store: Jobs, job_id: int | None, limit: int) -> None:
    """The latest runs: when due, status (ok, late, missed, failed, cancelled), note."""
    _print_runs(store, job_id, limit=limit)


def _print_runs(store: Jobs, job_id: int | None, *, limit: int) -> None:
    from app.automations.durations import human_duration
    from app.automations.schedules import local_text

    runs = store.runs(job_id, limit=limit)
    if not runs:
        click.echo("No runs yet.")
    for r in runs:
        job = store.get(r.job_id)
        tz = job.schedule.tz if job else "UTC"
        late = f", late by {human_duration(r.late_by_s)}" if r.late_by_s >= 60 else ""
        text = r.note or ""
        if late and text.startswith("late by") and ": " in text:
            text = text.split(": ", 1)[1]  # said once: "late, late by 2 h — Pinch was not …"
        note = f" — {text}" if text else ""
        click.echo(f"#{r.job_id} due {local_text(r.scheduled_for, tz)}: {r.status}{late}{note}")


def _change(verb: str, state: str | None = None) -> Callable[[Jobs, int], None]:
    def command(store: Jobs, job_id: int) -> None:
        from app.automations.schedules import describe, local_text

        job = _job_or_fail(store, job_id)
        if state is None:
            if job.state not in ("active", "paused"):
                raise click.ClickException(f"Job #{job_id} is {job.state}; resume it first.")
            updated = store.run_now(job_id, _now())
        else:
            from app.automations.durations import ScheduleError

            try:
                updated = store.set_state(job_id, state, _now())  # type: ignore[arg-type]
            except ScheduleError as exc:
                raise click.ClickException(str(exc)) from None
        assert updated is not None
        nxt = (
            f"; next run {local_text(updated.next_run_utc, updated.schedule.tz)}"
            if updated.state == "active" and updated.next_run_utc
            else ""
        )
        click.echo(
            f"Job #{job_id} ({describe(updated.schedule)}) {verb}{nxt}. "
            "A running gateway picks this up within 30 s."
        )

    return command


for _name, _verb, _state, _help in (
    ("run", "will run now", None, "Run job ID now (by the running gateway)."),
    ("pause", "paused", "paused", "Pause job ID: nothing runs until it is resumed."),
    ("resume", "resumed", "active", "Resume job ID from its next time (failures reset)."),
    ("cancel", "cancelled", "cancelled", "Cancel job ID; its history is kept."),
):
    jobs.command(_name, help=_help)(
        click.argument("job_id", type=int)(_with_store(_change(_verb, _state)))
    )
