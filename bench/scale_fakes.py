"""The fakes of bench/scale.py, each in a process of its own, on aiohttp: one event loop, so a
thousand long polls are a thousand waiting coroutines, not a thousand threads (the threaded
`http.server` fakes of tests/fakes/ did not keep up beyond 100 agents: bench/RESULTS.md).

    python bench/scale_fakes.py telegram --port-file F   # a Telegram Bot API holding many bots
    python bench/scale_fakes.py model --port-file F      # the Anthropic Messages API, echoing

Each writes the port it listens on to F once it listens, and serves until SIGTERM.

The Telegram fake speaks what python-telegram-bot and Pinch's adapter use (getMe, getUpdates,
deleteWebhook, getWebhookInfo, setMyCommands, sendChatAction, sendMessage, editMessageText) for
every bot registered, and answers 409 Conflict to the older of two overlapping getUpdates long
polls on one token whose client is still connected, as Telegram does (counted). The model fake
answers every Messages API request, streamed or not, with "re: " and the message tokens
(`m-AGENT-SESSION-rROUND`) of the last user message.

Both time what the bench measures on the machine's monotonic clock (one clock for every
process): per message token, when it was pushed, when a getUpdates answer first carried it
(fetched), when a bot's message (sent or edited) first showed it (replied), how many of the
bots' final messages name it (answered: lost 0, duplicated >1), how many bot messages name
none (notices: a turn that failed and said so); and per token, when the model
call carrying it began and ended. The bench reads them from `/_scale/*` routes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import re
import signal
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from tests.fakes.model_server import last_user_text
from tests.fakes.telegram_fleet import bot_user, private_update

TOKEN = re.compile(r"\bm-\d+-\d+-r\d+\b")
CONFLICT = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance "
    "is running"
)
BACKLOG = 4096  # the kernel caps it at net.core.somaxconn


class ApiError(Exception):
    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status, self.description = status, description


class Bot:
    """One bot: its pending updates, its messages (edited in place) and its long polls."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.bot_id = int(token.split(":", 1)[0])
        self.updates: list[dict[str, Any]] = []
        self.messages: dict[int, tuple[int, str]] = {}  # message_id -> (chat_id, text)
        self.polls = 0
        self.generation = 0
        self.wake = asyncio.Event()
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1)

    def update(self, text: str, user_id: int) -> dict[str, Any]:
        return private_update(next(self._update_ids), next(self._message_ids), text, user_id)

    def me(self) -> dict[str, Any]:
        return bot_user(self.bot_id)

    def message(self, message_id: int) -> dict[str, Any]:
        chat_id, text = self.messages[message_id]
        return {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private", "first_name": "U"},
            "from": {"id": self.bot_id, "is_bot": True, "first_name": "Bot"},
            "text": text,
        }


class TelegramFleet:
    """The Telegram fake's state and routes."""

    def __init__(self) -> None:
        self.bots: dict[str, Bot] = {}
        self.order: list[Bot] = []
        self.conflicts = 0
        self.pushed: dict[str, float] = {}
        self.fetched: dict[str, float] = {}
        self.replied: dict[str, float] = {}

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/_scale/bots", self.add_bots)
        app.router.add_post("/_scale/push", self.push)
        app.router.add_get("/_scale/progress", self.progress)
        app.router.add_get("/_scale/report", self.report)
        app.router.add_route("*", "/bot{token}/{method}", self.api)

    # -- control -------------------------------------------------------------------------
    async def add_bots(self, request: web.Request) -> web.Response:
        for token in (await request.json())["tokens"]:
            if token not in self.bots:
                bot = self.bots[token] = Bot(token)
                self.order.append(bot)
        return web.json_response({"bots": len(self.order)})

    async def push(self, request: web.Request) -> web.Response:
        """items: [[bot index, user id, text], ...] — each an update on that bot."""
        now = time.monotonic()
        touched = set()
        for index, user_id, text in (await request.json())["items"]:
            bot = self.order[index]
            bot.updates.append(bot.update(text, user_id))
            for token in TOKEN.findall(text):
                self.pushed[token] = now
            touched.add(index)
        for index in touched:
            self.order[index].wake.set()
        return web.json_response({"pushed": len(self.pushed)})

    def notices(self) -> int:
        """The bots' messages that name no message token: error notices ("could not connect
        to the model server…"), each a turn that failed instead of answering."""
        return sum(
            1
            for bot in self.order
            for _chat, text in bot.messages.values()
            if not TOKEN.search(text)
        )

    async def progress(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "replied": len(self.replied),
                "notices": self.notices(),
                "polls": [b.polls for b in self.order],
                "conflicts": self.conflicts,
            }
        )

    async def report(self, request: web.Request) -> web.Response:
        answered: dict[str, int] = {}
        for bot in self.order:
            for _chat, text in bot.messages.values():
                for token in TOKEN.findall(text):
                    answered[token] = answered.get(token, 0) + 1
        return web.json_response(
            {
                "pushed": self.pushed,
                "fetched": self.fetched,
                "replied": self.replied,
                "answered": answered,
                "notices": self.notices(),
                "conflicts": self.conflicts,
            }
        )

    # -- the Bot API ---------------------------------------------------------------------
    async def api(self, request: web.Request) -> web.Response:
        bot = self.bots.get(request.match_info["token"])
        if bot is None:
            return _json(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
        body = await request.read()
        params = _decode(request.headers.get("Content-Type", ""), body, request.query_string)
        try:
            result = await self.call(bot, request.match_info["method"], params, request)
        except ApiError as error:
            failure = {"ok": False, "error_code": error.status, "description": error.description}
            return _json(error.status, failure)
        return _json(200, {"ok": True, "result": result})

    async def call(self, bot: Bot, method: str, p: dict[str, Any], request: web.Request) -> Any:
        if method == "getMe":
            return bot.me()
        if method == "getUpdates":
            return await self.get_updates(bot, p, request)
        if method in ("deleteWebhook", "setMyCommands", "sendChatAction"):
            return True
        if method == "getWebhookInfo":
            return {"url": "", "has_custom_certificate": False, "pending_update_count": 0}
        if method == "sendMessage":
            message_id = next(bot._message_ids)
            bot.messages[message_id] = (int(p["chat_id"]), self.shown(p))
            return bot.message(message_id)
        if method == "editMessageText":
            message_id = int(p["message_id"])
            if message_id not in bot.messages:
                raise ApiError(400, "Bad Request: message to edit not found")
            chat_id, before = bot.messages[message_id]
            text = self.shown(p)
            if text == before:
                raise ApiError(400, "Bad Request: message is not modified")
            bot.messages[message_id] = (chat_id, text)
            return {**bot.message(message_id), "edit_date": int(time.time())}
        raise ApiError(404, "Not Found")

    def shown(self, p: dict[str, Any]) -> str:
        text = str(p.get("text") or "")
        if not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if p.get("parse_mode") == "HTML":
            text = re.sub(r"<[^>]+>", "", text)
        now = time.monotonic()
        for token in TOKEN.findall(text):
            self.replied.setdefault(token, now)
        return text

    async def get_updates(
        self, bot: Bot, p: dict[str, Any], request: web.Request
    ) -> list[dict[str, Any]]:
        offset = int(p.get("offset") or 0)
        limit = int(p.get("limit") or 100)
        deadline = time.monotonic() + float(p.get("timeout") or 0)
        bot.polls += 1
        bot.generation += 1
        generation = bot.generation
        bot.wake.set()  # an older poll on this token ends now
        bot.wake = asyncio.Event()
        if offset:
            bot.updates = [u for u in bot.updates if u["update_id"] >= offset]
        while True:
            if bot.generation != generation:  # a newer poll on this token
                if _connected(request):
                    self.conflicts += 1
                    raise ApiError(409, CONFLICT)
                return []
            if bot.updates:
                batch = bot.updates[:limit]
                now = time.monotonic()
                for update in batch:
                    for token in TOKEN.findall(update["message"]["text"]):
                        self.fetched.setdefault(token, now)
                return batch
            left = deadline - time.monotonic()
            if left <= 0 or not _connected(request):
                return []
            wake = bot.wake
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), min(left, 1.0))


def _decode(content_type: str, body: bytes, query: str) -> dict[str, Any]:
    """A Bot API call's parameters: JSON, or form-encoded (what python-telegram-bot sends)."""
    if content_type.startswith("application/json") and body:
        return dict(json.loads(body))
    params: dict[str, Any] = dict(parse_qsl(query))
    params.update(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    return params


def _connected(request: web.Request) -> bool:
    """Whether the client still waits for this answer."""
    transport = request.transport
    return transport is not None and not transport.is_closing()


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.Response(status=status, body=json.dumps(body), content_type="application/json")


class EchoModel:
    """The Anthropic Messages API answering "re: <the message tokens>" at once."""

    def __init__(self) -> None:
        self.calls = 0
        self.ids = itertools.count(1)
        self.timing: dict[str, tuple[float, float]] = {}  # token -> (began, ended)

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self.messages)
        app.router.add_get("/_scale/report", self.report)

    async def report(self, request: web.Request) -> web.Response:
        return web.json_response({"calls": self.calls, "timing": self.timing})

    async def messages(self, request: web.Request) -> web.StreamResponse:
        began = time.monotonic()
        if not (request.headers.get("x-api-key") or request.headers.get("authorization")):
            return _json(401, {"type": "error", "error": {"type": "authentication_error"}})
        body = await request.json()
        self.calls += 1
        tokens = TOKEN.findall(last_user_text(body))
        text = "re: " + " ".join(tokens)
        usage = {
            "input_tokens": max(1, len(json.dumps(body.get("messages", []))) // 4),
            "output_tokens": max(1, len(text) // 4),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        message = {
            "id": f"msg_scale_{next(self.ids)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", ""),
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            response: web.StreamResponse = _json(200, message)
        else:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for kind, data in _events(message, text):
                await response.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())
            await response.write_eof()
        ended = time.monotonic()
        for token in tokens:
            self.timing[token] = (began, ended)
        return response


def _events(message: dict[str, Any], text: str) -> list[tuple[str, dict[str, Any]]]:
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": start}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"index": 0}),
        (
            "message_delta",
            {"delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": usage},
        ),
        ("message_stop", {}),
    ]
    return [(kind, {"type": kind, **data}) for kind, data in events]


async def serve(kind: str, port_file: Path, port: int) -> None:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    fake: TelegramFleet | EchoModel = TelegramFleet() if kind == "telegram" else EchoModel()
    fake.routes(app)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=BACKLOG)
    await site.start()
    port_file.write_text(str(runner.addresses[0][1]))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=("telegram", "model"))
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(serve(args.kind, args.port_file, args.port))


if __name__ == "__main__":
    main()
