"""The nightly dream as a job: `run_dream(settings)` opens what it needs, dreams, closes.

The scheduler registers `run_dream` as a managed job (id `DREAM_JOB_ID`, daily at
`[dreaming] hour:minute` owner time); `pinch memory dream` calls `dream_once`. Both do nothing
when `[dreaming] enabled = false`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from agent.dreaming import DISABLED_NOTE, DreamReport, Phase, dream
from agent.model import ModelClient, create_model_client
from memory.dreaming import DreamBusyError

if TYPE_CHECKING:
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
    """One dream over the configured workspace and agent database."""
    if not settings.dreaming.enabled:
        return DreamReport(phase, dry_run, ran=False, note=DISABLED_NOTE)
    from memory.index import MemoryIndex

    index = await asyncio.to_thread(
        MemoryIndex.open, settings.workspace_dir, settings.database_path, settings.memory
    )
    try:
        needs_model = phase == "deep" and not dry_run
        if needs_model and model is None:
            model = create_model_client(
                settings.agent.model,
                fallbacks=settings.agent.fallback_models,
                api_base=settings.agent.api_base,
                timeout_s=settings.agent.timeout_s,
                max_retries=settings.agent.max_retries,
            )
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
    except Exception:
        log.exception("The nightly dream failed")
        return
    log.info("Nightly dream: %s promoted", report.promoted)
