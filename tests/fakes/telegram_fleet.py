"""A fake Telegram Bot API server holding many bots (one per token), for several gateway processes
serving many agents. The same wire format as tests/fakes/telegram_server.py (python-telegram-bot
talks to it unchanged), fewer methods: getMe, getUpdates, deleteWebhook, getWebhookInfo,
setMyCommands, sendChatAction, sendMessage, editMessageText.

    with TelegramFleet() as tg:
        bot = tg.add_bot("1001:AAsecret")                 # its own updates, chats, messages
        bot.push(bot.private_text("hello", user_id=501))
        bot.sent                                          # what that bot sent (edited in place)
        tg.conflicts                                      # getUpdates answered 409, all bots

Two getUpdates long polls on one token that overlap are what Telegram refuses: the older one is
answered 409 Conflict ("terminated by other getUpdates request"), and `conflicts` counts it —
unless the older poll's client had already gone (its connection closed: a process that stopped
or was killed), which Telegram would not see as a second poller either.
"""

from __future__ import annotations

import itertools
import json
import re
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.local_server import LocalHTTPServer
from tests.fakes.telegram_server import ApiError, SentMessage, _decode

CONFLICT = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance "
    "is running"
)


def bot_user(bot_id: int) -> dict[str, Any]:
    """The Bot API's `getMe` answer for the fleet's bot `bot_id`."""
    return {
        "id": bot_id,
        "is_bot": True,
        "first_name": f"Bot{bot_id}",
        "username": f"fleet{bot_id}_bot",
        "can_join_groups": True,
        "can_read_all_group_messages": False,
        "supports_inline_queries": False,
    }


def private_update(update_id: int, message_id: int, text: str, user_id: int) -> dict[str, Any]:
    """A Bot API update: `text` from user `user_id` in their private chat with the bot."""
    user = {"id": user_id, "is_bot": False, "first_name": f"U{user_id}"}
    return {
        "update_id": update_id,
        "message": {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": {"id": user_id, "type": "private", "first_name": user["first_name"]},
            "from": user,
            "text": text,
        },
    }


@dataclass
class Conflict:
    token: str
    at: float = field(default_factory=time.time)


class FleetBot:
    """One bot of the fleet: its token, pending updates and the messages it sent."""

    def __init__(self, token: str, cond: threading.Condition) -> None:
        self.token = token
        self.bot_id = int(token.split(":", 1)[0])
        self.sent: list[SentMessage] = []
        self.history: list[tuple[float, str]] = []  # (time, text) of every send and edit
        self.polls = 0
        self._updates: list[dict[str, Any]] = []
        self._cond = cond
        self._generation = 0
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1)

    # -- updates the test sends
    def private_text(self, text: str, *, user_id: int) -> dict[str, Any]:
        return private_update(next(self._update_ids), next(self._message_ids), text, user_id)

    def push(self, *updates: dict[str, Any]) -> None:
        with self._cond:
            self._updates.extend(updates)
            self._cond.notify_all()

    def texts(self, chat_id: int) -> list[str]:
        with self._cond:
            return [m.text for m in self.sent if m.chat_id == chat_id]

    # -- the Bot API
    def get_me(self) -> dict[str, Any]:
        return bot_user(self.bot_id)

    def get_updates(
        self, p: dict[str, Any], connected: Any, on_conflict: Any
    ) -> list[dict[str, Any]]:
        offset = int(p.get("offset") or 0)
        limit = int(p.get("limit") or 100)
        deadline = time.monotonic() + float(p.get("timeout") or 0)
        with self._cond:
            self.polls += 1
            self._generation += 1
            generation = self._generation
            self._cond.notify_all()
            if offset:
                self._updates = [u for u in self._updates if u["update_id"] >= offset]
            while True:
                if self._generation != generation:  # a newer poll on this token
                    if connected():
                        on_conflict(self.token)
                        raise ApiError(409, CONFLICT)
                    return []
                if self._updates:
                    return self._updates[:limit]
                left = deadline - time.monotonic()
                if left <= 0 or not connected():
                    return []
                self._cond.wait(min(left, 0.2))

    def send_message(self, p: dict[str, Any]) -> dict[str, Any]:
        chat_id = int(p["chat_id"])
        text = _shown(p)
        sent = SentMessage(
            chat_id, next(self._message_ids), text, str(p.get("text")), None, None, None
        )
        with self._cond:
            self.sent.append(sent)
            self.history.append((time.time(), text))
        return self._message(sent)

    def edit_message_text(self, p: dict[str, Any]) -> dict[str, Any]:
        chat_id, message_id = int(p["chat_id"]), int(p["message_id"])
        with self._cond:
            found = [m for m in self.sent if m.chat_id == chat_id and m.message_id == message_id]
            if not found:
                raise ApiError(400, "Bad Request: message to edit not found")
            text = _shown(p)
            if text == found[0].text:
                raise ApiError(400, "Bad Request: message is not modified")
            found[0].text = text
            found[0].edits += 1
            self.history.append((time.time(), text))
        return {**self._message(found[0]), "edit_date": int(time.time())}

    def _message(self, sent: SentMessage) -> dict[str, Any]:
        return {
            "message_id": sent.message_id,
            "date": int(time.time()),
            "chat": {"id": sent.chat_id, "type": "private", "first_name": "U"},
            "from": {"id": self.bot_id, "is_bot": True, "first_name": "Bot"},
            "text": sent.text,
        }


def _shown(p: dict[str, Any]) -> str:
    text = str(p.get("text") or "")
    if not text.strip():
        raise ApiError(400, "Bad Request: message text is empty")
    return re.sub(r"<[^>]+>", "", text) if p.get("parse_mode") == "HTML" else text


class TelegramFleet:
    """The server: `add_bot(token)` before the gateways start; `url` is every bot's
    `api_base_url`."""

    def __init__(self) -> None:
        self.bots: dict[str, FleetBot] = {}
        self.conflicts: list[Conflict] = []
        self._cond = threading.Condition()
        self._server = LocalHTTPServer(self._handler_class())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.port}"

    def __enter__(self) -> TelegramFleet:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    def add_bot(self, token: str) -> FleetBot:
        bot = self.bots[token] = FleetBot(token, self._cond)
        return bot

    def _conflict(self, token: str) -> None:
        self.conflicts.append(Conflict(token))

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fleet = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._dispatch()

            def do_POST(self) -> None:
                self._dispatch()

            def _connected(self) -> bool:
                """Whether the client still waits for this answer (a closed connection reads
                as end of file)."""
                sock: socket.socket = self.connection
                try:
                    poller = select.poll()  # not select(): no limit of 1,024 descriptors
                    poller.register(sock, select.POLLIN)
                    readable = poller.poll(0)
                    return not readable or sock.recv(1, socket.MSG_PEEK) != b""
                except OSError:
                    return False

            def _dispatch(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                match = re.fullmatch(r"/bot([^/]+)/(\w+)", self.path.split("?", 1)[0])
                bot = fleet.bots.get(match.group(1)) if match else None
                if match is None or bot is None:
                    self._json(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
                    return
                method = match.group(2)
                query = self.path.split("?", 1)[1] if "?" in self.path else ""
                params = _decode(self.headers.get("Content-Type", ""), body, query)
                try:
                    result = self._call(bot, method, params)
                except ApiError as error:
                    self._json(
                        error.status,
                        {"ok": False, "error_code": error.status, "description": error.description},
                    )
                    return
                self._json(200, {"ok": True, "result": result})

            def _call(self, bot: FleetBot, method: str, p: dict[str, Any]) -> Any:
                if method == "getMe":
                    return bot.get_me()
                if method == "getUpdates":
                    return bot.get_updates(p, self._connected, fleet._conflict)
                if method in ("deleteWebhook", "setMyCommands", "sendChatAction"):
                    return True
                if method == "getWebhookInfo":
                    return {"url": "", "has_custom_certificate": False, "pending_update_count": 0}
                if method == "sendMessage":
                    return bot.send_message(p)
                if method == "editMessageText":
                    return bot.edit_message_text(p)
                raise ApiError(404, "Not Found")

            def _json(self, status: int, body: dict[str, Any]) -> None:
                payload = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client went away
                    self.close_connection = True

        return Handler
