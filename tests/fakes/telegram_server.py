"""A fake Telegram Bot API server on 127.0.0.1, speaking the real wire format.

python-telegram-bot talks to it unchanged (`base_url=f"{server.url}/bot"`):

    with FakeTelegram() as tg:
        tg.push(tg.private_text("hello"))          # an update, as Telegram would deliver it
        ...                                         # the adapter under test polls and replies
        tg.sent[-1].text, tg.calls_to("sendMessage")[0].params

Methods: getMe, getUpdates (long poll: `offset` confirms every update below it, `timeout`
waits for new ones; a newer getUpdates ends an older one with 409, as Telegram does; 409 while
a webhook is set), deleteWebhook / setWebhook (`drop_pending_updates` empties the queue),
getWebhookInfo, setMyCommands, sendMessage, editMessageText, sendChatAction, getFile, and the
file download path `/file/bot<token>/<file_path>`. Requests may be form-encoded (what
python-telegram-bot sends) or JSON. HTML is checked like Telegram does: only Telegram's tags,
properly nested, else 400 "can't parse entities"; a text over 4,096 characters after entity
parsing is refused; `message_thread_id=1` (the General topic) is refused for sends ("message
thread not found") but accepted for chat actions.

Test controls (`method` "file" is the file download; a `description` starting with "<" is
sent as an HTML page): `fail_next(method, status, n, retry_after=…)`, `disconnect_next(method, n)`
(close the connection without an answer), `stall_next("getUpdates", n)` (accept and never
answer), `refuse_html_marker` (HTML texts containing it are refused as unparseable), `calls`
(every request: method and decoded params), `sent` (messages the bot sent, edited in place),
`confirmed_offset`, and builders for realistic updates (private, group, forum topic, commands
with entities, replies to the bot, photo, document, voice, album, sticker, location).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from tests.fakes.local_server import LocalHTTPServer

TOKEN = "123456789:AAFakeTokenForTestsOnly_abcdefghij"
BOT_ID = 123456789
BOT_USERNAME = "pinch_test_bot"
OWNER = {"id": 111, "is_bot": False, "first_name": "Olive", "username": "olive"}
STRANGER = {"id": 222, "is_bot": False, "first_name": "Sam", "username": "sam"}
GROUP = {"id": -1001234567890, "title": "Friends", "type": "supergroup"}
FORUM = {"id": -1009876543210, "title": "Projects", "type": "supergroup", "is_forum": True}
MB = 1024 * 1024
BOT_API_DOWNLOAD_LIMIT = 20 * MB

# Params that Telegram reads as JSON values; everything else is a string.
_JSON_PARAMS = {
    "offset",
    "limit",
    "timeout",
    "allowed_updates",
    "drop_pending_updates",
    "commands",
    "message_id",
    "message_thread_id",
    "reply_parameters",
    "reply_to_message_id",
    "link_preview_options",
    "disable_notification",
    "max_connections",
    "reply_markup",
    "entities",
    "scope",
    "allow_sending_without_reply",
}
_TELEGRAM_TAGS = {
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "code",
    "pre",
    "a",
    "blockquote",
    "tg-spoiler",
    "span",
    "tg-emoji",
}


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


@dataclass
class SentMessage:
    chat_id: int
    message_id: int
    text: str  # the text as the user sees it (tags removed when parse_mode was HTML)
    raw: str  # what the bot sent
    parse_mode: str | None
    message_thread_id: int | None
    reply_to_message_id: int | None
    edits: int = 0


class _Failure:
    def __init__(self, status: int, retry_after: int | None, description: str | None) -> None:
        self.status = status
        self.retry_after = retry_after
        self.description = description


class ApiError(Exception):
    def __init__(self, status: int, description: str, parameters: dict[str, Any] | None = None):
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters


class FakeTelegram:
    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.refuse_html_marker = "REFUSE_HTML"
        self.calls: list[Call] = []
        self.sent: list[SentMessage] = []
        self.confirmed_offset = 0
        self.webhook: dict[str, Any] | None = None
        self._updates: list[dict[str, Any]] = []
        self._files: dict[str, tuple[bytes | None, int, str]] = {}
        self._chat_types: dict[int, str] = {}
        self._faults: dict[str, list[_Failure | str]] = {}
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._poll_generation = 0
        self._wakes = 0
        self._ids = itertools.count(1)
        self._update_ids = itertools.count(100)
        self._message_ids = itertools.count(1000)
        self._server = LocalHTTPServer(self._handler_class())

    # -- lifecycle
    @property
    def url(self) -> str:
        """The `api_base_url` to give the adapter."""
        return f"http://127.0.0.1:{self._server.port}"

    def __enter__(self) -> FakeTelegram:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        self._server.stop()

    # -- test controls
    def push(self, *updates: dict[str, Any]) -> None:
        """Queue updates for getUpdates (and wake a waiting long poll)."""
        with self._cond:
            self._updates.extend(updates)
            self._cond.notify_all()

    def fail_next(
        self,
        method: str,
        status: int,
        n: int = 1,
        *,
        retry_after: int | None = None,
        description: str | None = None,
    ) -> None:
        """Answer the next `n` calls of `method` with an error (409, 429 with retry_after, 5xx)."""
        with self._cond:
            fault = _Failure(status, retry_after, description)
            self._faults.setdefault(method, []).extend([fault] * n)

    def disconnect_next(self, method: str, n: int = 1) -> None:
        """Close the connection of the next `n` calls without answering (a network drop)."""
        with self._cond:
            self._faults.setdefault(method, []).extend(["disconnect"] * n)

    def stall_next(self, method: str, n: int = 1) -> None:
        """Accept the next `n` calls and never answer them (until the server stops)."""
        with self._cond:
            self._faults.setdefault(method, []).extend(["stall"] * n)

    def end_long_polls(self) -> None:
        """Answer the getUpdates calls now waiting with no updates (so the next call, and a
        fault queued for it, comes at once instead of after the poll's timeout)."""
        with self._cond:
            self._wakes += 1
            self._cond.notify_all()

    def calls_to(self, method: str) -> list[Call]:
        with self._cond:
            return [c for c in self.calls if c.method == method]

    def wait_for_call(self, method: str, count: int = 1, timeout: float = 5.0) -> list[Call]:
        """Block (in the test thread) until `method` was called `count` times."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                calls = [c for c in self.calls if c.method == method]
                if len(calls) >= count:
                    return calls
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{method} called {len(calls)} times, wanted {count}")
                self._cond.wait(left)

    def pending_update_ids(self) -> list[int]:
        with self._cond:
            return [u["update_id"] for u in self._updates]

    def add_file(self, content: bytes | None, *, size: int | None = None, path: str = "") -> str:
        """Register a downloadable file; `content=None` with a `size` fakes a big file."""
        n = next(self._ids)
        file_id = f"FILE{n}"
        self._files[file_id] = (content, size if size is not None else len(content or b""), path)
        return file_id

    def bot_message(self, sent: SentMessage) -> dict[str, Any]:
        """A message the bot sent, as it appears in `reply_to_message`."""
        return {
            "message_id": sent.message_id,
            "date": int(time.time()),
            "chat": self._chat(sent.chat_id),
            "from": self.bot_user(),
            "text": sent.text,
        }

    # -- update builders (Telegram's own shapes; entities computed as Telegram does)
    def bot_user(self) -> dict[str, Any]:
        return {"id": BOT_ID, "is_bot": True, "first_name": "Pinch", "username": BOT_USERNAME}

    def update(self, message: dict[str, Any], kind: str = "message") -> dict[str, Any]:
        return {"update_id": next(self._update_ids), kind: message}

    def message(
        self,
        text: str | None = None,
        *,
        chat: dict[str, Any] | None = None,
        sender: dict[str, Any] | None = None,
        caption: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        sender = sender or OWNER
        chat = chat or {"id": sender["id"], "type": "private", "first_name": sender["first_name"]}
        self._chat_types[chat["id"]] = chat["type"]
        message: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": sender,
        }
        if text is not None:
            message["text"] = text
            if entities := _entities(text):
                message["entities"] = entities
        if caption is not None:
            message["caption"] = caption
            if entities := _entities(caption):
                message["caption_entities"] = entities
        message.update(extra)
        return message

    def private_text(self, text: str, *, sender: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.update(self.message(text, sender=sender))

    def group_text(
        self, text: str, *, chat: dict[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        return self.update(self.message(text, chat=chat or GROUP, **extra))

    def topic_text(self, text: str, *, thread_id: int, **extra: Any) -> dict[str, Any]:
        """A message in a forum topic: Telegram marks it `is_topic_message` and makes it a reply
        to the topic's creation message."""
        created = {
            "message_id": thread_id,
            "date": int(time.time()) - 60,
            "chat": FORUM,
            "from": STRANGER,
            "message_thread_id": thread_id,
            "forum_topic_created": {"name": "Plans", "icon_color": 7322096},
            "is_topic_message": True,
        }
        return self.update(
            self.message(
                text,
                chat=FORUM,
                message_thread_id=thread_id,
                is_topic_message=True,
                reply_to_message=created,
                **extra,
            )
        )

    def general_topic_text(self, text: str, **extra: Any) -> dict[str, Any]:
        """A message in a forum's General topic: no message_thread_id at all."""
        return self.update(self.message(text, chat=FORUM, **extra))

    def reply_to_bot(self, text: str, sent: SentMessage, **extra: Any) -> dict[str, Any]:
        message = self.message(text, chat=GROUP, reply_to_message=self.bot_message(sent), **extra)
        return self.update(message)

    def photo(
        self,
        content: bytes = b"\xff\xd8\xffJPEG-largest",
        *,
        caption: str | None = None,
        chat: dict[str, Any] | None = None,
        media_group_id: str | None = None,
        size: int | None = None,
    ) -> dict[str, Any]:
        """A photo in three sizes; only the largest carries `content`."""
        sizes = []
        for width, data in ((90, b"small"), (320, b"medium"), (1280, content)):
            faked = width == 1280 and size is not None  # a big file: size only, no bytes
            file_size = size if faked and size is not None else len(data)
            path = f"photos/file_{next(self._ids)}.jpg"
            file_id = self.add_file(None if faked else data, size=file_size, path=path)
            sizes.append(
                {
                    "file_id": file_id,
                    "file_unique_id": f"U{file_id}",
                    "width": width,
                    "height": width * 3 // 4,
                    "file_size": file_size,
                }
            )
        extra: dict[str, Any] = {"photo": sizes}
        if media_group_id:
            extra["media_group_id"] = media_group_id
        return self.update(self.message(None, chat=chat, caption=caption, **extra))

    def document(
        self,
        content: bytes | None,
        *,
        file_name: str = "notes.txt",
        mime_type: str = "text/plain",
        size: int | None = None,
        caption: str | None = None,
        chat: dict[str, Any] | None = None,
        media_group_id: str | None = None,
    ) -> dict[str, Any]:
        n = next(self._ids)
        file_size = size if size is not None else len(content or b"")
        file_id = self.add_file(content, size=file_size, path=f"documents/file_{n}")
        doc = {
            "file_id": file_id,
            "file_unique_id": f"U{file_id}",
            "file_name": file_name,
            "mime_type": mime_type,
            "file_size": file_size,
        }
        extra: dict[str, Any] = {"document": doc}
        if media_group_id:
            extra["media_group_id"] = media_group_id
        return self.update(self.message(None, chat=chat, caption=caption, **extra))

    def voice(self, content: bytes = b"OggS-voice", *, duration: int = 3) -> dict[str, Any]:
        n = next(self._ids)
        file_id = self.add_file(content, path=f"voice/file_{n}.oga")
        voice = {
            "file_id": file_id,
            "file_unique_id": f"U{file_id}",
            "duration": duration,
            "mime_type": "audio/ogg",
            "file_size": len(content),
        }
        return self.update(self.message(None, voice=voice))

    def album(self, count: int, *, caption: str = "Holiday") -> list[dict[str, Any]]:
        """`count` photos sent together: one update each, sharing a media_group_id."""
        group = f"MG{next(self._ids)}"
        return [
            self.photo(
                f"photo-{i}".encode(), caption=caption if i == 0 else None, media_group_id=group
            )
            for i in range(count)
        ]

    def sticker(self) -> dict[str, Any]:
        sticker = {
            "file_id": "STICKER1",
            "file_unique_id": "USTICKER1",
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
            "emoji": "👍",
        }
        return self.update(self.message(None, sticker=sticker))

    def location(self) -> dict[str, Any]:
        return self.update(self.message(None, location={"latitude": 52.52, "longitude": 13.4}))

    # -- the HTTP side
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._dispatch()

            def do_POST(self) -> None:
                self._dispatch()

            def _dispatch(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                file_prefix = f"/file/bot{fake.token}/"
                path = unquote(parts.path)  # PTB quotes the file URL (the token's ":" too)
                if path.startswith(file_prefix):
                    self._download(path[len(file_prefix) :])
                    return
                match = re.fullmatch(r"/bot([^/]+)/(\w+)", parts.path)
                if not match:
                    self._json(404, {"ok": False, "error_code": 404, "description": "Not Found"})
                    return
                token, method = match.groups()
                if token != fake.token:
                    body_json = {"ok": False, "error_code": 401, "description": "Unauthorized"}
                    self._json(401, body_json)
                    return
                params = _decode(self.headers.get("Content-Type", ""), body, parts.query)
                fault = fake._record(method, params)
                if self._cut_off(fault):
                    return
                if isinstance(fault, _Failure):
                    self._error(_failure_error(fault))
                    return
                try:
                    result = fake._call(method, params)
                except ApiError as error:
                    self._error(error)
                    return
                self._json(200, {"ok": True, "result": result})

            def _cut_off(self, fault: object) -> bool:
                """A "disconnect" or "stall" fault: the connection ends without an answer (a
                stall first waits until the server stops)."""
                if fault not in ("disconnect", "stall"):
                    return False
                if fault == "stall":
                    fake._stopping.wait()
                self.close_connection = True
                return True

            def _download(self, file_path: str) -> None:
                fault = fake._record("file", {"file_path": file_path})
                if self._cut_off(fault):
                    return
                if isinstance(fault, _Failure) and (fault.description or "").startswith("<"):
                    page = (fault.description or "").encode()  # a proxy's HTML error page
                    self._send(fault.status, page, "text/html")
                    return
                if isinstance(fault, _Failure):
                    self._error(_failure_error(fault))
                    return
                for content, _size, path in fake._files.values():
                    if path == file_path and content is not None:
                        self._send(200, content, "application/octet-stream")
                        return
                self._json(404, {"ok": False, "error_code": 404, "description": "Not Found"})

            def _error(self, error: ApiError) -> None:
                body: dict[str, Any] = {
                    "ok": False,
                    "error_code": error.status,
                    "description": error.description,
                }
                if error.parameters:
                    body["parameters"] = error.parameters
                self._json(error.status, body)

            def _json(self, status: int, body: dict[str, Any]) -> None:
                self._send(status, json.dumps(body).encode(), "application/json")

            def _send(self, status: int, payload: bytes, content_type: str) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client went away (a cancelled long poll)
                    self.close_connection = True

        return Handler

    def _record(self, method: str, params: dict[str, Any]) -> _Failure | str | None:
        with self._cond:
            self.calls.append(Call(method, params))
            self._cond.notify_all()
            faults = self._faults.get(method)
            return faults.pop(0) if faults else None

    def _call(self, method: str, p: dict[str, Any]) -> Any:
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            raise ApiError(404, "Not Found")
        return handler(p)

    # -- Bot API methods
    def _api_getMe(self, p: dict[str, Any]) -> Any:
        return {
            **self.bot_user(),
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    def _api_getUpdates(self, p: dict[str, Any]) -> Any:
        offset = int(p.get("offset") or 0)
        limit = int(p.get("limit") or 100)
        timeout = float(p.get("timeout") or 0)
        deadline = time.monotonic() + timeout
        with self._cond:
            if self.webhook:
                raise ApiError(
                    409,
                    "Conflict: can't use getUpdates method while webhook is active; "
                    "use deleteWebhook to delete the webhook first",
                )
            self._poll_generation += 1
            generation = self._poll_generation
            wakes = self._wakes
            self._cond.notify_all()
            if offset:
                self._updates = [u for u in self._updates if u["update_id"] >= offset]
                self.confirmed_offset = max(self.confirmed_offset, offset)
            while True:
                if self._poll_generation != generation:
                    raise ApiError(
                        409,
                        "Conflict: terminated by other getUpdates request; make sure that only "
                        "one bot instance is running",
                    )
                if self._stopping.is_set():
                    return []
                if self._updates:
                    return self._updates[:limit]
                left = deadline - time.monotonic()
                if left <= 0 or self._wakes != wakes:
                    return []
                self._cond.wait(left)

    def _api_deleteWebhook(self, p: dict[str, Any]) -> Any:
        with self._cond:
            self.webhook = None
            if p.get("drop_pending_updates"):
                self._updates.clear()
        return True

    def _api_setWebhook(self, p: dict[str, Any]) -> Any:
        url = p.get("url") or ""
        with self._cond:
            if p.get("drop_pending_updates"):
                self._updates.clear()
            self.webhook = {"url": url, "secret_token": p.get("secret_token")} if url else None
            self._cond.notify_all()
        return True

    def _api_getWebhookInfo(self, p: dict[str, Any]) -> Any:
        url = self.webhook["url"] if self.webhook else ""
        return {"url": url, "has_custom_certificate": False, "pending_update_count": 0}

    def _api_setMyCommands(self, p: dict[str, Any]) -> Any:
        commands = p.get("commands")
        if not isinstance(commands, list) or not all(
            re.fullmatch(r"[a-z0-9_]{1,32}", c.get("command", "")) and c.get("description")
            for c in commands
        ):
            raise ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
        return True

    def _api_sendChatAction(self, p: dict[str, Any]) -> Any:
        self._chat_id(p)
        if p.get("action") not in {"typing", "upload_photo", "upload_document", "record_voice"}:
            raise ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    def _api_sendMessage(self, p: dict[str, Any]) -> Any:
        chat_id = self._chat_id(p)
        thread = p.get("message_thread_id")
        if thread == 1:
            raise ApiError(400, "Bad Request: message thread not found")
        text, shown = self._check_text(p)
        reply = p.get("reply_parameters") or {}
        reply_to = reply.get("message_id") or p.get("reply_to_message_id")
        sent = SentMessage(
            chat_id=chat_id,
            message_id=next(self._message_ids),
            text=shown,
            raw=text,
            parse_mode=p.get("parse_mode"),
            message_thread_id=thread,
            reply_to_message_id=reply_to,
        )
        with self._cond:
            self.sent.append(sent)
        result = self.bot_message(sent)
        if thread:
            result["message_thread_id"] = thread
            result["is_topic_message"] = True
        return result

    def _api_editMessageText(self, p: dict[str, Any]) -> Any:
        chat_id = self._chat_id(p)
        message_id = p.get("message_id")
        found = [s for s in self.sent if s.chat_id == chat_id and s.message_id == message_id]
        if not found:
            raise ApiError(400, "Bad Request: message to edit not found")
        text, shown = self._check_text(p)
        sent = found[0]
        if text == sent.raw and p.get("parse_mode") == sent.parse_mode:
            raise ApiError(
                400,
                "Bad Request: message is not modified: specified new message content and reply "
                "markup are exactly the same as a current content and reply markup of the message",
            )
        sent.raw, sent.text, sent.parse_mode = text, shown, p.get("parse_mode")
        sent.edits += 1
        return {**self.bot_message(sent), "edit_date": int(time.time())}

    def _api_getFile(self, p: dict[str, Any]) -> Any:
        file_id = p.get("file_id", "")
        if file_id not in self._files:
            raise ApiError(400, "Bad Request: invalid file_id")
        _content, size, path = self._files[file_id]
        if size > BOT_API_DOWNLOAD_LIMIT:
            raise ApiError(400, "Bad Request: file is too big")
        return {
            "file_id": file_id,
            "file_unique_id": f"U{file_id}",
            "file_size": size,
            "file_path": path or f"files/{file_id}",
        }

    # -- validation helpers
    def _chat_id(self, p: dict[str, Any]) -> int:
        try:
            return int(p["chat_id"])
        except (KeyError, ValueError):
            raise ApiError(400, "Bad Request: chat not found") from None

    def _chat(self, chat_id: int) -> dict[str, Any]:
        kind = self._chat_types.get(chat_id, "private" if chat_id > 0 else "supergroup")
        chat: dict[str, Any] = {"id": chat_id, "type": kind}
        if kind == "private":
            chat["first_name"] = "Olive"
        else:
            chat["title"] = "Group"
        return chat

    def _check_text(self, p: dict[str, Any]) -> tuple[str, str]:
        text = str(p.get("text") or "")
        if not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        shown = text
        if p.get("parse_mode") == "HTML":
            if self.refuse_html_marker and self.refuse_html_marker in text:
                raise ApiError(
                    400,
                    'Bad Request: can\'t parse entities: Unsupported start tag "x" at byte '
                    "offset 0",
                )
            shown = parse_telegram_html(text)
        if len(shown.encode("utf-16-le")) // 2 > 4096:
            raise ApiError(400, "Bad Request: message is too long")
        return text, shown


def _failure_error(fault: _Failure) -> ApiError:
    if fault.status == 429:
        after = fault.retry_after or 1
        return ApiError(
            429,
            fault.description or f"Too Many Requests: retry after {after}",
            {"retry_after": after},
        )
    if fault.status == 409:
        return ApiError(
            409,
            fault.description
            or "Conflict: terminated by other getUpdates request; make sure that only one bot "
            "instance is running",
        )
    return ApiError(fault.status, fault.description or "Internal Server Error")


def _decode(content_type: str, body: bytes, query: str) -> dict[str, Any]:
    if content_type.startswith("application/json") and body:
        return dict(json.loads(body))
    raw = dict(parse_qsl(query))
    if body:
        raw.update(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    params: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _JSON_PARAMS:
            try:
                params[key] = json.loads(value)
            except ValueError:
                params[key] = value
        else:
            params[key] = value
    return params


def _entities(text: str) -> list[dict[str, Any]]:
    """bot_command and mention entities as Telegram computes them (UTF-16 offsets)."""
    found: list[dict[str, Any]] = []

    def offset(i: int) -> int:
        return len(text[:i].encode("utf-16-le")) // 2

    def add(kind: str, start: int, end: int) -> None:
        found.append({"type": kind, "offset": offset(start), "length": offset(end) - offset(start)})

    command = re.match(r"/[A-Za-z0-9_]{1,32}(@[A-Za-z0-9_]{5,32})?", text)
    if command:
        add("bot_command", 0, command.end())
    for match in re.finditer(r"(?<![\w/])@[A-Za-z0-9_]{5,32}", text):
        add("mention", match.start(), match.end())
    return sorted(found, key=lambda e: e["offset"])


class _TelegramHTML(HTMLParser):
    """Telegram's HTML rules: known tags only, properly nested; the visible text is kept."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _TELEGRAM_TAGS:
            self.error = self.error or f'Unsupported start tag "{tag}"'
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.error = self.error or f'Unmatched end tag "{tag}"'
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse_telegram_html(text: str) -> str:
    if re.search(r"&(?!(amp|lt|gt|quot|#\d+|#x[0-9a-fA-F]+);)", text):
        raise ApiError(400, "Bad Request: can't parse entities: Unsupported HTML entity")
    if re.search(r"<(?![a-zA-Z/])", text):
        raise ApiError(400, "Bad Request: can't parse entities: Unexpected '<'")
    parser = _TelegramHTML()
    parser.feed(text)
    parser.close()
    if parser.error or parser.stack:
        error = (
            parser.error or f'Can\'t find end tag corresponding to start tag "{parser.stack[-1]}"'
        )
        raise ApiError(400, f"Bad Request: can't parse entities: {error}")
    return "".join(parser.text)
