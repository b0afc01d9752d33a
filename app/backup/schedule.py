"""Scheduled backups: the gateway makes an archive every `[backup] every` and keeps the newest
`[backup] keep` of its own (named pinch-backup-auto-…; archives made with `pinch backup` are
never pruned).

The gateway starts it with `start_backups(settings, alert)`, a timer of its own like the nightly
dream's (app/automations/nightly_dream.py): an APScheduler interval job with the explicit id
`BACKUP_JOB_ID`, `coalesce` and `max_instances=1`. The first run is due `every` after the newest
scheduled archive (so restarting the gateway does not postpone backups forever), and never
sooner than `FIRST_DELAY_S` (or a tenth of `every`, if shorter) after the start (a restart is
not slowed by a backup). A failed backup is logged and told to the owner (`alert`), as a
failing job is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from app.backup.archive import BackupResult, archive_agent, make_backup
from app.backup.manifest import ARCHIVE_SUFFIX, SCHEDULED_PREFIX
from app.channel_registry import Owners
from channels.base import Channel, OutboundMessage

if TYPE_CHECKING:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    from app.config import Settings

log = logging.getLogger(__name__)

BACKUP_JOB_ID = "pinch:backup"
FIRST_DELAY_S = 600.0
BACKUP_NICE = 10  # the gateway's turns come first

_T = TypeVar("_T")

Alert = Callable[[str], Awaitable[None]]


def scheduled_archives(folder: Path, agent: str | None = None) -> list[Path]:
    """The scheduled archives of `agent` (None: the default agent) in `folder`, oldest first.

    Only names exactly as `make_backup` writes them count (pinch-backup-auto-[AGENT-]STAMP
    [-N].tar.gz): a `pinch backup` archive of an agent called "auto", another agent's archive
    or a file of the owner's that merely starts like one is never pruned."""
    if not folder.is_dir():
        return []
    own = re.compile(
        re.escape(SCHEDULED_PREFIX + (f"{agent}-" if agent else ""))
        + r"(\d{8}T\d{6}Z)(?:-(\d+))?"
        + re.escape(ARCHIVE_SUFFIX)
    )
    found: list[tuple[str, int, Path]] = []
    for path in folder.iterdir():
        match = own.fullmatch(path.name)
        if match and path.is_file() and not path.is_symlink():
            found.append((match.group(1), int(match.group(2) or 1), path))
    return [path for _, _, path in sorted(found)]


def prune(folder: Path, keep: int, agent: str | None = None) -> list[Path]:
    """Delete all but the newest `keep` scheduled archives of `agent` (None: the default
    agent) in `folder`; return the deleted."""
    old = scheduled_archives(folder, agent)[:-keep] if keep > 0 else []
    for path in old:
        path.unlink(missing_ok=True)
    return old


def first_run(
    folder: Path, every_s: float, now: datetime, first_delay_s: float, agent: str | None = None
) -> datetime:
    """When the first scheduled backup is due: `every_s` after the newest scheduled archive
    of `agent`, but not before `first_delay_s` from `now`."""
    archives = scheduled_archives(folder, agent)
    soonest = now + timedelta(seconds=first_delay_s)
    if not archives:
        return soonest
    last = datetime.fromtimestamp(archives[-1].stat().st_mtime, UTC)
    return max(soonest, last + timedelta(seconds=every_s))


def niced(fn: Callable[[], _T]) -> _T:
    """Run `fn` at a lower CPU (and, with it, I/O) priority than the gateway's own threads; in
    a thread of its own (`run_niced`), as the priority stays with the thread."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux, or not allowed: as is
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKUP_NICE)
    return fn()


def call_niced(fn: Callable[[], _T]) -> _T:
    """`fn` in a new thread at a lower priority (see `niced`); blocks until it returns."""
    with ThreadPoolExecutor(1, thread_name_prefix="pinch-backup") as pool:
        return pool.submit(niced, fn).result()


async def run_niced(fn: Callable[[], _T]) -> _T:
    """`fn` in a new thread at a lower priority (see `niced`), awaited."""
    with ThreadPoolExecutor(1, thread_name_prefix="pinch-backup") as pool:
        return await asyncio.get_running_loop().run_in_executor(pool, niced, fn)


async def run_scheduled_backup(settings: Settings, alert: Alert) -> BackupResult | None:
    """Make one scheduled archive and prune the old ones; never raises. A failure is logged
    and told to the owner through `alert`."""
    try:
        result = await run_niced(lambda: make_backup(settings, prefix=SCHEDULED_PREFIX))
        pruned = await asyncio.to_thread(
            prune, result.path.parent, settings.backup.keep, archive_agent(settings)
        )
    except Exception as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        log.error("The scheduled backup failed: %s", reason)
        try:
            await alert(
                f"The scheduled backup failed: {reason.rstrip('.')}. Your data is untouched; the "
                f"next try is in {settings.backup.every}. `pinch backup` shows the error at once."
            )
        except Exception as told:
            log.warning("Could not tell the owner the backup failed (%s)", told)
        return None
    log.info(
        "Backup %s (%.1f MB, %.1f s)%s",
        result.path,
        result.size / 1e6,
        result.seconds,
        f"; {len(pruned)} old archive(s) removed" if pruned else "",
    )
    return result


def owner_alert(settings: Settings, channels: Mapping[str, Channel]) -> Alert:
    """An `Alert` to the owner's direct chat on the first running channel that takes it (the
    chats of `[owners]`, in the channel table's order), as a failed job's alert goes."""
    chats = Owners.from_settings(settings).chats()

    async def alert(text: str) -> None:
        first: Exception | None = None
        for chat in chats:
            channel = channels.get(chat.channel)
            if channel is None:
                continue
            try:
                await channel.send(OutboundMessage(chat.channel, chat.chat_id, text))
                return
            except Exception as exc:
                first = first or exc
        if first is not None:
            raise first
        log.warning("No owner chat to tell about the failed backup: set [owners].")

    return alert


async def start_backups(
    settings: Settings,
    alert: Alert,
    *,
    first_delay_s: float = FIRST_DELAY_S,
    now: datetime | None = None,
) -> AsyncIOScheduler | None:
    """Scheduled backups on a timer of their own in the running loop, or None when
    `[backup] every` is empty. Stop it with `shutdown(wait=False)`."""
    from apscheduler.schedulers.asyncio import AsyncIOScheduler
    from apscheduler.triggers.interval import IntervalTrigger

    every_s = settings.backup.every_s()
    if every_s is None:
        return None
    asyncio.get_running_loop()  # AsyncIOScheduler.start() needs one: fail clearly here
    delay = min(first_delay_s, every_s / 10)
    start = first_run(
        settings.backup_dir, every_s, now or datetime.now(UTC), delay, archive_agent(settings)
    )
    timer = AsyncIOScheduler(timezone=UTC)
    timer.add_job(
        run_scheduled_backup,
        IntervalTrigger(seconds=every_s, start_date=start, timezone=UTC),
        args=[settings, alert],
        id=BACKUP_JOB_ID,
        name="scheduled backup",
        replace_existing=True,
        coalesce=True,
        max_instances=1,
        misfire_grace_time=None,
        next_run_time=start,
    )
    timer.start()
    log.info(
        "Backups every %s into %s (keeping %d)",
        settings.backup.every,
        settings.backup_dir,
        settings.backup.keep,
    )
    return timer
