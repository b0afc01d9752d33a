"""A fake Slack on 127.0.0.1: the Web API methods Pinch calls and the Socket Mode websocket.

Runs in the test's own event loop (aiohttp), so tests drive it with awaits and events:

    async with FakeSlack() as slack:
        channel = SlackChannel(SlackConfig(bot_token=slack.bot_token, app_token=slack.app_token,
                                           api_base_url=slack.api_url), ...)
        await channel.start(on_message)
        envelope = await slack.push_event(slack.dm("hello"))
        await slack.wait_acked(envelope)
        slack.calls_to("chat.postMessage")        # every Web API call, in order

Web API: `POST|GET /api/<method>` with form, query or JSON parameters, answered like Slack:
HTTP 200 with `{"ok": true, ...}` or `{"ok": false, "error": "..."}`, and HTTP 429 with a
`Retry-After` header when rate limited. The bot token (`xoxb-`) works for every method but
`apps.connections.open`, which needs the app token (`xapp-`); anything else is `invalid_auth`.
Methods: auth.test, apps.connections.open, chat.postMessage, chat.update, conversations.info,
users.info; files are served at `/files/<id>/<name>` to the bot token only (anyone else gets the
HTML login page, as Slack does).

Socket Mode: `apps.connections.open` returns `ws://127.0.0.1:<port>/link/?ticket=…`; a
connection gets `hello`, then the `events_api` envelopes a test pushes; the client's acks
(`{"envelope_id": …}`) are recorded with their time. Test controls: `rate_limit`, `delay`,
`fail`, `cut_connection`, `drop_sockets` (close frame), `abort_sockets` (no close frame),
`ponging = False` (a connection that stops answering pings), `handshake_delay_s` (a slow
network), `files_scope = False` (downloads get the sign-in page), `files_redirect` (downloads
answer 302 to another server), `scopes` (granted OAuth
scopes, sent as X-OAuth-Scopes), `answer_normally`, `send_disconnect`,
`open_sockets`, and event builders (`dm`, `channel_message`, `mention_pair`, `bot_message`,
`file_share`, `message_changed`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from aiohttp import WSMsgType, web

BOT_TOKEN = "xoxb-1-fake-bot-token"
APP_TOKEN = "xapp-1-fake-app-token"
TEAM_ID = "T0FAKE"
APP_ID = "A0FAKE"
BOT_USER_ID = "U0BOT"
BOT_ID = "B0BOT"


SCOPES = (
    "app_mentions:read",
    "chat:write",
    "im:history",
    "im:read",
    "channels:history",
    "channels:read",
    "groups:history",
    "groups:read",
    "mpim:history",
    "mpim:read",
    "files:read",
    "users:read",
)


@dataclass
class ApiCall:
    method: str
    params: dict[str, Any]
    token: str | None
    at: float = field(default_factory=time.monotonic)


@dataclass
class _Scripted:
    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    cut: bool = False  # drop the TCP connection instead of answering


class FakeSlack:
    def __init__(self) -> None:
        self.bot_token = BOT_TOKEN
        self.app_token = APP_TOKEN
        self.bot_user_id = BOT_USER_ID
        self.bot_id = BOT_ID
        self.calls: list[ApiCall] = []
        self.posted: list[dict[str, Any]] = []  # messages as chat.postMessage stored them
        self.answered: list[str] = []  # methods whose answer was written (or cut), in order
        self.acks: dict[str, float] = {}  # envelope_id -> when the ack arrived
        self.ack_payloads: list[dict[str, Any]] = []
        self.sockets_opened = 0
        self.files_scope = True  # False: the app lacks files:read (downloads get the sign-in page)
        self.files_redirect: str | None = None  # set: downloads answer 302 to this URL + path
        self.handshake_delay_s = 0.0  # a slow network: the websocket handshake takes this long
        self.ponging = True  # False: ignore the client's pings (a half-dead connection)
        self.scopes = list(SCOPES)  # what the bot token was granted (X-OAuth-Scopes)
        self.users: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        self.files: dict[str, tuple[bytes, str]] = {}  # file id -> (content, mimetype)
        self.file_objects: dict[str, dict[str, Any]] = {}  # file id -> what files.info returns
        self._open: set[web.WebSocketResponse] = set()
        self._scripts: dict[str, list[_Scripted]] = {}
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> Self:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self._socket)
        app.router.add_get("/files/{file_id}/{name}", self._file)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def stop(self) -> None:
        for ws in list(self._open):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    # -- test controls -----------------------------------------------------------------------

    def rate_limit(self, method: str, *, times: int = 1, retry_after: int = 1) -> None:
        """The next `times` calls of `method` answer HTTP 429 with `Retry-After`."""
        body = {"ok": False, "error": "ratelimited"}
        headers = {"Retry-After": str(retry_after)}
        self._script(method, [_Scripted(429, body, headers) for _ in range(times)])

    def delay(self, method: str, seconds: float) -> None:
        """The next call of `method` takes effect at once but answers only after `seconds`."""
        self._script(method, [_Scripted(delay_s=seconds)])

    def cut_connection(self, method: str) -> None:
        """The next call of `method` takes effect, then the connection drops with no answer."""
        self._script(method, [_Scripted(cut=True)])

    def fail(self, method: str, error: str, *, times: int = 1) -> None:
        self._script(method, [_Scripted(200, {"ok": False, "error": error})] * times)

    def answer_normally(self) -> None:
        """Forget every scripted failure, delay and rate limit."""
        self._scripts.clear()

    def _script(self, method: str, items: list[_Scripted]) -> None:
        self._scripts.setdefault(method, []).extend(items)

    def calls_to(self, method: str) -> list[ApiCall]:
        return [c for c in self.calls if c.method == method]

    @property
    def open_sockets(self) -> int:
        return sum(1 for ws in self._open if not ws.closed)

    async def wait_for(self, predicate: Any, timeout: float = 5.0) -> None:
        """Wait until `predicate()` is true (re-checked whenever the fake's state changes)."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)

    async def wait_connected(self, *, sockets_opened: int = 1, timeout: float = 5.0) -> None:
        await self.wait_for(
            lambda: self.sockets_opened >= sockets_opened and self.open_sockets >= 1, timeout
        )

    async def wait_acked(self, envelope_id: str, timeout: float = 5.0) -> None:
        await self.wait_for(lambda: envelope_id in self.acks, timeout)

    async def push_event(
        self,
        event: dict[str, Any],
        *,
        event_id: str | None = None,
        retry_attempt: int = 0,
        retry_reason: str = "",
    ) -> str:
        """Deliver `event` in an `events_api` envelope on the open socket; returns envelope_id."""
        envelope_id = f"env-{next(self._ids)}"
        payload = {
            "token": "legacy-verification-token",
            "team_id": TEAM_ID,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{next(self._ids):08d}",
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "team_id": TEAM_ID,
                    "user_id": BOT_USER_ID,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
        }
        envelope = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": retry_attempt,
            "retry_reason": retry_reason,
        }
        await self.push_raw(json.dumps(envelope))
        return envelope_id

    async def push_raw(self, text: str) -> None:
        await self.wait_for(lambda: self.open_sockets >= 1)
        ws = next(ws for ws in self._open if not ws.closed)
        await ws.send_str(text)

    async def send_disconnect(self, reason: str = "refresh_requested") -> None:
        body = {"type": "disconnect", "reason": reason, "debug_info": {"host": "fake"}}
        await self.push_raw(json.dumps(body))

    async def drop_sockets(self) -> None:
        """Close every open socket with a close frame (what Slack does on a refresh)."""
        for ws in list(self._open):
            await ws.close(code=1001, message=b"going away")

    def abort_sockets(self) -> None:
        """Cut every open socket's TCP connection without a close frame."""
        for ws in list(self._open):
            transport = ws._req.transport if ws._req is not None else None  # type: ignore[attr-defined]
            if transport is not None:
                transport.abort()

    # -- event builders (the shapes Slack sends) ---------------------------------------------

    def next_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    def dm(self, text: str, *, user: str = "U0OWNER", channel: str = "D0DM", **extra: Any) -> dict:
        return self._message(text, user=user, channel=channel, channel_type="im", **extra)

    def channel_message(
        self, text: str, *, user: str = "U0OWNER", channel: str = "C0GEN", **extra: Any
    ) -> dict:
        return self._message(text, user=user, channel=channel, channel_type="channel", **extra)

    def mention_pair(
        self, text: str, *, user: str = "U0OWNER", channel: str = "C0GEN", **extra: Any
    ) -> tuple[dict, dict]:
        """The `message` and `app_mention` events Slack sends for one post that mentions the bot."""
        message = self.channel_message(
            f"<@{BOT_USER_ID}> {text}", user=user, channel=channel, **extra
        )
        mention = {
            "type": "app_mention",
            "user": user,
            "text": message["text"],
            "ts": message["ts"],
            "channel": channel,
            "event_ts": message["ts"],
            "client_msg_id": message["client_msg_id"],
        }
        if "thread_ts" in message:
            mention["thread_ts"] = message["thread_ts"]
        return message, mention

    def bot_message(
        self, text: str, *, own: bool = False, channel: str = "C0GEN", channel_type: str = "channel"
    ) -> dict:
        ts = self.next_ts()
        if own:  # how the bot's own chat.postMessage comes back
            return {
                "type": "message",
                "user": BOT_USER_ID,
                "bot_id": BOT_ID,
                "app_id": APP_ID,
                "text": text,
                "ts": ts,
                "channel": channel,
                "event_ts": ts,
                "channel_type": channel_type,
            }
        return {
            "type": "message",
            "subtype": "bot_message",
            "bot_id": "B0OTHER",
            "username": "otherbot",
            "text": text,
            "ts": ts,
            "channel": channel,
            "event_ts": ts,
            "channel_type": channel_type,
        }

    def add_file(
        self,
        content: bytes,
        *,
        name: str = "notes.txt",
        mimetype: str = "text/plain",
        check_file_info: bool = False,
    ) -> dict:
        """Store a file and return its object as Slack puts it in a `file_share` event; with
        `check_file_info`, the stub Slack sends instead (`"file_access": "check_file_info"`,
        no links), whose whole object only `files.info` gives."""
        file_id = f"F{next(self._ids):08d}"
        self.files[file_id] = (content, mimetype)
        url = f"http://127.0.0.1:{self.port}/files/{file_id}/{name}"
        whole = self._file_object(file_id, content, name, mimetype, url)
        self.file_objects[file_id] = whole
        if check_file_info:
            return {"id": file_id, "mode": "file_access", "file_access": "check_file_info"}
        return whole

    @staticmethod
    def _file_object(file_id: str, content: bytes, name: str, mimetype: str, url: str) -> dict:
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": name.rsplit(".", 1)[-1],
            "size": len(content),
            "url_private": url,
            "url_private_download": url + "?download=1",
        }

    def file_share(self, text: str, files: list[dict], **kwargs: Any) -> dict:
        event = self.dm(text, **kwargs)
        event.update(subtype="file_share", files=files, upload=False, display_as_bot=False)
        return event

    def message_changed(self, channel: str = "C0GEN") -> dict:
        ts = self.next_ts()
        return {
            "type": "message",
            "subtype": "message_changed",
            "hidden": True,
            "channel": channel,
            "channel_type": "channel",
            "ts": ts,
            "event_ts": ts,
            "message": {"type": "message", "user": "U0OWNER", "text": "edited", "ts": ts},
            "previous_message": {"type": "message", "user": "U0OWNER", "text": "old", "ts": ts},
        }

    def _message(
        self, text: str, *, user: str, channel: str, channel_type: str, **extra: Any
    ) -> dict:
        ts = self.next_ts()
        event = {
            "type": "message",
            "user": user,
            "text": text,
            "ts": ts,
            "channel": channel,
            "event_ts": ts,
            "channel_type": channel_type,
            "client_msg_id": f"cm-{ts}",
            "team": TEAM_ID,
        }
        event.update(extra)
        return event

    # -- HTTP handlers -----------------------------------------------------------------------

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        params: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            if request.content_type == "application/json":
                params.update(await request.json())
            else:
                params.update(await request.post())
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else params.get("token")
        self.calls.append(ApiCall(method, params, token))
        await self._notify()
        scripted = self._scripts.get(method)
        step = scripted.pop(0) if scripted else _Scripted()
        if step.status != 200 or step.body is not None:
            return await self._answered(
                method, web.json_response(step.body, status=step.status, headers=step.headers)
            )
        body = self._answer(method, params, token)
        headers = {"X-OAuth-Scopes": ",".join(self.scopes)} if token == BOT_TOKEN else {}
        if step.cut:
            assert request.transport is not None
            request.transport.abort()
            return await self._answered(method, web.Response())
        if step.delay_s:
            await asyncio.sleep(step.delay_s)
        return await self._answered(method, web.json_response(body, headers=headers))

    async def _answered(self, method: str, response: web.Response | None) -> web.Response:
        self.answered.append(method)
        await self._notify()
        return response  # type: ignore[return-value]

    def _answer(self, method: str, params: dict[str, Any], token: str | None) -> dict[str, Any]:
        if not token:
            return {"ok": False, "error": "not_authed"}
        wants_app = method == "apps.connections.open"
        if token not in (BOT_TOKEN, APP_TOKEN):
            return {"ok": False, "error": "invalid_auth"}
        if wants_app != (token == APP_TOKEN):
            return {"ok": False, "error": "not_allowed_token_type"}
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return {"ok": False, "error": "unknown_method"}
        return handler(params)

    def _m_auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://fake.slack.com/",
            "team": "Fake Team",
            "user": "pinch",
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _m_apps_connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        ticket = f"t-{next(self._ids)}"
        return {
            "ok": True,
            "url": f"ws://127.0.0.1:{self.port}/link/?ticket={ticket}&app_id={APP_ID}",
        }

    def _m_chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, text = params.get("channel"), params.get("text")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if not text and not params.get("blocks"):
            return {"ok": False, "error": "no_text"}
        if len(str(text)) > 40000:
            return {"ok": False, "error": "msg_too_long"}
        ts = self.next_ts()
        message = {"type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID, "text": text, "ts": ts}
        if params.get("thread_ts"):
            message["thread_ts"] = params["thread_ts"]
        self.posted.append({"channel": channel, **message})
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _m_chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        for message in self.posted:
            if message["channel"] == params.get("channel") and message["ts"] == params.get("ts"):
                message["text"] = params.get("text")
                message.setdefault("edits", 0)
                message["edits"] += 1
                return {
                    "ok": True,
                    "channel": message["channel"],
                    "ts": message["ts"],
                    "text": message["text"],
                }
        return {"ok": False, "error": "message_not_found"}

    def _m_conversations_info(self, params: dict[str, Any]) -> dict[str, Any]:
        channel_id = str(params.get("channel", ""))
        info = self.channels.get(channel_id)
        if info is None:
            kind = {"D": "im", "G": "group"}.get(channel_id[:1], "channel")
            info = {
                "id": channel_id,
                "is_channel": kind == "channel",
                "is_group": kind == "group",
                "is_im": kind == "im",
                "is_mpim": False,
                "is_private": kind != "channel",
            }
        return {"ok": True, "channel": info}

    def _m_files_info(self, params: dict[str, Any]) -> dict[str, Any]:
        found = self.file_objects.get(str(params.get("file", "")))
        if found is None:
            return {"ok": False, "error": "file_not_found"}
        return {"ok": True, "file": found, "comments": [], "response_metadata": {}}

    def _m_users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user_id = str(params.get("user", ""))
        user = self.users.get(user_id)
        if user is None:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": user}

    async def _file(self, request: web.Request) -> web.StreamResponse:
        self.calls.append(ApiCall("files.download", dict(request.query), None))
        found = self.files.get(request.match_info["file_id"])
        auth = request.headers.get("Authorization", "")
        if auth != f"Bearer {BOT_TOKEN}" or not self.files_scope:
            login = "<!DOCTYPE html><html><body>Sign in to Slack</body></html>"
            return web.Response(text=login, content_type="text/html")
        if found is None:
            return web.Response(status=404, text="not found")
        if self.files_redirect:
            raise web.HTTPFound(self.files_redirect + request.path)
        content, mimetype = found
        return web.Response(body=content, content_type=mimetype)

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        if self.handshake_delay_s:
            await asyncio.sleep(self.handshake_delay_s)
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        self._open.add(ws)
        self.sockets_opened += 1
        hello = {
            "type": "hello",
            "num_connections": len(self._open),
            "debug_info": {"host": "fake", "approximate_connection_time": 18060},
            "connection_info": {"app_id": APP_ID},
        }
        await ws.send_str(json.dumps(hello))
        await self._notify()
        try:
            async for msg in ws:
                if msg.type == WSMsgType.PING and self.ponging:
                    await ws.pong(msg.data)
                if msg.type != WSMsgType.TEXT:
                    continue
                try:
                    body = json.loads(msg.data)
                except json.JSONDecodeError:
                    continue
                if isinstance(body, dict) and "envelope_id" in body:
                    self.acks.setdefault(body["envelope_id"], time.monotonic())
                    self.ack_payloads.append(body)
                    await self._notify()
        finally:
            self._open.discard(ws)
            await self._notify()
        return ws
