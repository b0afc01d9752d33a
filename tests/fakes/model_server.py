"""A scripted model server on 127.0.0.1 speaking the Anthropic, OpenAI and Ollama chat APIs.

Tests drive the real `anthropic` and `litellm` clients against it:

    with FakeModelServer() as server:
        server.script(tool_reply("memory_search", {"query": "dentist"}), text_reply("Tuesday."))
        client = AnthropicClient(api_key="test-key", base_url=server.url)
        ...
        server.requests[0].body["tools"]  # every request, in order, as the server received it

Routes: `POST /v1/messages` (Anthropic; `x-api-key` or `Authorization: Bearer`, and the
`anthropic-version` header required), `POST /v1/chat/completions` or `/chat/completions`
(OpenAI), and `POST /api/chat` (Ollama, no key). All stream or answer in one JSON body, in the
exact shape of the real APIs: Anthropic SSE events message_start … message_stop, OpenAI
`data: {chunk}` lines ending `data: [DONE]`, Ollama JSON lines ending `"done": true`, with tool
calls and usage.

Faults a real server or a proxy in front of it produces are scripted with `fault_reply(kind)`:
"html" (a 200 web page), "empty" (a 200 with no body), "malformed_json" (a 200 cut inside its
JSON), "garbage_stream" (a 200 event stream of events that are not the API's), "keepalive_only"
(a 200 stream of SSE comments every `chunk_delay_s`, never any content, until the client leaves),
"cut_off" (the answer's first words, then a clean end without the final event / finish_reason),
and "echo_key" (a 400 whose message repeats the key the client sent). `refuse_long_prompts`
answers like a server with a small context window.

Each request takes the next `Reply` from the script; `server.respond_with(fn)` answers instead with
`fn(request)` for replies that depend on what was sent. An exhausted script answers 400 so a test
that sends one request too many fails loudly rather than retrying.

Usage is computed, not scripted: tokens are estimated as characters / 4, and prompt caching is
simulated honestly. For Anthropic, the prefix up to each `cache_control` marker (tools, then
system, then messages) is remembered per model; a later request whose content starts with a
remembered prefix (looked up at most 20 blocks before one of its markers, as the real API does)
reports those tokens as `cache_read_input_tokens`, and the tokens up to its last marker beyond
that as `cache_creation_input_tokens`. For OpenAI, caching is automatic: any previously seen
prefix counts as `prompt_tokens_details.cached_tokens`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal

from tests.fakes.local_server import LocalHTTPServer

Api = Literal["anthropic", "openai", "ollama"]
Fault = Literal[
    "html", "empty", "malformed_json", "garbage_stream", "keepalive_only", "cut_off", "echo_key"
]

_SECRET_HEADERS = {"authorization", "x-api-key", "api-key"}
_CACHE_LOOKBACK_BLOCKS = 20

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_OPENAI_ERROR_CODES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "permission_denied"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}
_DEFAULT_ERROR_MESSAGES = {
    400: "Invalid request.",
    401: "invalid x-api-key",
    403: "Permission denied.",
    404: "model not found",
    429: "Rate limited. Please try again later.",
    500: "Internal server error",
    529: "Overloaded",
}
_OPENAI_FINISH_REASONS = {
    "end_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "stop_sequence": "stop",
    "refusal": "content_filter",
}


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the newest user message of a request body (tool results excluded), in the
    Anthropic or OpenAI shape."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [b.get("text", "") for b in content or [] if b.get("type") == "text"]
        if texts:
            return "".join(texts)
    return ""


@dataclass(frozen=True)
class ScriptedToolCall:
    name: str
    input: Mapping[str, Any]
    id: str | None = None  # generated when None


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Build with `text_reply`, `tool_reply` or `error_reply`."""

    text: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    stop_reason: str | None = None  # Anthropic vocabulary; default end_turn, or tool_use
    status: int = 200
    error_message: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # before the response starts (trips a client timeout)
    chunk_delay_s: float = 0.0  # between streamed events (lets a test cancel mid-stream)
    fail_mid_stream: bool = False  # stream the text, then an error event / a broken connection
    output_tokens: int | None = None  # default: estimated from the text and tool inputs
    fault: Fault | None = None  # answer with this fault instead (see the module docstring)


def text_reply(text: str, **options: Any) -> Reply:
    return Reply(text=text, **options)


def tool_reply(
    name: str, input: Mapping[str, Any], *, id: str | None = None, text: str = "", **options: Any
) -> Reply:
    """A reply calling one tool, optionally after some text. For several calls, build a `Reply`
    with `tool_calls=(ScriptedToolCall(...), ...)`."""
    return Reply(text=text, tool_calls=(ScriptedToolCall(name, input, id),), **options)


def error_reply(
    status: int, message: str | None = None, *, retry_after: float | None = None, **options: Any
) -> Reply:
    headers = dict(options.pop("headers", {}))
    if retry_after is not None:
        headers["retry-after"] = f"{retry_after:g}"
    return Reply(status=status, error_message=message, headers=headers, **options)


def fault_reply(fault: Fault, text: str = "The answer starts here and", **options: Any) -> Reply:
    """A reply with `fault`; `text` is what a "cut_off" stream sends before it ends."""
    if fault == "echo_key":
        options.setdefault("status", 400)
    return Reply(text=text, fault=fault, **options)


def refuse_long_prompts(
    max_chars: int, answer: Reply | None = None, *, status: int = 400
) -> Callable[[RecordedRequest], Reply]:
    """A responder for a server with a small context window: a request whose messages are longer
    than `max_chars` gets `status` — 400 "prompt is too long", or 413 "Request exceeds the
    maximum allowed number of bytes" as Anthropic words it; any other gets `answer` ("OK.")."""

    def respond(request: RecordedRequest) -> Reply:
        size = len(_canonical(request.body.get("messages", [])))
        if size > max_chars and status == 413:
            return error_reply(413, "Request exceeds the maximum allowed number of bytes.")
        if size > max_chars:
            tokens, limit = size // 4, max_chars // 4
            return error_reply(status, f"prompt is too long: {tokens} tokens > {limit} maximum")
        return answer or text_reply("OK.")

    return respond


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received. Secret headers are replaced by "<redacted>"."""

    api: Api
    path: str
    headers: Mapping[str, str]  # lower-cased names
    body: Mapping[str, Any]
    auth: Literal["x-api-key", "bearer"] | None

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream", self.api == "ollama"))  # Ollama streams by default

    def last_user_text(self) -> str:
        """The text of the newest user message (tool results excluded), in either API's shape."""
        return last_user_text(self.body)

    def images(self) -> list[DecodedImage]:
        """Every image block of the request, decoded (Anthropic `image` blocks with a base64
        source, OpenAI `image_url` parts with a data URL), in order."""
        return [decode_image_block(b) for b in _image_blocks(self.body)]

    def system_text(self) -> str:
        """The system prompt as one string, in either API's shape."""
        if self.api == "anthropic":
            system = self.body.get("system", "")
            if isinstance(system, str):
                return system
            return "\n".join(b.get("text", "") for b in system)
        parts = []
        for message in self.body.get("messages", []):
            if message.get("role") in ("system", "developer"):
                content = message.get("content")
                if isinstance(content, str):
                    parts.append(content)
                else:
                    parts.extend(b.get("text", "") for b in content or [])
        return "\n".join(parts)


Responder = Callable[[RecordedRequest], Reply]


class FakeModelServer(LocalHTTPServer):
    """A background-thread HTTP server answering model requests from a script.

    `api_key`, when set, is the only key accepted (as `x-api-key` or `Authorization: Bearer`);
    others get 401. Unset, any key is accepted but one must be sent to the Anthropic route.
    """

    def __init__(self, script: Iterable[Reply] = (), *, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.requests: list[RecordedRequest] = []
        self.aborted_streams = 0  # streams whose client went away before the end
        self._script: deque[Reply] = deque(script)
        self._responder: Responder | None = None
        self._seen_prefixes: set[str] = set()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        super().__init__(self._handler_class())

    # -- lifecycle and addresses --------------------------------------------------------------

    @property
    def url(self) -> str:
        """The Anthropic SDK's `base_url` (it appends `/v1/messages`)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        """An OpenAI client's base URL / litellm's `api_base` (`.../v1`)."""
        return f"{self.url}/v1"

    def stop(self) -> None:
        self._closing.set()  # wakes handlers sleeping in a scripted delay
        super().stop()

    # -- scripting -----------------------------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one."""
        with self._lock:
            self._script.extend(replies)

    def respond_with(self, responder: Responder | None) -> None:
        """Answer every request with `responder(request)` (takes precedence over the queue)."""
        self._responder = responder

    @property
    def pending(self) -> int:
        """Scripted replies not yet used."""
        with self._lock:
            return len(self._script)

    def _next_reply(self, request: RecordedRequest) -> Reply:
        if self._responder is not None:
            return self._responder(request)
        with self._lock:
            if self._script:
                return self._script.popleft()
        used = len(self.requests)
        return error_reply(400, f"FakeModelServer: script exhausted at request {used}")

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):04d}"

    # -- usage and prompt caching ---------------------------------------------------------------

    def _prefix_usage(
        self, model: str, blocks: list[tuple[str, bool]], automatic: bool
    ) -> _PrefixUsage:
        """Input token accounting for the request's blocks (canonical text, cache marker)."""
        tokens = [max(1, len(text) // 4) for text, _ in blocks]
        hashes: list[str] = []
        running = hashlib.sha256(model.encode())
        for text, _ in blocks:
            running.update(b"\x00" + text.encode())
            hashes.append(running.hexdigest())
        if automatic:
            breakpoints = list(range(len(blocks)))
        else:
            breakpoints = [i for i, (_, marked) in enumerate(blocks) if marked]

        def reachable(i: int) -> bool:
            return automatic or any(0 <= bp - i < _CACHE_LOOKBACK_BLOCKS for bp in breakpoints)

        with self._lock:
            hits = [i for i, h in enumerate(hashes) if h in self._seen_prefixes and reachable(i)]
            self._seen_prefixes.update(hashes[bp] for bp in breakpoints)
        read_end = max(hits) + 1 if hits else 0
        write_end = (
            max(read_end, breakpoints[-1] + 1) if breakpoints and not automatic else read_end
        )
        return _PrefixUsage(
            input=sum(tokens[write_end:]),
            cache_read=sum(tokens[:read_end]),
            cache_write=sum(tokens[read_end:write_end]),
        )

    # -- the HTTP handler ----------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                path = self.path.split("?", 1)[0].rstrip("/")
                api: Api
                if path == "/v1/messages":
                    api = "anthropic"
                elif path in ("/v1/chat/completions", "/chat/completions"):
                    api = "openai"
                elif path == "/api/chat":
                    api = "ollama"
                else:
                    self._send_json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send_error(api, error_reply(400, "body is not JSON"))
                    return
                request = self._record(api, path, body)
                problem = self._check_request(request)
                if problem is not None:
                    self._send_error(api, problem)
                    return
                reply = server._next_reply(request)
                if reply.delay_s and server._closing.wait(reply.delay_s):
                    return
                if reply.fault is not None and reply.fault != "cut_off":
                    self._send_fault(api, reply)
                elif reply.status >= 400:
                    self._send_error(api, reply)
                elif api == "anthropic":
                    _AnthropicReply(server, self, request, reply).send()
                elif api == "openai":
                    _OpenAIReply(server, self, request, reply).send()
                else:
                    _OllamaReply(server, self, request, reply).send()

            def _record(self, api: Api, path: str, body: dict[str, Any]) -> RecordedRequest:
                headers = {
                    k.lower(): ("<redacted>" if k.lower() in _SECRET_HEADERS else v)
                    for k, v in self.headers.items()
                }
                auth: Literal["x-api-key", "bearer"] | None = None
                if self.headers.get("x-api-key"):
                    auth = "x-api-key"
                elif (self.headers.get("Authorization") or "").startswith("Bearer "):
                    auth = "bearer"
                request = RecordedRequest(api, path, headers, body, auth)
                with server._lock:
                    server.requests.append(request)
                return request

            def _check_request(self, request: RecordedRequest) -> Reply | None:
                key = self.headers.get("x-api-key") or ""
                bearer = self.headers.get("Authorization") or ""
                if bearer.startswith("Bearer "):
                    key = key or bearer.removeprefix("Bearer ")
                if request.api == "anthropic" and not key:
                    return error_reply(401, "x-api-key header is required")
                if request.api != "ollama" and server.api_key not in (None, key):
                    return error_reply(401, "invalid x-api-key")
                if request.api == "anthropic" and not self.headers.get("anthropic-version"):
                    return error_reply(400, "anthropic-version: header is required")
                if not request.body.get("model") or not request.body.get("messages"):
                    return error_reply(400, "model and messages are required")
                for block in _image_blocks(request.body):
                    try:  # as the real APIs do: an image that does not decode is refused
                        decode_image_block(block)
                    except ValueError as exc:
                        return error_reply(400, f"Could not process image: {exc}")
                return None

            def _send_error(self, api: Api, reply: Reply) -> None:
                message = reply.error_message or _DEFAULT_ERROR_MESSAGES.get(reply.status, "Error")
                payload: dict[str, Any]
                if api == "anthropic":
                    kind = _ANTHROPIC_ERROR_TYPES.get(reply.status, "api_error")
                    payload = {
                        "type": "error",
                        "error": {"type": kind, "message": message},
                        "request_id": server._new_id("req_fake_"),
                    }
                elif api == "ollama":
                    payload = {"error": message}
                else:
                    kind, code = _OPENAI_ERROR_CODES.get(reply.status, ("server_error", None))
                    error = {"message": message, "type": kind, "param": None, "code": code}
                    payload = {"error": error}
                self._send_json(reply.status, payload, reply.headers)

            def _send_fault(self, api: Api, reply: Reply) -> None:
                fault = reply.fault
                if fault == "echo_key":
                    sent = self.headers.get("x-api-key") or self.headers.get("Authorization") or ""
                    sent = sent.removeprefix("Bearer ")
                    message = f"Incorrect API key provided: {sent}. Check the key and try again."
                    self._send_error(api, replace(reply, error_message=message))
                elif fault == "html":
                    page = b"<!DOCTYPE html><html><body><h1>Welcome to nginx!</h1></body></html>"
                    self._send_raw(200, "text/html", page)
                elif fault == "empty":
                    self._send_raw(200, "application/json", b"")
                elif fault == "malformed_json":
                    cut = b'{"id": "msg_fake_0001", "type": "message", "content": [{"type": "te'
                    self._send_raw(200, "application/json", cut)
                elif fault == "garbage_stream":
                    garbage = [
                        b"event: message_start\ndata: {not json at all\n\n",
                        b"data: \x01\x02 binary garbage \xff\n\n",
                        b"event: content_block_delta\ndata: [1, 2, 3]\n\n",
                        b'data: {"unexpected": true}\n\n',
                    ]
                    self.send_stream(reply.headers, iter(garbage), reply.chunk_delay_s)
                elif fault == "keepalive_only":
                    beats = itertools.repeat(b": keep-alive\n\n")
                    self.send_stream(reply.headers, beats, reply.chunk_delay_s or 0.1)

            def _send_raw(self, status: int, content_type: str, raw: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _send_json(
                self, status: int, payload: Mapping[str, Any], headers: Mapping[str, str] = {}
            ) -> None:
                raw = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test): nothing to tell it

            def send_stream(
                self,
                headers: Mapping[str, str],
                events: Iterable[bytes],
                delay_s: float,
                *,
                drop_at_end: bool = False,
                content_type: str = "text/event-stream",
            ) -> None:
                """Send server-sent events in chunked encoding, as the real APIs do. With
                `drop_at_end` the connection closes without the final chunk: the client sees
                an incomplete body, as when a connection breaks."""
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Transfer-Encoding", "chunked")
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    for raw in events:
                        if delay_s and server._closing.wait(delay_s):
                            self.close_connection = True
                            return
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
                        self.wfile.flush()
                    if drop_at_end:
                        self.close_connection = True
                        return
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                    with server._lock:
                        server.aborted_streams += 1

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep pytest output clean

        return Handler


@dataclass(frozen=True)
class DecodedImage:
    """An image block as the server decoded it."""

    media_type: str  # as declared in the request
    format: str  # as Pillow found it: "JPEG", "PNG", …
    width: int
    height: int
    size: int  # bytes, decoded


_IMAGE_FORMATS = {
    "image/jpeg": "JPEG",
    "image/png": "PNG",
    "image/webp": "WEBP",
    "image/gif": "GIF",
}
_MAX_IMAGE_BYTES = 5 * 1024 * 1024  # Anthropic's cap on one image's base64 data


def _image_blocks(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    blocks = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            blocks.extend(b for b in content if b.get("type") in ("image", "image_url"))
    return blocks


def decode_image_block(block: Mapping[str, Any]) -> DecodedImage:
    """Decode an Anthropic `image` block or an OpenAI `image_url` part; ValueError (with the
    reason) when it is not a valid image of the declared type within the size cap."""
    import base64
    import binascii
    import io

    from PIL import Image

    if block.get("type") == "image":
        source = block.get("source") or {}
        if source.get("type") != "base64":
            raise ValueError("only base64 image sources are supported here")
        media_type, data = str(source.get("media_type")), str(source.get("data"))
    else:
        url = str((block.get("image_url") or {}).get("url", ""))
        match = re.fullmatch(r"data:([\w/+.-]+);base64,(.*)", url, re.DOTALL)
        if not match:
            raise ValueError("image_url must be a base64 data URL")
        media_type, data = match.group(1), match.group(2)
    if media_type not in _IMAGE_FORMATS:
        raise ValueError(f"unsupported media type {media_type}")
    if len(data) > _MAX_IMAGE_BYTES:
        raise ValueError(f"image exceeds 5 MB maximum: {len(data)} bytes")
    try:
        raw = base64.b64decode(data, validate=True)
        with Image.open(io.BytesIO(raw)) as image:
            image.load()
            found = image.format or ""
            width, height = image.size
    except (binascii.Error, OSError, ValueError) as exc:
        raise ValueError(f"the image data does not decode ({type(exc).__name__})") from None
    if found != _IMAGE_FORMATS[media_type]:
        raise ValueError(f"declared {media_type} but the data is {found}")
    return DecodedImage(media_type, found, width, height, len(raw))


@dataclass(frozen=True)
class _PrefixUsage:
    input: int
    cache_read: int
    cache_write: int


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _without_cache_control(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _text_pieces(text: str) -> list[str]:
    """Split text into word-sized deltas, the way a model streams it."""
    return re.findall(r"\s*\S+|\s+", text) or []


def _json_pieces(raw: str) -> list[str]:
    size = max(1, len(raw) // 3)
    return [raw[i : i + size] for i in range(0, len(raw), size)]


def _estimate_output_tokens(reply: Reply) -> int:
    if reply.output_tokens is not None:
        return reply.output_tokens
    chars = len(reply.text) + sum(len(_canonical(c.input)) for c in reply.tool_calls)
    return max(1, chars // 4)


class _AnthropicReply:
    def __init__(
        self,
        server: FakeModelServer,
        handler: Any,
        request: RecordedRequest,
        reply: Reply,
    ) -> None:
        self.server, self.handler, self.request, self.reply = server, handler, request, reply
        self.tool_ids = [c.id or server._new_id("toolu_fake_") for c in reply.tool_calls]

    def usage(self) -> dict[str, int]:
        body = self.request.body
        blocks: list[tuple[str, bool]] = []
        for tool in body.get("tools", []):
            blocks.append((_canonical(_without_cache_control(tool)), "cache_control" in tool))
        system = body.get("system")
        if isinstance(system, str):
            blocks.append((system, False))
        for block in system or []:
            if isinstance(block, dict):
                marked = "cache_control" in block
                blocks.append((_canonical(_without_cache_control(block)), marked))
        for i, message in enumerate(body.get("messages", [])):
            content = message.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            for block in content or []:
                text = f"{i}:{message.get('role')}:{_canonical(_without_cache_control(block))}"
                blocks.append((text, "cache_control" in block))
        usage = self.server._prefix_usage(self.request.model, blocks, automatic=False)
        return {
            "input_tokens": usage.input,
            "cache_creation_input_tokens": usage.cache_write,
            "cache_read_input_tokens": usage.cache_read,
            "output_tokens": _estimate_output_tokens(self.reply),
        }

    def stop_reason(self) -> str:
        return self.reply.stop_reason or ("tool_use" if self.reply.tool_calls else "end_turn")

    def content(self) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if self.reply.text:
            blocks.append({"type": "text", "text": self.reply.text})
        for call, call_id in zip(self.reply.tool_calls, self.tool_ids, strict=True):
            blocks.append(
                {"type": "tool_use", "id": call_id, "name": call.name, "input": dict(call.input)}
            )
        return blocks

    def send(self) -> None:
        headers = {"request-id": self.server._new_id("req_fake_"), **self.reply.headers}
        message = {
            "id": self.server._new_id("msg_fake_"),
            "type": "message",
            "role": "assistant",
            "model": self.request.model,
            "content": self.content(),
            "stop_reason": self.stop_reason(),
            "stop_sequence": None,
            "usage": self.usage(),
        }
        if not self.request.stream:
            self.handler._send_json(200, message, headers)
            return
        events = (
            f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
            for event, data in self.events(message)
        )
        self.handler.send_stream(headers, events, self.reply.chunk_delay_s)

    def events(self, message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        usage = message["usage"]
        start_usage = {**usage, "output_tokens": 1}
        start = {**message, "content": [], "stop_reason": None, "usage": start_usage}
        yield _event("message_start", message=start)
        yield _event("ping")
        blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        if self.reply.text:
            deltas = [{"type": "text_delta", "text": p} for p in _text_pieces(self.reply.text)]
            blocks.append(({"type": "text", "text": ""}, deltas))
        for call, call_id in zip(self.reply.tool_calls, self.tool_ids, strict=True):
            pieces = ["", *_json_pieces(json.dumps(dict(call.input)))]
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
            block = {"type": "tool_use", "id": call_id, "name": call.name, "input": {}}
            blocks.append((block, deltas))
        for index, (block, deltas) in enumerate(blocks):
            yield _event("content_block_start", index=index, content_block=block)
            for delta in deltas:
                yield _event("content_block_delta", index=index, delta=delta)
            if self.reply.fail_mid_stream or self.reply.fault == "cut_off":
                break
            yield _event("content_block_stop", index=index)
        if self.reply.fault == "cut_off":
            return  # the stream ends cleanly, without message_delta / message_stop
        if self.reply.fail_mid_stream:
            yield _event("error", error={"type": "overloaded_error", "message": "Overloaded"})
            return
        stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
        yield _event("message_delta", delta=stop, usage=usage)
        yield _event("message_stop")


def _event(kind: str, **data: Any) -> tuple[str, dict[str, Any]]:
    return kind, {"type": kind, **data}


class _OpenAIReply:
    def __init__(
        self,
        server: FakeModelServer,
        handler: Any,
        request: RecordedRequest,
        reply: Reply,
    ) -> None:
        self.server, self.handler, self.request, self.reply = server, handler, request, reply
        self.tool_ids = [c.id or server._new_id("call_fake_") for c in reply.tool_calls]
        self.id = server._new_id("chatcmpl-fake-")
        self.created = int(time.time())

    def usage(self) -> dict[str, Any]:
        body = self.request.body
        blocks = [(_canonical(tool), False) for tool in body.get("tools", [])]
        for i, message in enumerate(body.get("messages", [])):
            blocks.append((f"{i}:{_canonical(message)}", False))
        usage = self.server._prefix_usage(self.request.model, blocks, automatic=True)
        prompt = usage.input + usage.cache_read + usage.cache_write
        completion = _estimate_output_tokens(self.reply)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read},
        }

    def finish_reason(self) -> str:
        stop = self.reply.stop_reason or ("tool_use" if self.reply.tool_calls else "end_turn")
        return _OPENAI_FINISH_REASONS.get(stop, stop)

    def tool_calls(self) -> list[dict[str, Any]]:
        return [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(dict(call.input))},
            }
            for call, call_id in zip(self.reply.tool_calls, self.tool_ids, strict=True)
        ]

    def send(self) -> None:
        if not self.request.stream:
            message: dict[str, Any] = {"role": "assistant", "content": self.reply.text or None}
            if self.reply.tool_calls:
                message["tool_calls"] = self.tool_calls()
            choice = {"index": 0, "message": message, "finish_reason": self.finish_reason()}
            payload = {
                "id": self.id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.request.model,
                "choices": [choice],
                "usage": self.usage(),
            }
            self.handler._send_json(200, payload, self.reply.headers)
            return
        events = (
            f"data: {'[DONE]' if chunk is None else json.dumps(chunk)}\n\n".encode()
            for chunk in self.chunks()
        )
        drop = self.reply.fail_mid_stream
        self.handler.send_stream(
            self.reply.headers,
            events,
            self.reply.chunk_delay_s,
            drop_at_end=drop,
            content_type="application/x-ndjson",
        )

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.request.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    def chunks(self) -> Iterator[dict[str, Any] | None]:
        yield self.chunk({"role": "assistant", "content": ""})
        for piece in _text_pieces(self.reply.text):
            yield self.chunk({"content": piece})
        if self.reply.fail_mid_stream or self.reply.fault == "cut_off":
            return  # the stream ends (or the connection drops) without finish_reason or [DONE]
        for index, call in enumerate(self.tool_calls()):
            function = call["function"]
            head = {"index": index, "id": call["id"], "type": "function"}
            head["function"] = {"name": function["name"], "arguments": ""}
            yield self.chunk({"tool_calls": [head]})
            for piece in _json_pieces(function["arguments"]):
                fragment = {"index": index, "function": {"arguments": piece}}
                yield self.chunk({"tool_calls": [fragment]})
        yield self.chunk({}, self.finish_reason())
        options = self.request.body.get("stream_options") or {}
        if options.get("include_usage"):
            final = self.chunk({})
            final["choices"] = []
            final["usage"] = self.usage()
            yield final
        yield None


class _OllamaReply:
    def __init__(
        self,
        server: FakeModelServer,
        handler: Any,
        request: RecordedRequest,
        reply: Reply,
    ) -> None:
        self.server, self.handler, self.request, self.reply = server, handler, request, reply

    def line(self, message: dict[str, Any], *, done: bool = False) -> dict[str, Any]:
        line: dict[str, Any] = {
            "model": self.request.model,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "message": {"role": "assistant", **message},
            "done": done,
        }
        if done:
            body = self.request.body
            prompt = sum(max(1, len(_canonical(m)) // 4) for m in body.get("messages", []))
            line["done_reason"] = "length" if self.reply.stop_reason == "max_tokens" else "stop"
            line["prompt_eval_count"] = prompt
            line["eval_count"] = _estimate_output_tokens(self.reply)
        return line

    def tool_calls(self) -> list[dict[str, Any]]:
        # Ollama sends whole calls, arguments as an object, and no ids.
        return [
            {"function": {"name": c.name, "arguments": dict(c.input)}}
            for c in self.reply.tool_calls
        ]

    def send(self) -> None:
        calls = {"tool_calls": self.tool_calls()} if self.reply.tool_calls else {}
        if not self.request.stream:
            message = {"content": self.reply.text, **calls}
            self.handler._send_json(200, self.line(message, done=True), self.reply.headers)
            return
        lines = [self.line({"content": p}) for p in _text_pieces(self.reply.text)]
        if not self.reply.fail_mid_stream and self.reply.fault != "cut_off":
            if calls:
                lines.append(self.line({"content": "", **calls}))
            lines.append(self.line({"content": ""}, done=True))
        events = (json.dumps(line).encode() + b"\n" for line in lines)
        drop = self.reply.fail_mid_stream
        self.handler.send_stream(
            self.reply.headers,
            events,
            self.reply.chunk_delay_s,
            drop_at_end=drop,
            content_type="application/x-ndjson",
        )
