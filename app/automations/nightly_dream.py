"""The nightly dream as a job: `run_dream(settings)` opens what it needs, dreams, closes.

The gateway starts it with `start_nightly_dream(settings, zone)`, a timer of its own (whether or
not `[automations]` runs): `add_dream_job` registers an APScheduler cron job with the explicit id
`DREAM_JOB_ID`, daily at `[dreaming] hour:minute` in the owner's time zone (removed again when
`[dreaming] enabled = false`). `pinch memory dream` calls `dream_once`. Both do nothing when
dreaming is disabled.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from agent.dream_run import DISABLED_NOTE, DreamReport, Phase, dream
from agent.model.errors import ModelError
from agent.model.factory import ModelClient, check_key, create_model_client
from memory.errors import WorkspaceError
from memory.lifecycle.dreaming import DreamBusyError, record_failed_run

if TYPE_CHECKING:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler
    from apscheduler.schedulers.base import BaseScheduler

    from app.config import Settings

log = logging.getLogger(__name__)

DREAM_JOB_ID = "pinch:dreaming"


async def dream_once(
    settings: Settings,
    *,
    phase: Phase = "deep",
    dry_run: bool = False,
    model: ModelClient | None = None,
) -> DreamReport:
    """One dream over the configured workspace and agent database.

    Raises `ModelError` before anything is read or written when a dream that needs the model
    cannot call it (no API key), and when the model refuses the first call for a reason the
    owner must fix (key rejected, unknown model)."""
    if not settings.dreaming.enabled:
        return DreamReport(phase, dry_run, ran=False, note=DISABLED_NOTE)
    needs_model = phase == "deep" and not dry_run
    if needs_model and model is None:
        model = create_model_client(
            settings.agent.model,
            fallbacks=settings.agent.fallback_models,
            api_base=settings.agent.api_base,
            timeout_s=settings.agent.timeout_s,
            max_retries=settings.agent.max_retries,
        )
    if needs_model and model is not None:
        await check_key(model)
    from app.store_factory import open_memory_index

    index = await asyncio.to_thread(open_memory_index, settings)
    try:
        return await dream(
            index.db,
            settings.workspace_dir,
            model if needs_model else None,
            settings.dreaming,
            budget_chars=settings.agent.bootstrap_max_chars,
            phase=phase,
            dry_run=dry_run,
        )
    finally:
        await asyncio.to_thread(index.close)


async def run_dream(settings: Settings) -> None:
    """The nightly job: dream once, log the outcome, never raise (a busy run is skipped). A run
    that fails is recorded, so `pinch memory status` says why the night brought nothing."""
    try:
        report = await dream_once(settings)
    except DreamBusyError as exc:
        log.info("Nightly dream skipped: %s", exc)
        return
    except (ModelError, WorkspaceError) as exc:
        log.error("The nightly dream did not run: %s", exc)
        await asyncio.to_thread(_record_failure, settings, str(exc))
        return
    except Exception as exc:
        log.exception("The nightly dream failed")
        await asyncio.to_thread(_record_failure, settings, f"{type(exc).__name__}: {exc}")
        return
    log.info("Nightly dream: %s", report.outcome() if report.ran else report.note)


def _record_failure(settings: Settings, reason: str) -> None:
    from app.store_factory import open_agent_database

    try:
        db = open_agent_database(settings)
        try:
            record_failed_run(db, "deep", reason)
        finally:
            db.close()
    except Exception:  # the failure is in the log already; status just won't show it
        log.warning("Could not record the failed nightly dream", exc_info=True)


async def start_nightly_dream(settings: Settings, zone: str) -> AsyncIOScheduler | None:
    """The nightly dream on a timer of its own in the running loop, or None when dreaming is
    disabled. The gateway starts it whatever `[automations]` says: turning reminders and tasks
    off does not stop dreaming. Stop it with `shutdown(wait=False)`."""
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    if not settings.dreaming.enabled:
        return None
    asyncio.get_running_loop()  # AsyncIOScheduler.start() needs one: fail clearly here
    timer = AsyncIOScheduler(timezone=zone)
    add_dream_job(timer, settings, zone)
    timer.start()
    return timer


def add_dream_job(aps: BaseScheduler, settings: Settings, zone: str) -> bool:
    """Register (or replace) the nightly dream on `aps`; remove it if dreaming is disabled.

    Returns whether the job is now scheduled. `coalesce` and `max_instances=1`: a machine that
    slept through several nights dreams once, and never twice at the same time."""
    from apscheduler.triggers.cron import CronTrigger

    if not settings.dreaming.enabled:
        if aps.get_job(DREAM_JOB_ID) is not None:
            aps.remove_job(DREAM_JOB_ID)
        return False
    trigger = CronTrigger(
        hour=settings.dreaming.hour, minute=settings.dreaming.minute, timezone=zone
    )
    aps.add_job(
        run_dream,
        trigger,
        args=[settings],
        id=DREAM_JOB_ID,
        name="nightly dream",
        replace_existing=True,
        coalesce=True,
        max_instances=1,
        misfire_grace_time=6 * 3600,
    )
    return True
