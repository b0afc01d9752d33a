"""A tiny chat platform on 127.0.0.1 for gateway process tests, with its client `RelayChannel`.

The platform keeps updates until the client confirms them (like Telegram's getUpdates offset),
so a killed gateway gets unconfirmed messages again after its restart — exactly the redelivery
the gateway's de-duplication must absorb. Replies are recorded with every edit.

    GET  /updates?offset=N   → [{"seq", "chat_id", "sender_id", "text"}] with seq ≥ N
    POST /send  {"chat_id", "text", "thread_id"} → {"message_id"}
    POST /edit  {"chat_id", "message_id", "text"}
    POST /typing {"chat_id"}
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

from channels.base import (
    Channel,
    ChannelHealth,
    InboundMessage,
    MessageHandler,
    OutboundMessage,
    SentMessage,
)
from tests.fakes.local_server import LocalHTTPServer


@dataclass
class Reply:
    chat_id: str
    message_id: str
    text: str
    edits: int = 0


class RelayServer(LocalHTTPServer):
    def __init__(self) -> None:
        super().__init__(self._handler_class())
        self.lock = threading.Lock()
        self.updates: list[dict[str, Any]] = []
        self.confirmed = 0  # updates with seq < confirmed are gone
        self.replies: dict[str, Reply] = {}
        self.typing = 0
        self._seq = itertools.count(1)
        self._ids = itertools.count(1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def post(self, chat_id: str, text: str, sender_id: str | None = None) -> None:
        with self.lock:
            seq = next(self._seq)
            self.updates.append(
                {"seq": seq, "chat_id": chat_id, "sender_id": sender_id or chat_id, "text": text}
            )

    def reply_texts(self) -> list[str]:
        with self.lock:
            return [r.text for r in self.replies.values()]

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlparse(self.path).query)
                offset = int(query.get("offset", ["0"])[0])
                with relay.lock:
                    relay.confirmed = max(relay.confirmed, offset)
                    pending = [u for u in relay.updates if u["seq"] >= relay.confirmed]
                self._json(pending)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                path = urlparse(self.path).path
                with relay.lock:
                    if path == "/send":
                        mid = str(next(relay._ids))
                        relay.replies[mid] = Reply(body["chat_id"], mid, body["text"])
                        self._json({"message_id": mid})
                        return
                    if path == "/edit":
                        reply = relay.replies[body["message_id"]]
                        reply.text, reply.edits = body["text"], reply.edits + 1
                    elif path == "/typing":
                        relay.typing += 1
                self._json({"ok": True})

            def _json(self, data: Any) -> None:
                raw = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


# The client side: a Channel over the relay, used inside the gateway process under test.


class RelayChannel(Channel):
    min_edit_interval_s = 0.05

    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.url = url
        self._task: asyncio.Task[None] | None = None
        self._session: Any = None

    async def start(self, on_message: MessageHandler) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession()
        self._task = asyncio.ensure_future(self._poll(on_message))

    async def _poll(self, on_message: MessageHandler) -> None:
        offset = 0
        while True:
            try:
                async with self._session.get(f"{self.url}/updates?offset={offset}") as resp:
                    updates = await resp.json()
            except Exception:
                await asyncio.sleep(0.1)
                continue
            for update in updates:
                await on_message(
                    InboundMessage(
                        channel=self.name,
                        sender_id=update["sender_id"],
                        chat_id=update["chat_id"],
                        chat_type="direct",
                        text=update["text"],
                        message_id=str(update["seq"]),
                        dedup_key=f"{update['chat_id']}:{update['seq']}",
                        mentioned=True,
                    )
                )
                offset = update["seq"] + 1  # confirmed with the next poll
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._session is not None:
            await self._session.close()

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        async with self._session.post(f"{self.url}{path}", json=body) as resp:
            resp.raise_for_status()
            return await resp.json()

    async def send(self, message: OutboundMessage) -> list[SentMessage]:
        data = await self._post("/send", {"chat_id": message.chat_id, "text": message.text})
        return [SentMessage(self.name, message.chat_id, data["message_id"], message.thread_id)]

    async def edit(self, sent: SentMessage, text: str) -> list[SentMessage]:
        await self._post(
            "/edit", {"chat_id": sent.chat_id, "message_id": sent.message_id, "text": text}
        )
        return [sent]

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        await self._post("/typing", {"chat_id": chat_id})

    async def check(self) -> ChannelHealth:
        return ChannelHealth(True, f"relay at {self.url}")
