"""Receiving Telegram updates by webhook: an aiohttp server for Telegram's POSTs."""

from __future__ import annotations

import hmac
import json
import logging

from aiohttp import web

from channels.base import ChannelError
from channels.telegram.dispatch import UpdateDispatcher

log = logging.getLogger("channels.telegram.adapter")


class WebhookReceiver:
    """An aiohttp server for Telegram's webhook POSTs: the secret token header is checked, the
    answer is 200 only after the gateway's handler took the update (else Telegram retries)."""

    def __init__(
        self, dispatcher: UpdateDispatcher, *, listen: str, port: int, path: str, secret: str
    ) -> None:
        self._dispatcher = dispatcher
        self._listen = listen
        self._port = port
        self._path = path or "/"
        self._secret = secret
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=2 * 1024 * 1024)
        app.router.add_post(self._path, self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._listen, self._port)
        try:
            await site.start()
        except OSError as error:
            await self._runner.cleanup()
            raise ChannelError(
                f"Cannot listen for the Telegram webhook on {self._listen}:{self._port} "
                f"({error.strerror}); choose another [telegram] webhook_port"
            ) from None

    async def stop(self) -> None:
        await self._dispatcher.close()
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not hmac.compare_digest(given.encode(), self._secret.encode()):
            log.warning("Telegram webhook: refused a request without the right secret token")
            return web.Response(status=403)
        try:
            raw = json.loads(await request.read())
        except ValueError:
            log.warning("Telegram webhook: skipped a request whose body is not JSON")
            return web.Response(status=200)  # Telegram would retry it forever otherwise
        try:
            done = await self._dispatcher.accept(raw)
            await done
        except Exception as error:
            log.warning("Telegram webhook: the gateway did not take the update (%s)", error)
            return web.Response(status=500)
        return web.Response(status=200)
