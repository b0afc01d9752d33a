"""A fake OpenAI-compatible embeddings server on 127.0.0.1, for driving real clients in tests.

    with FakeEmbeddingsServer(dimensions=8) as server:
        litellm.embedding(model="openai/x", input=["a"], api_base=server.base_url, ...)
        server.requests  # every request body the server saw, in order

Vectors are deterministic: a text always maps to the same (unnormalised) vector, derived from its
SHA-256. Set `server.fail_with = 401 | 429 | 500` (or any status) to answer every request with
that error in the OpenAI error format, `server.error_message` to choose its text, or
`server.delay_s` to sleep before answering (to trip a client timeout). `server.reset()` restores
the defaults.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.local_server import LocalHTTPServer

_ERRORS = {
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    429: ("rate_limit_exceeded", "rate_limit_exceeded", "Rate limit reached for requests."),
    500: ("server_error", None, "The server had an error while processing your request."),
}


def fake_vector(text: str, dimensions: int) -> list[float]:
    """The vector the fake server returns for `text`: stable across runs, values in [-1, 1)."""
    out: list[float] = []
    counter = 0
    while len(out) < dimensions:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        out.extend(v / 2**31 for v in struct.unpack("<8i", digest))
        counter += 1
    return out[:dimensions]


class FakeEmbeddingsServer(LocalHTTPServer):
    """Serves `POST /v1/embeddings` and `POST /embeddings` in a background thread."""

    def __init__(self, dimensions: int = 8) -> None:
        self.dimensions = dimensions
        self.fail_with: int | None = None
        self.delay_s = 0.0
        self.error_message: str | None = None  # overrides the stock message of `fail_with`
        self.requests: list[dict[str, Any]] = []
        self.auth_headers: list[str | None] = []
        self._lock = threading.Lock()
        super().__init__(self._handler_class())

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as its base URL (`.../v1`)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def batch_sizes(self) -> list[int]:
        with self._lock:
            return [len(r["input"]) for r in self.requests]

    def reset(self) -> None:
        """Forget the requests seen and answer normally again."""
        with self._lock:
            self.fail_with = None
            self.error_message = None
            self.delay_s = 0.0
            self.requests.clear()
            self.auth_headers.clear()

    def _respond(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail_with is not None:
            kind, code, message = _ERRORS.get(self.fail_with, ("server_error", None, "Error."))
            message = self.error_message or message
            error = {"message": message, "type": kind, "param": None, "code": code}
            return self.fail_with, {"error": error}
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            error = {"message": "'input' must be a string or a list of strings", "type": "x"}
            return 400, {"error": error}
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(t, self.dimensions)}
            for i, t in enumerate(texts)
        ]
        tokens = sum(len(t.split()) for t in texts)
        return 200, {
            "object": "list",
            "data": data,
            "model": body.get("model", ""),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                if self.path.rstrip("/") not in ("/v1/embeddings", "/embeddings"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                with server._lock:
                    server.requests.append(body)
                    server.auth_headers.append(self.headers.get("Authorization"))
                status, payload = server._respond(body)
                self._send(status, payload)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test): nothing to tell it

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep pytest output clean

        return Handler
