"""A fake OpenAI-compatible speech-to-text server on 127.0.0.1: `POST /v1/audio/transcriptions`.

    with FakeTranscriptionServer() as stt:
        stt.script(Transcription("hello from a walk"), Transcription(status=500))
        VoiceConfig(provider="litellm", model="whisper-1", api_base=stt.url)
        stt.requests[0].file, stt.requests[0].fields["model"]

It reads the request the way OpenAI does — multipart/form-data with a `file` part (the audio,
with its file name) and form fields (`model`, `response_format`, `language`, …) — and answers
`{"text": …}` (with `language` and `duration` for `response_format=verbose_json`). A request
without a bearer key, without a file or with an empty one gets OpenAI's 400/401 error body.
Replies come from the script in order; an exhausted script answers 400.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.local_server import LocalHTTPServer


@dataclass(frozen=True)
class Transcription:
    """One scripted answer."""

    text: str = ""
    language: str | None = None
    status: int = 200
    delay_s: float = 0.0  # before answering (trips a client timeout)


@dataclass(frozen=True)
class TranscriptionRequest:
    path: str
    fields: dict[str, str]
    file_name: str | None
    file: bytes = field(repr=False)
    content_type: str  # of the file part
    authorized: bool  # a bearer key was sent (never recorded)
    received_at: float  # time.monotonic()


class FakeTranscriptionServer(LocalHTTPServer):
    def __init__(self) -> None:
        self.requests: list[TranscriptionRequest] = []
        self._script: deque[Transcription] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        super().__init__(self._handler_class())

    @property
    def url(self) -> str:
        """The `api_base` (OpenAI style, ending in /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Transcription) -> None:
        with self._lock:
            self._script.extend(replies)

    def stop(self) -> None:
        self._closing.set()
        super().stop()

    def _next(self) -> Transcription:
        with self._lock:
            if self._script:
                return self._script.popleft()
        return Transcription(status=400, text="FakeTranscriptionServer: script exhausted")

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                path = self.path.split("?", 1)[0].rstrip("/")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if path not in ("/v1/audio/transcriptions", "/audio/transcriptions"):
                    self._error(404, f"no route {self.path}")
                    return
                authorized = (self.headers.get("Authorization") or "").startswith("Bearer ")
                if not authorized:
                    self._error(401, "You didn't provide an API key.")
                    return
                ctype = self.headers.get("Content-Type") or ""
                if not ctype.startswith("multipart/form-data"):
                    self._error(400, "the request must be multipart/form-data")
                    return
                fields, file_name, data, file_type = _parse_multipart(ctype, body)
                if "model" not in fields:
                    self._error(400, "you must provide a model parameter")
                    return
                if not data:
                    self._error(400, "you must provide a file")
                    return
                request = TranscriptionRequest(
                    path, fields, file_name, data, file_type, authorized, time.monotonic()
                )
                with server._lock:
                    server.requests.append(request)
                reply = server._next()
                if reply.delay_s and server._closing.wait(reply.delay_s):
                    return
                if reply.status >= 400:
                    self._error(reply.status, reply.text or "The server had an error")
                    return
                answer: dict[str, Any] = {"text": reply.text}
                if fields.get("response_format") == "verbose_json" or reply.language:
                    answer["language"] = reply.language or "english"
                self._json(200, answer)

            def _error(self, status: int, message: str) -> None:
                kind = "server_error" if status >= 500 else "invalid_request_error"
                self._json(status, {"error": {"message": message, "type": kind, "code": None}})

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


def _parse_multipart(
    content_type: str, body: bytes
) -> tuple[dict[str, str], str | None, bytes, str]:
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    fields: dict[str, str] = {}
    file_name: str | None = None
    data = b""
    file_type = ""
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        if name == "file":
            file_name = part.get_filename()
            data = payload
            file_type = part.get_content_type()
        elif isinstance(name, str):
            fields[name] = payload.decode("utf-8", "replace")
    return fields, file_name, data, file_type
