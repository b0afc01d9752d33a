"""One agent served by a `pinch gateway` process: its runtime (index, model client, agent), its
channels (its own bot accounts), its `Gateway`, web page, automations, heartbeat, nightly dream
and scheduled backups — started together, stopped together. app/gateway/run.py runs one per
agent in one event loop (app/gateway/fleet.py decides which agents, by lease).

    service = AgentService(settings, note=print)
    await service.start()            # GatewayError with advice when it cannot serve
    service.health                   # {"telegram": ChannelHealth(...), ...}
    await service.stop(grace_s)      # turns get grace_s to finish; 0 = at once (lease lost)
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from app.automations.assembly import owner_zone, start_automations
from app.automations.nightly_dream import start_nightly_dream
from app.backup.schedule import owner_alert, start_backups
from app.config_layers import env_prefix
from app.gateway.agent_log import serving_agent
from app.gateway.server import Gateway, GatewayError
from app.gateway.workers import TurnSlots
from app.web.auth import web_page_wanted
from app.wiring import (
    build_channels,
    build_gateway,
    build_runtime,
    build_web_server,
    web_exposure_problem,
)
from channels.base import Channel, ChannelHealth
from common.channel_table import messaging
from memory.errors import MemoryError_

if TYPE_CHECKING:
    from app.config import Settings
    from app.process import Runtime
    from app.web.server import WebServer

log = logging.getLogger("pinch.gateway")


def acquire_lock(path: Path) -> IO[str]:
    """Hold an exclusive OS lock on `path` for the life of the process (released by the OS even
    on kill -9). Raises GatewayError when another gateway holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held until released
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


def page_alone(settings: Settings) -> bool:
    """Whether the agent's web page may run without a messaging channel: when its settings ask
    for it explicitly (`[web] enabled = true`; another agent's `[web] port`)."""
    fields = settings.web.model_fields_set
    return web_page_wanted(settings) and ("enabled" in fields or not settings.is_default_agent)


def wants_serving(settings: Settings) -> bool:
    """Whether `pinch gateway` has something to run for this agent: a channel account (a
    Telegram or Slack token) or a web page its settings ask for explicitly."""
    tokens = settings.telegram.bot_token is not None or settings.slack.bot_token is not None
    return tokens or page_alone(settings)


class AgentService:
    """Everything `pinch gateway` runs for one agent (see the module's docstring)."""

    def __init__(
        self,
        settings: Settings,
        *,
        extra_channels: Mapping[str, Channel] | None = None,
        note: Callable[[str], None] = print,
        own_log_only: bool = False,
        turn_slots: TurnSlots | None = None,
    ) -> None:
        self.settings = settings
        self.turn_slots = turn_slots  # the process's bound on turns at once (all its agents)
        self.name = settings.agent_id
        self.extra_channels = dict(extra_channels or {})
        self.note = note
        self.own_log_only = own_log_only  # its page's log tail: its own lines (several agents)
        self.gateway: Gateway | None = None
        self.runtime: Runtime | None = None
        self.web: WebServer | None = None
        self._timers: list[Any] = []  # the nightly dream's and the backups' schedulers
        self._scheduler: Any = None
        self._lock: IO[str] | None = None
        self.error: str | None = None  # why it could not start, when it could not

    @property
    def health(self) -> dict[str, ChannelHealth]:
        if self.gateway is None:
            return {}
        return dict(self.gateway.health)

    async def start(self) -> None:
        """Build and start everything; on failure, undo what started and raise GatewayError.
        Run it in a task of its own: what it starts inherits that task's `serving_agent`."""
        serving_agent.set(self.name)  # its log lines name it (app/gateway/agent_log.py)
        settings = self.settings
        exposed = web_exposure_problem(settings)
        if exposed is not None:  # refused before anything starts
            raise GatewayError(exposed)
        self._lock = acquire_lock(settings.agent_dir / "gateway.lock")
        try:
            await self._start()
        except BaseException:
            await self.stop(0)
            raise

    async def _start(self) -> None:
        settings = self.settings
        channels = build_channels(settings, self.note)
        channels.update(self.extra_channels)
        alone = page_alone(settings)  # the page alone only when asked
        if not any(messaging(name) for name in channels) and not (channels and alone):
            if settings.is_default_agent:
                raise GatewayError(
                    "No channel to run: set PINCH_TELEGRAM__BOT_TOKEN or PINCH_SLACK__BOT_TOKEN "
                    "(and PINCH_SLACK__APP_TOKEN), or run the web page alone ([web] enabled = "
                    "true, PINCH_WEB__ENABLED=true), "
                    "then start `pinch gateway` again."
                )
            own = env_prefix(self.name)
            raise GatewayError(
                f"No channel to run for agent {self.name}: set {own}TELEGRAM__BOT_TOKEN or "
                f"{own}SLACK__BOT_TOKEN (and {own}SLACK__APP_TOKEN), or give it a web page "
                f"([web] port in {settings.agent_dir / 'config.toml'}), then start "
                "`pinch gateway` again."
            )
        runtime = self.runtime = await build_runtime(settings)
        try:
            await runtime.sync_index()
        except MemoryError_ as exc:  # answering still works from the last complete index
            log.warning("The memory index could not be updated: %s", exc)
        runtime.watcher.start()
        await runtime.start_mcp()  # bounded wait; a failing server is retried, not fatal
        gateway = build_gateway(settings, runtime, channels, turn_slots=self.turn_slots)
        await gateway.start()  # logs which channels run; raises when none could start
        self.gateway = gateway
        web = build_web_server(
            settings, runtime, gateway, log_agent=self.name if self.own_log_only else None
        )
        if web is not None:
            try:
                await web.start()
                self.web = web
            except OSError as exc:  # the port is taken: the channels still answer
                log.error("%s", exc)
                gateway.failed["web"] = str(exc)
                gateway.health["web"] = ChannelHealth(False, f"could not start: {exc}")
                await gateway.write_heartbeat()  # `pinch doctor` sees it at once
        self._scheduler = await start_automations(runtime, gateway.channels)
        dreams = await start_nightly_dream(settings, owner_zone(runtime.clock))  # either way
        if dreams is not None:
            self._timers.append(dreams)
        backups = await start_backups(settings, owner_alert(settings, gateway.channels))
        if backups is not None:  # its own archives, in its own folder (Settings.backup_dir)
            self._timers.append(backups)

    def cancel_turns(self) -> None:
        if self.gateway is not None:
            self.gateway.cancel_turns()

    async def stop(self, grace_s: float) -> None:
        """Stop the timers and the scheduler first (nothing new starts), then the gateway (its
        running turns get `grace_s`), the web page, the runtime; release the agent's lock.
        Safe to call on a half-started service, and twice."""
        for timer in self._timers:
            with contextlib.suppress(Exception):
                timer.shutdown(wait=False)
        self._timers.clear()
        if self._scheduler is not None:
            scheduler, self._scheduler = self._scheduler, None
            await scheduler.stop()
        if self.gateway is not None:
            gateway, self.gateway = self.gateway, None
            await gateway.stop(grace_s)
        if self.web is not None:
            web, self.web = self.web, None
            await web.stop()
        if self.runtime is not None:
            runtime, self.runtime = self.runtime, None
            await runtime.aclose()
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.close()
