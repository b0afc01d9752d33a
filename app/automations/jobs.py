"""Jobs: the rules of creating, pausing, failing and replacing scheduled jobs, over a `JobStore`
repository (memory/store/jobs_store.py, where the SQL is).

    jobs = Jobs(SqliteJobStore(db))                       # applies the automation migrations
    job = jobs.create(NewJob(Schedule("cron", "30 8 * * 1-5", "Europe/Berlin", now), "task",
                             "Summarise …", Target("telegram", "42"), creator_key,
                             owner_private=True), now)

When a schedule runs is app/automations/schedules.py; running them is the scheduler's.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from app.automations.durations import ScheduleError
from app.automations.schedules import backoff_s, describe, local_text, next_run, validate
from memory.store.jobs_store import (
    Job,
    JobStore,
    NewJob,
    Payload,
    Run,
    Schedule,
    State,
    Target,
    TooManyJobs,
)

__all__ = ["Job", "Jobs", "NewJob", "Payload", "Run", "Schedule", "State", "Target"]

ENDED: tuple[State, ...] = ("done", "cancelled")  # states a job never leaves
ALERT_AFTER_FAILURES = 2
DISABLE_AFTER_FAILURES = 10
# Active jobs the owner (or a model in a loop) may have at once; the heartbeat does not count.
MAX_ACTIVE_JOBS = 1000


class Jobs:
    """The jobs and runs of one database, with the rules (thread-safe: the store is)."""

    def __init__(self, store: JobStore) -> None:
        self.store = store

    # reading
    def get(self, job_id: int) -> Job | None:
        return self.store.get(job_id)

    def get_managed(self, name: str) -> Job | None:
        return self.store.get_managed(name)

    def jobs(self, *, states: tuple[str, ...] | None = None) -> list[Job]:
        return self.store.jobs(states=states)

    def runs(self, job_id: int | None = None, limit: int = 50) -> list[Run]:
        return self.store.runs(job_id, limit)

    def close(self) -> None:
        self.store.close()

    # writing
    def create(self, new: NewJob, now: datetime) -> Job:
        """Store `new` as an active job; its first run is the first one after `now`."""
        validate(new.schedule)
        first = next_run(new.schedule, now - timedelta(microseconds=1))
        if first is None or (new.schedule.kind == "at" and first < now - timedelta(seconds=1)):
            raise ScheduleError(
                f"{describe(new.schedule)} is in the past: give a time after "
                f"{local_text(now, new.schedule.tz)}."
            )
        limit = MAX_ACTIVE_JOBS if new.managed is None else None
        try:
            return self.store.insert(new, first_run=first, now=now, max_active=limit)
        except TooManyJobs as exc:
            raise ScheduleError(
                f"There are already {exc.active} scheduled jobs (at most {MAX_ACTIVE_JOBS}): "
                "cancel some first (`pinch jobs list`, `pinch jobs cancel ID`)."
            ) from None

    def set_state(self, job_id: int, state: State, now: datetime) -> Job | None:
        """Pause, resume (re-computing the next run after `now`), cancel or disable a job.
        Raises `ScheduleError` when asked to pause or resume a job that has ended (done or
        cancelled): that would run a delivered one-shot again, or revive a cancelled job."""
        job = self.store.get(job_id)
        if job is None:
            return None
        if state in ("active", "paused") and job.state in ENDED:
            why = (
                "it has run and is finished"
                if job.state == "done"
                else "a cancelled job stays cancelled (its history is kept)"
            )
            raise ScheduleError(
                f"Job #{job_id} is {job.state}: {why}, so it cannot be "
                f"{'resumed' if state == 'active' else 'paused'}. Ask Pinch for a new one."
            )
        nxt, anchor = job.next_run_utc, job.schedule.anchor_utc
        if state == "active" and job.state != "active":
            if job.schedule.kind != "at":
                nxt = next_run(job.schedule, now)
            else:
                # A one-shot resumed after its time runs now, on time (not "missed").
                nxt = anchor = max(anchor, now)
        self.store.update_schedule(job_id, state, nxt, anchor)
        return self.store.get(job_id)

    def run_now(self, job_id: int, now: datetime) -> Job | None:
        """Make an active or paused job due at `now` (pinch jobs run)."""
        self.store.run_now(job_id, now)
        return self.store.get(job_id)

    def claim(
        self,
        job: Job,
        scheduled: datetime,
        new_next: datetime | None,
        now: datetime,
        *,
        run_for: datetime | None = None,
    ) -> int | None:
        """Take run `scheduled` of `job` for this process: the job's next run moves to `new_next`
        only if it is still `scheduled` and the job active, so two schedulers on one database
        never both run it. The run is recorded as due at `run_for` (the latest of several
        coalesced runs; default `scheduled`). Returns the new run's id, or None if another
        took it."""
        return self.store.claim(job.id, scheduled, new_next, now, run_for=run_for or scheduled)

    def finish_run(
        self, run_id: int, status: str, now: datetime, late_by_s: float, note: str | None
    ) -> None:
        self.store.finish_run(run_id, status, now, late_by_s, note)

    def complete_run(
        self,
        run_id: int,
        job_id: int,
        status: str,
        now: datetime,
        late_by_s: float,
        note: str | None,
        *,
        done: bool,
    ) -> None:
        """Record a successful run and reset the job's failures, in one transaction."""
        self.store.complete_run(run_id, job_id, status, now, late_by_s, note, done=done)

    def record_failure(self, job_id: int, now: datetime) -> Job | None:
        """Count a failure: the run is retried after the backoff (30 s, 1 min, …; a recurring
        job then goes on from its schedule), or the job is disabled after
        `DISABLE_AFTER_FAILURES`. Returns the updated job."""
        job = self.store.get(job_id)
        if job is None:
            return None
        failures = job.consecutive_failures + 1
        # Retried at `until` even when the schedule's next run comes later (a daily reminder
        # that met one transient error is not lost): the retry's claim moves the job to the
        # first scheduled run after it.
        until = now + timedelta(seconds=backoff_s(failures))
        self.store.record_failure(job_id, failures, until, failures >= DISABLE_AFTER_FAILURES)
        return self.store.get(job_id)

    def release(self, job_id: int, due: datetime) -> None:
        """Make an interrupted one-shot due again at `due` (it runs at the next start)."""
        self.store.release(job_id, due)

    def close_interrupted_runs(self, now: datetime, started_before: datetime | None = None) -> int:
        """Mark runs a stopped process left 'running' as cancelled (only those started before
        `started_before`, when given); returns how many."""
        return self.store.close_interrupted_runs(now, started_before)

    def mark_done(self, job_id: int) -> None:
        self.store.mark_done(job_id)

    def replace_managed(self, new: NewJob, now: datetime) -> Job:
        """Create or update the managed job `new.managed` (e.g. the heartbeat) to match `new`.
        A job the owner paused (or that was disabled after failures) stays so: the config says
        what it is, `pinch jobs resume` whether it runs."""
        assert new.managed
        old = self.store.get_managed(new.managed)
        kept: State | None = None
        if old is not None:
            same = (
                old.schedule.kind,
                old.schedule.spec,
                old.schedule.tz,
                old.text,
                old.target,
            ) == (new.schedule.kind, new.schedule.spec, new.schedule.tz, new.text, new.target)
            if same and old.state in ("active", "paused", "disabled"):
                return old
            kept = old.state if old.state in ("paused", "disabled") else None
            self.store.delete(old.id)
        job = self.create(new, now)
        if kept is not None:
            self.store.force_state(job.id, kept)
            job = replace(job, state=kept)
        return job

    def remove_managed(self, name: str) -> None:
        self.store.cancel_managed(name)
