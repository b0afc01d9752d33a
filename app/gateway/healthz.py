"""`GET /healthz` on `[gateway] health_port`: 200 when every channel is healthy, else 503, with
each channel's state as JSON (for a load balancer or a container orchestrator)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from channels.base import ChannelHealth
from common.channel_table import messaging


class HealthServer:
    """A small aiohttp server answering `/healthz` from `health()` (the gateway's channel
    health, as its heartbeat last found it). `start()` binds; `stop()` closes it."""

    def __init__(
        self, health: Callable[[], Mapping[str, ChannelHealth]], host: str, port: int
    ) -> None:
        self.health = health
        self.host = host
        self.port = port
        self._runner: Any = None

    async def start(self) -> None:
        from aiohttp import web  # aiohttp loads only when the port is configured

        async def healthz(_request: web.Request) -> web.Response:
            health = self.health()
            channels = {n: {"ok": h.ok, "detail": h.detail} for n, h in health.items()}
            ok = all(h.ok for n, h in health.items() if messaging(n))  # the page: reported
            return web.json_response({"ok": ok, "channels": channels}, status=200 if ok else 503)

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.host, self.port).start()
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
