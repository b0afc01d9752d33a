"""The scheduler: runs the jobs of app/automations/jobs.py on time, once, and says so when it could
not.

    scheduler = Scheduler(jobs, deliver=send, run_turn=turn, settings=AutomationSettings())
    await scheduler.start()       # inside the running loop; arms every active job from the table
    ...
    await scheduler.stop()

(`deliver` and `run_turn` may instead be given to `start`: the composition root builds the
scheduler before the agent and the channels exist, and hands it to the schedule tool.)

The jobs table is the truth; APScheduler 3.x (`AsyncIOScheduler`, in-memory store) is only the
timer. Each job is armed as a one-shot date trigger with an explicit id and
`replace_existing=True`, calling this scheduler's `fire(job_id)`, so a restart re-arms the same
ids (no duplicates). `misfire_grace_time=None` and `coalesce=True` keep
APScheduler from dropping a late job silently: lateness is decided here, by `misfire_grace_s`:

- due and on time (or late by less than the grace) → run now; a run late by more than a minute
  says so ("late by 2 h 10 min: Pinch was not running");
- late by more than the grace → reported to its chat as missed, and the schedule moves on;
- several runs missed while Pinch was down → one run (coalesced), never a burst, whose note
  says how many it stands for;
- each run is claimed in the database first (`UPDATE … WHERE next_run_utc = ? AND
  state = 'active'`), so two schedulers on one database never both run it.

Payloads: a reminder is delivered verbatim (no model call); a task runs one turn with
`sender="automation"` in its own session (thread "job:<id>" of the owner's chat when the owner
created it in their private chat — so it sees their memory — else a shared session of its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from agent.requests import AgentRequest
from app.automations.checklist import (
    HEARTBEAT_OK,
    NO_REPLY,
    heartbeat_items,
    heartbeat_message,
    within_hours,
)
from app.automations.durations import human_duration
from app.automations.jobs import ALERT_AFTER_FAILURES, DISABLE_AFTER_FAILURES, Job, Jobs, Target
from app.automations.schedules import describe, local_text, next_run
from app.gateway.advice import without_server_paths
from channels.base import OutboundMessage
from common.text import shorten
from memory.store.sessions import OWNER_PEER, SessionKey

log = logging.getLogger(__name__)

Deliver = Callable[[OutboundMessage], Awaitable[None]]
RunTurn = Callable[[AgentRequest], Awaitable[str]]  # one agent turn → the reply text
Now = Callable[[], datetime]

LATE_NOTE_S = 60.0  # later than this, a run says how late it is
RUN_LEASE_S = 600.0  # a one-shot claimed by a process that died mid-run is retried after this
RESYNC_S = 30.0  # how often changes made by `pinch jobs` in another process are picked up


class ChannelNotRunning(RuntimeError):
    """The job's channel does not run in this gateway (e.g. the terminal, or an unset token)."""


_T = TypeVar("_T")


@dataclass(frozen=True)
class AutomationSettings:
    misfire_grace_s: float = 3600.0
    agent_id: str = "main"
    workspace: Path | None = None  # for HEARTBEAT.md
    heartbeat_active_hours: tuple[int, int] | None = None  # minutes of the day, [start, end)
    owner_tz: str = "UTC"
    # The owner's chat per channel in [owners]: alerts if a job's chat fails, owner jobs' fallback.
    owner_chats: tuple[Target, ...] = ()
    shared_jobs: bool = False  # several schedulers on one database (PostgreSQL)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Scheduler:
    """Runs the jobs of `store` on time (see the module's docstring). Built by the composition
    root before it starts; until `start`, `arm` only records and `cancel` only cancels in the
    table, so the schedule tool may hold a scheduler that never runs (`pinch chat`)."""

    def __init__(
        self,
        store: Jobs,
        *,
        deliver: Deliver | None = None,
        run_turn: RunTurn | None = None,
        settings: AutomationSettings | None = None,
        now: Now = utcnow,
    ) -> None:
        self.store = store
        self._deliver = deliver
        self._run_turn = run_turn
        self.settings = settings or AutomationSettings()
        self.now = now
        self._aps: AsyncIOScheduler | None = None
        self._armed: dict[int, datetime] = {}
        self._running: dict[int, asyncio.Task[None]] = {}
        self._stopping = False
        self._executor: ThreadPoolExecutor | None = None

    # -- life cycle ------------------------------------------------------------------------

    async def start(
        self, *, deliver: Deliver | None = None, run_turn: RunTurn | None = None
    ) -> None:
        """Start the timer in the running loop and arm every active job from the table.
        `deliver` and `run_turn` replace the ones given to the constructor."""
        asyncio.get_running_loop()  # AsyncIOScheduler.start() needs one: fail clearly here
        self._deliver = deliver or self._deliver
        self._run_turn = run_turn or self._run_turn
        if self._deliver is None or self._run_turn is None:
            raise ValueError("A scheduler needs `deliver` and `run_turn` to start.")
        self._stopping = False
        self._armed.clear()  # jobs armed while not running are armed for real by resync()
        old = self.now() - timedelta(seconds=RUN_LEASE_S) if self.settings.shared_jobs else None
        await self._db(self.store.close_interrupted_runs, self.now(), old)  # a dead one's runs
        self._aps = AsyncIOScheduler(
            timezone=UTC,
            # max_instances > 1: a run re-arms its job (same id) before its callback returns;
            # with 1, APScheduler would skip a next run that is already due. `fire` itself
            # never runs one job twice at once.
            job_defaults={"misfire_grace_time": None, "coalesce": True, "max_instances": 4},
        )
        self._aps.start()
        self._aps.add_job(
            self.resync,
            IntervalTrigger(seconds=RESYNC_S, timezone=UTC),
            id="pinch-resync",
            replace_existing=True,
        )
        await self.resync()
        log.info("Scheduler started: %d jobs armed", len(self._armed))

    async def stop(self) -> None:
        """Stop the timer and cancel runs in progress (recorded as cancelled; an interrupted
        one-shot stays due, so the next start runs it, with a note saying how late)."""
        self._stopping = True
        if self._aps is not None:
            self._aps.shutdown(wait=False)
            self._aps = None
            log.info("Scheduler shut down")
        self._armed.clear()
        for task in list(self._running.values()):
            task.cancel()
        for task in list(self._running.values()):
            with contextlib.suppress(BaseException):
                await task
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    @property
    def armed_ids(self) -> list[str]:
        """APScheduler's job ids (a test checks a restart arms no duplicates)."""
        return [j.id for j in self._aps.get_jobs()] if self._aps else []

    async def resync(self) -> None:
        """Arm what the table says is due (jobs created, paused or resumed elsewhere)."""
        jobs = await self._db(self.store.jobs, states=("active",))
        active = {j.id for j in jobs}
        for job in jobs:
            if job.next_run_utc is not None and self._armed.get(job.id) != job.next_run_utc:
                self.arm(job.id, job.next_run_utc)
        for job_id in list(self._armed):
            if job_id not in active:
                self.disarm(job_id)

    def arm(self, job_id: int, when: datetime) -> None:
        self._armed[job_id] = when
        if self._aps is None:
            return
        self._aps.add_job(
            self.fire,
            DateTrigger(run_date=when, timezone=UTC),
            args=[job_id],
            id=f"pinch-job-{job_id}",
            replace_existing=True,
        )

    def disarm(self, job_id: int) -> None:
        self._armed.pop(job_id, None)
        if self._aps is not None:
            with contextlib.suppress(Exception):
                self._aps.remove_job(f"pinch-job-{job_id}")

    async def cancel(self, job_id: int) -> Job | None:
        """Cancel a job: nothing more fires; a run in progress is cancelled cleanly."""
        job = await self._db(self.store.set_state, job_id, "cancelled", self.now())
        self.disarm(job_id)
        task = self._running.get(job_id)
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        return job

    @property
    def deliver(self) -> Deliver:
        """How results reach their chat (given to the constructor or to `start`)."""
        if self._deliver is None:
            raise RuntimeError("The scheduler has nothing to deliver with: start() it first.")
        return self._deliver

    @deliver.setter
    def deliver(self, deliver: Deliver) -> None:
        self._deliver = deliver

    @property
    def run_turn(self) -> RunTurn:
        """How a task's turn runs (given to the constructor or to `start`)."""
        if self._run_turn is None:
            raise RuntimeError("The scheduler has no agent to run tasks: start() it first.")
        return self._run_turn

    @run_turn.setter
    def run_turn(self, run_turn: RunTurn) -> None:
        self._run_turn = run_turn

    # -- one run ---------------------------------------------------------------------------

    async def fire(self, job_id: int) -> None:
        """Run job `job_id` if it is due now (the timer's callback; tests call it directly)."""
        if job_id in self._running:
            return  # still running; it re-arms when done
        task = asyncio.ensure_future(self._fire(job_id))
        self._running[job_id] = task
        try:
            await task
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
        finally:
            self._running.pop(job_id, None)
        # Re-armed only now, outside the run: a timer callback arriving while the run was
        # still registered would have been dropped by the check above.
        if not self._stopping:
            fresh = await self._db(self.store.get, job_id)
            if fresh and fresh.state == "active" and fresh.next_run_utc is not None:
                self.arm(job_id, fresh.next_run_utc)
            else:
                self.disarm(job_id)

    async def _fire(self, job_id: int) -> None:
        now = self.now()
        claimed = await self._db(self._claim_due, job_id, now)
        if claimed is None:
            self._armed.pop(job_id, None)
            return
        if isinstance(claimed, datetime):  # not due yet: never early
            self.arm(job_id, claimed)
            return
        job, latest, late_by, skipped, natural_next, run_id = claimed
        if late_by > self.settings.misfire_grace_s:
            await self._report_missed(job, latest, late_by, skipped, natural_next, run_id)
        else:
            await self._run(job, latest, late_by, skipped, run_id)

    def _claim_due(
        self, job_id: int, now: datetime
    ) -> tuple[Job, datetime, float, int, datetime | None, int] | datetime | None:
        """In the database thread: if job `job_id` is due at `now`, claim the run and return
        (job, the run it stands for, lateness in s, runs skipped, next run, run id); when it is
        not due yet, its next run; None when there is nothing to do (or another claimed it)."""
        job = self.store.get(job_id)
        if job is None or job.state != "active" or job.next_run_utc is None:
            return None
        scheduled = job.next_run_utc
        if scheduled > now:  # a clock step, or re-armed meanwhile
            return scheduled
        # Coalesce: of the runs due by now, only the latest counts; the others are skipped.
        latest, skipped = scheduled, 0
        while True:
            following = next_run(job.schedule, latest)
            if following is None or following > now or skipped > 100_000:
                break
            latest, skipped = following, skipped + 1
        if job.schedule.kind == "at" and job.consecutive_failures == 0:
            latest = min(latest, job.schedule.anchor_utc)  # a lease ran out: late since its time
        late_by = (now - latest).total_seconds()
        if job.schedule.kind == "at":  # a lease: retried if this process dies mid-run
            natural_next: datetime | None = now + timedelta(seconds=RUN_LEASE_S)
        else:
            natural_next = next_run(job.schedule, now)
        run_id = self.store.claim(job, scheduled, natural_next, now, run_for=latest)
        if run_id is None:
            return None  # another scheduler took it
        return job, latest, late_by, skipped, natural_next, run_id

    async def _db(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run blocking database work on the scheduler's own thread: queued behind the agent's
        work in the shared pool, a due job would wait for a busy conversation's writes."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pinch-jobs")
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def _report_missed(
        self,
        job: Job,
        due: datetime,
        late_by: float,
        skipped: int,
        nxt: datetime | None,
        run_id: int,
    ) -> None:
        tz = job.schedule.tz
        more = f" ({skipped + 1} runs missed)" if skipped else ""
        moves = f" Next run: {local_text(nxt, tz)}." if nxt and job.schedule.kind != "at" else ""
        note = (
            f"Missed{more}: {_what(job)} (job #{job.id}, {describe(job.schedule)}) was due "
            f"{local_text(due, tz)}; Pinch was not running and it is now "
            f"{human_duration(late_by)} late, more than the "
            f"{human_duration(self.settings.misfire_grace_s)} grace.{moves}"
        )
        log.warning("Job %s missed: late by %s", job.id, human_duration(late_by))
        await self._db(self.store.finish_run, run_id, "missed", self.now(), late_by, note)
        if job.schedule.kind == "at":
            await self._db(self.store.mark_done, job.id)
        await self._notify(job, note)

    async def _run(
        self, job: Job, due: datetime, late_by: float, skipped: int, run_id: int
    ) -> None:
        # Runs coalesced into this one are never passed over in silence, late or not.
        missed = f"{skipped} earlier run{'s' if skipped > 1 else ''} missed" if skipped else ""
        note = None
        if late_by > LATE_NOTE_S:
            note = f"late by {human_duration(late_by)}: Pinch was not running"
            if missed:
                note += f"; {missed}"
        elif missed:
            note = f"{missed}: Pinch was not running"
        status = "late" if late_by > LATE_NOTE_S else "ok"
        try:
            text = await self._payload(job, note)
            if text is not None:
                await self._send(job, text)
        except asyncio.CancelledError:
            why = "interrupted: Pinch stopped" if self._stopping else "cancelled"
            await self._db(self.store.finish_run, run_id, "cancelled", self.now(), late_by, why)
            if self._stopping and job.schedule.kind == "at":
                await self._db(self.store.release, job.id, due)
            raise
        except Exception as exc:
            detail = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
            log.warning("Job %s failed: %s", job.id, detail)
            await self._db(self.store.finish_run, run_id, "failed", self.now(), late_by, detail)
            await self._failed(job, without_server_paths(detail))  # the log has it whole
            return
        # Delivered: a stop arriving now must not undo that (a one-shot released as "due"
        # would be delivered again after the restart), so the record is one shielded write.
        await asyncio.shield(
            self._db(
                self.store.complete_run,
                run_id,
                job.id,
                status,
                self.now(),
                late_by,
                note,
                done=job.schedule.kind == "at",
            )
        )

    async def _payload(self, job: Job, note: str | None) -> str | None:
        """What to deliver for one run of `job` (None: nothing)."""
        if job.payload == "reminder":
            return job.text + (f"\n\n_({note})_" if note else "")
        if job.payload == "heartbeat":
            return await self._heartbeat(job)
        request = AgentRequest(
            task_session(job, self.settings.agent_id),
            job.text,
            sender="automation",
            sender_id=f"job:{job.id}",
            sender_name=f"job {job.id}",
        )
        reply = (await self.run_turn(request)).strip()
        if not reply or reply == NO_REPLY:
            return None  # the agent had nothing to say, or already said it
        return reply + (f"\n\n_({note})_" if note else "")

    async def _heartbeat(self, job: Job) -> str | None:
        ws = self.settings.workspace
        checklist = heartbeat_items(ws / "HEARTBEAT.md") if ws else ""
        if not checklist:
            return None  # no items: no model call
        if not within_hours(
            self.now(), self.settings.owner_tz, self.settings.heartbeat_active_hours
        ):
            return None
        prompt = (
            "Heartbeat: go through this checklist from HEARTBEAT.md. If nothing needs the "
            f"owner's attention, answer exactly {HEARTBEAT_OK}.\n\n{checklist}"
        )
        key = SessionKey.owner_main(self.settings.agent_id)
        reply = (
            await self.run_turn(
                AgentRequest(key, prompt, sender="automation", sender_id="heartbeat")
            )
        ).strip()
        return heartbeat_message(reply)

    async def _failed(self, job: Job, detail: str) -> None:
        updated = await self._db(self.store.record_failure, job.id, self.now())
        if updated is None:
            return
        n = updated.consecutive_failures
        text = None
        if updated.state == "disabled":
            text = (
                f"{_label(job)} failed {n} times in a row and is now disabled ({detail}). "
                f"`pinch jobs resume {job.id}` turns it back on."
            )
        elif n == ALERT_AFTER_FAILURES:
            retry = (
                local_text(updated.next_run_utc, job.schedule.tz) if updated.next_run_utc else "—"
            )
            text = (
                f"{_label(job)} failed {n} times in a row ({detail}). Next try "
                f"{retry}; it is disabled after {DISABLE_AFTER_FAILURES}."
            )
        if text:
            await self._notify(job, text)

    async def _send(self, job: Job, text: str, *, notice: bool = False) -> None:
        """Deliver `text` to `job`'s chat. A notice about the job (an alert, a missed run) that
        cannot go there goes to the owner's chat on another channel; so does an owner's own job
        whose channel is not running. Raises the first error when nothing took it."""
        try:
            await self.deliver(_message(job, text))
            return
        except ChannelNotRunning as exc:
            if not (notice or job.owner_private):
                raise
            first: Exception = exc
        except Exception as exc:
            if not notice:
                raise
            first = exc
        for chat in self.settings.owner_chats:
            if (chat.channel, chat.chat_id) == (job.target.channel, job.target.chat_id):
                continue  # that one just failed
            try:
                await self.deliver(OutboundMessage(chat.channel, chat.chat_id, text))
                return
            except Exception:
                continue
        raise first

    async def _notify(self, job: Job, text: str) -> None:
        try:
            await self._send(job, text, notice=True)
        except Exception as exc:
            log.warning("Job %s: could not tell the owner (%s)", job.id, exc)  # never the text


def task_session(job: Job, agent_id: str) -> SessionKey:
    """The isolated session a task runs in: a thread of the owner's chat when the owner created
    it there (so it may read their memory), else a shared session of its own."""
    if job.owner_private:
        return SessionKey(agent_id, job.target.channel, "direct", OWNER_PEER, f"job:{job.id}")
    return SessionKey(agent_id, "automation", "channel", f"job-{job.id}")


def _label(job: Job) -> str:
    return f"Job #{job.id} ({describe(job.schedule)})"


def _what(job: Job, limit: int = 80) -> str:
    """What the job does, for a message about a run of it: 'the reminder “…”', shortened."""
    if job.payload == "heartbeat":
        return "the heartbeat"
    return f"the {job.payload} “{shorten(' '.join(job.text.split()), limit)}”"


def _message(job: Job, text: str) -> OutboundMessage:
    return OutboundMessage(job.target.channel, job.target.chat_id, text, job.target.thread_id)
