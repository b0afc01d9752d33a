"""`pinch gateway`: the agents of the installation in one process — each its own channels,
memory watcher, agent, page and automations (app/gateway/agent_service.py; app/wiring.py builds
them) — shared with other gateway processes by lease (app/gateway/fleet.py).

One process serves an agent at a time (its lease; and on one machine an OS lock on
<home>/agents/<id>/gateway.lock). SIGTERM/SIGINT drains: running turns get `shutdown_grace_s`
to finish, queued messages stay queued and are answered after the restart (or by the gateway
that takes the agent over); a second signal cancels the running turns at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from agent.mcp.mcp_config import references
from app.gateway.agent_log import NameTheAgent
from app.gateway.agent_service import AgentService, acquire_lock
from app.gateway.fleet import AgentSlot, Fleet
from app.gateway.healthz import HealthServer
from app.gateway.server import GatewayError
from app.gateway.workers import TurnSlots
from app.logging_setup import add_redacted_handler
from app.wiring import build_agent_leases, web_exposure_problem
from channels.base import Channel, ChannelHealth
from memory.store.db import opened_when_free

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger("pinch.gateway")
MIN_SECRET_CHARS = 6  # shorter values are not redacted (they would garble every log line)

__all__ = [
    "GatewayError",
    "acquire_lock",
    "configure_logging",
    "run_agents",
    "run_gateway",
    "settings_secrets",
]


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


def configure_logging(
    settings: Settings, level: int = logging.INFO, *, secrets_of: Sequence[Settings] = ()
) -> None:
    """Log to stderr, redacting the secrets of `settings` (and of the other agents served)."""
    secrets = [x for s in (settings, *secrets_of) for x in settings_secrets(s)]
    add_redacted_handler(logging.StreamHandler(), secrets)
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
    """Serve `settings`' agent until SIGTERM/SIGINT; returns the exit status. Raises
    GatewayError when it cannot start (another gateway, no channel)."""
    extra = {settings.agent_id: extra_channels} if extra_channels else {}
    return await run_agents([settings], extra_channels=extra, note=note)


async def run_agents(
    agents: Sequence[Settings],
    *,
    extra_channels: Mapping[str, Mapping[str, Channel]] | None = None,
    note: Callable[[str], None] = print,
) -> int:
    """Serve `agents` (each its own runtime, channels, page, automations) in this process,
    sharing them by lease with other gateway processes (app/gateway/fleet.py), until
    SIGTERM/SIGINT. Raises GatewayError when no agent can be served: every one failed to
    start (each reason given)."""
    several = len(agents) > 1
    if several:  # each line logged while serving an agent names it
        for handler in logging.getLogger().handlers:
            handler.addFilter(NameTheAgent())

    # One bound for the whole process: beyond it turns wait, their messages in the queue.
    turn_slots = TurnSlots(agents[0].gateway.max_concurrent_turns_per_process)

    def make_service(settings: Settings) -> AgentService:
        name = settings.agent_id
        return AgentService(
            settings,
            extra_channels=(extra_channels or {}).get(name),
            note=(lambda line: note(f"{name}: {line}")) if several else note,
            own_log_only=several,  # its web page's log tail: its own lines only
            turn_slots=turn_slots,
        )

    slots: list[AgentSlot] = []
    problems: list[str] = []
    for settings in agents:
        exposed = web_exposure_problem(settings)
        if exposed is not None:  # refused before anything of that agent starts
            if not several:
                raise GatewayError(exposed)
            problems.append(f"{settings.agent_id}: {exposed}")
            log.error("%s: %s", settings.agent_id, exposed)
            continue
        try:
            leases, close = await asyncio.to_thread(
                opened_when_free, functools.partial(build_agent_leases, settings)
            )
        except Exception as exc:  # that agent's database: reported, the others still run
            problems.append(f"{settings.agent_id}: {exc}")
            log.error("%s: cannot open the agent's database: %s", settings.agent_id, exc)
            continue
        slots.append(AgentSlot(settings, leases, close))
    if not slots:
        raise GatewayError("No agent could start — " + "; ".join(problems))
    first = agents[0].gateway
    fleet = Fleet(
        slots,
        make_service,
        lease_s=first.agent_lease_s,
        heartbeat_s=first.agent_heartbeat_s,
        grace_s=first.shutdown_grace_s,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():  # a second Ctrl-C: don't wait out the grace period
            log.warning("Stopping now; interrupted turns are answered after the restart")
            fleet.cancel_turns()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    beats = asyncio.ensure_future(fleet.run(stop))
    health = None
    try:
        health = await _start_health(agents[0], fleet)
        await fleet.first_beat()
        if stop.is_set():  # told to stop while starting: a clean stop, not a failure to start
            await beats
            return 0
        if len(slots) == 1 and not fleet.served():  # one agent, served elsewhere: say so
            stop.set()
            await beats
            raise GatewayError(await _served_elsewhere(slots[0]))
        failed = fleet.failed()
        if len(failed) == len(slots) and not any(s.error is None for s in fleet.served()):
            stop.set()
            await beats
            if len(agents) == 1:
                raise GatewayError(next(iter(failed.values())))
            raise GatewayError(
                "No agent could start — " + "; ".join(f"{n}: {why}" for n, why in failed.items())
            )
        if several or fleet.peers:
            served = ", ".join(s.name for s in fleet.served()) or "none yet (standby)"
            log.info("Gateway %s serving %s of %d agent(s)", fleet.me.gateway, served, len(slots))
        await beats
    finally:
        stop.set()
        if not beats.done():
            await beats
        if health is not None:
            await health.stop()
        fleet.close()
    return 0


async def _served_elsewhere(slot: AgentSlot) -> str:
    lease = await asyncio.to_thread(slot.leases.current)
    who = f"pid {lease.holder.pid} on {lease.holder.host}" if lease is not None else "unknown"
    return (
        f"Another Pinch gateway is already running for agent {slot.name} ({who}); stop it "
        "first — or serve several agents (`pinch gateway`), which gateways share by lease."
    )


async def _start_health(settings: Settings, fleet: Fleet) -> HealthServer | None:
    """One /healthz for the process (`[gateway] health_port`), listing each agent served."""
    if settings.gateway.health_port is None:
        return None

    def default_channels() -> dict[str, ChannelHealth]:
        for slot in fleet.served():
            if slot.settings.is_default_agent or len(fleet.slots) == 1:
                return slot.service.health if slot.service is not None else {}
        return {}

    server = HealthServer(
        default_channels,
        settings.gateway.health_listen,
        settings.gateway.health_port,
        agents=fleet.health,
    )
    try:
        await server.start()
    except OSError as exc:  # another gateway on this machine has the port: answering goes on
        log.error("/healthz could not start on port %s: %s", settings.gateway.health_port, exc)
        return None
    return server
