"""The nightly dream as a job: `run_dream(settings)` opens what it needs, dreams, closes.

The gateway's scheduler registers it with one call, `add_dream_job(aps, settings, zone)`: an
APScheduler cron job with the explicit id `DREAM_JOB_ID`, daily at `[dreaming] hour:minute` in the
owner's time zone (removed again when `[dreaming] enabled = false`). `pinch memory dream` calls
`dream_once`. Both do nothing when dreaming is disabled.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from agent.dreaming import DISABLED_NOTE, DreamReport, Phase, dream
from agent.model import ModelClient, check_key, create_model_client
from agent.model_errors import ModelError
from memory.dreaming import DreamBusyError

if TYPE_CHECKING:
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
    from memory.index import MemoryIndex

    index = await asyncio.to_thread(
        MemoryIndex.open, settings.workspace_dir, settings.database_path, settings.memory
    )
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
    """The nightly job: dream once, log the outcome, never raise (a busy run is skipped)."""
    try:
        report = await dream_once(settings)
    except DreamBusyError as exc:
        log.info("Nightly dream skipped: %s", exc)
        return
    except ModelError as exc:
        log.error("The nightly dream did not run: %s", exc)
        return
    except Exception:
        log.exception("The nightly dream failed")
        return
    log.info("Nightly dream: %s promoted", report.promoted)


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
