"""`pinch gateway`: every configured channel, the memory watcher and the agent in one process
(app/wiring.py builds them; app/gateway/server.py is the `Gateway`).

One gateway per data directory (an OS lock on <home>/agents/<id>/gateway.lock). SIGTERM/SIGINT
drains: running turns get `shutdown_grace_s` to finish, queued messages stay queued and are
answered after the restart; a second signal cancels the running turns at once.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

from agent.mcp.mcp_config import references
from app.automations.assembly import owner_zone, start_automations
from app.automations.nightly_dream import start_nightly_dream
from app.backup.schedule import owner_alert, start_backups
from app.gateway.server import GatewayError
from app.logging_setup import RecentLines, add_redacted_handler
from app.wiring import (
    build_channels,
    build_gateway,
    build_health_server,
    build_runtime,
    build_web_server,
    web_exposure_problem,
)
from channels.base import Channel, ChannelHealth
from common.channel_table import messaging
from memory.errors import MemoryError_

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger("pinch.gateway")
MIN_SECRET_CHARS = 6  # shorter values are not redacted (they would garble every log line)

__all__ = ["GatewayError", "acquire_lock", "configure_logging", "run_gateway", "settings_secrets"]


# -- one gateway per data directory ------------------------------------------------------------


def acquire_lock(path: Path) -> IO[str]:
    """Hold an exclusive OS lock on `path` for the life of the process (released by the OS even
    on kill -9). Raises GatewayError when another gateway holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held until the process exits
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        pid = handle.read().strip() or "unknown"
        handle.close()
        raise GatewayError(
            f"Another Pinch gateway is already running for this data directory (pid {pid}, "
            f"lock {path}); stop it first — one gateway per PINCH_HOME."
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


# -- secrets never reach the log ---------------------------------------------------------------


def settings_secrets(settings: Settings) -> list[str]:
    """The channel tokens and the store's DSN in the settings (config.toml as well as the
    environment) and the environment variables MCP servers' env and headers name, which
    `common.redact` cannot know on its own."""
    found = []
    for section in (settings.telegram, settings.slack):
        for value in section.__dict__.values():
            secret = getattr(value, "get_secret_value", None)
            if secret is not None:
                found.append(str(secret()))
    dsn = settings.store.dsn_text()  # may carry a password; config.toml may hold one without
    if dsn:
        found.append(dsn)
    for server in settings.mcp.servers.values():  # what ${VAR} in an MCP env or header names
        for value in (*server.env.values(), *server.headers.values()):
            found += [
                os.environ[name]
                for name in references(value)
                if len(os.environ.get(name, "")) >= MIN_SECRET_CHARS
            ]
    return found


def configure_logging(settings: Settings, level: int = logging.INFO) -> None:
    add_redacted_handler(logging.StreamHandler(), settings_secrets(settings))
    logging.getLogger().setLevel(level)
    for noisy in (
        "httpx",
        "httpx2",
        "httpcore",
        "anthropic",
        "telegram",
        "slack_bolt",
        "slack_sdk",
        "aiohttp.access",
        "apscheduler",  # "Running job …" twice every 30 s; start and stop are logged by Pinch
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # The MCP SDK logs a server's bad line or lost connection with a traceback; Pinch logs one
    # line of its own for each (agent/mcp/connection.py).
    logging.getLogger("mcp").setLevel(logging.CRITICAL)


async def run_gateway(
    settings: Settings,
    *,
    extra_channels: Mapping[str, Channel] | None = None,
    note: Callable[[str], None] = print,
) -> int:
    """Run until SIGTERM/SIGINT; returns the exit status. Raises GatewayError when it cannot
    start (another gateway, no channel)."""
    exposed = web_exposure_problem(settings)
    if exposed is not None:  # refused before anything starts
        raise GatewayError(exposed)
    lock = acquire_lock(settings.agent_dir / "gateway.lock")
    try:
        channels = build_channels(settings, note)
        channels.update(extra_channels or {})
        alone = "enabled" in settings.web.model_fields_set  # the page alone only when asked
        if not any(messaging(name) for name in channels) and not (channels and alone):
            raise GatewayError(
                "No channel to run: set PINCH_TELEGRAM__BOT_TOKEN or PINCH_SLACK__BOT_TOKEN "
                "(and PINCH_SLACK__APP_TOKEN), or run the web page alone ([web] enabled = true, "
                "PINCH_WEB__ENABLED=true), "
                "then start `pinch gateway` again."
            )
        runtime = await build_runtime(settings)
        try:
            try:
                await runtime.sync_index()
            except MemoryError_ as exc:  # answering still works from the last complete index
                log.warning("The memory index could not be updated: %s", exc)
            runtime.watcher.start()
            await runtime.start_mcp()  # bounded wait; a failing server is retried, not fatal
            gateway = build_gateway(settings, runtime, channels)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()

            def on_signal() -> None:
                if stop.is_set():  # a second Ctrl-C: don't wait out the grace period
                    log.warning("Stopping now; interrupted turns are answered after the restart")
                    gateway.cancel_turns()
                stop.set()

            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, on_signal)
            await gateway.start()  # logs which channels run; raises when none could start
            health = build_health_server(settings, gateway)
            if health is not None:
                await health.start()
            recent = RecentLines()  # the web page's tail of this log, redacted like the rest
            if settings.web.enabled:
                add_redacted_handler(recent, settings_secrets(settings))
            web = build_web_server(settings, runtime, gateway, log_tail=recent.tail)
            if web is not None:
                try:
                    await web.start()
                except OSError as exc:  # the port is taken: the channels still answer
                    log.error("%s", exc)
                    gateway.failed["web"] = str(exc)
                    gateway.health["web"] = ChannelHealth(False, f"could not start: {exc}")
                    web = None
                    await gateway.write_heartbeat()  # `pinch doctor` sees it at once
            scheduler = await start_automations(runtime, gateway.channels)  # reminders, tasks
            dreams = await start_nightly_dream(settings, owner_zone(runtime.clock))  # either way
            backups = await start_backups(settings, owner_alert(settings, gateway.channels))
            await stop.wait()
            if backups is not None:
                backups.shutdown(wait=False)
            if dreams is not None:
                dreams.shutdown(wait=False)
            if scheduler is not None:
                await scheduler.stop()
            await gateway.stop(settings.gateway.shutdown_grace_s)
            if web is not None:
                await web.stop()
            logging.getLogger().removeHandler(recent)
            if health is not None:
                await health.stop()
        finally:
            await runtime.aclose()
    finally:
        lock.close()
    return 0
