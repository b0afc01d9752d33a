"""`GET /healthz` on `[gateway] health_port`: 200 when every channel is healthy, else 503, with
each channel's state as JSON (for a load balancer or a container orchestrator). A process that
serves several agents lists each under "agents" (its channels, or why it could not start);
"channels" stays the default agent's (or the only agent's)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from channels.base import ChannelHealth
from common.channel_table import messaging


@dataclass(frozen=True)
class AgentHealth:
    """One agent as this process serves it: its channels' health, or why it could not start."""

    channels: Mapping[str, ChannelHealth] = field(default_factory=dict)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and channels_ok(self.channels)


def channels_ok(health: Mapping[str, ChannelHealth]) -> bool:
    return all(h.ok for n, h in health.items() if messaging(n))  # the page: reported


def _channels(health: Mapping[str, ChannelHealth]) -> dict[str, Any]:
    return {n: {"ok": h.ok, "detail": h.detail} for n, h in health.items()}


class HealthServer:
    """A small aiohttp server answering `/healthz` from `health()` (the gateway's channel
    health, as its heartbeat last found it) and, serving several agents, `agents()`.
    `start()` binds; `stop()` closes it."""

    def __init__(
        self,
        health: Callable[[], Mapping[str, ChannelHealth]],
        host: str,
        port: int,
        *,
        agents: Callable[[], Mapping[str, AgentHealth]] | None = None,
    ) -> None:
        self.health = health
        self.agents = agents
        self.host = host
        self.port = port
        self._runner: Any = None

    def report(self) -> tuple[bool, dict[str, Any]]:
        health = self.health()
        ok = channels_ok(health)
        body: dict[str, Any] = {"ok": ok, "channels": _channels(health)}
        if self.agents is not None:
            agents = self.agents()
            body["agents"] = {
                name: {"ok": a.ok, "channels": _channels(a.channels), "error": a.error}
                for name, a in agents.items()
            }
            ok = ok and all(a.ok for a in agents.values())
            body["ok"] = ok
        return ok, body

    async def start(self) -> None:
        from aiohttp import web  # aiohttp loads only when the port is configured

        async def healthz(_request: web.Request) -> web.Response:
            ok, body = self.report()
            return web.json_response(body, status=200 if ok else 503)

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.host, self.port).start()
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
